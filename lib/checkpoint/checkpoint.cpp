#include "checkpoint/checkpoint.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)
#include <hdf5.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <thread>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "checkpoint/file_blocks.hpp"
#include "comm/progress.hpp"
#include "comm/world.hpp"
#include "core/error.hpp"
#include "core/files.hpp"
#include "core/hdf5.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"

namespace trident::checkpoint {

namespace fs = std::filesystem;
using hdf5::Hid;
using namespace detail;

namespace {
constexpr int64_t kWritePieceBytes = int64_t{1} << 20;  // the largest single write (see save)

std::string dataset_name(const std::string& group, const std::string& name) { return "/" + group + "/" + name; }

std::string step_file(int64_t step) { return fmt::format("step_{:07d}.h5", step); }

// step_<digits>.h5, a name in its folder (no path).
bool is_step_file_name(const std::string& name) {
  if (name.size() <= 8 || name.rfind("step_", 0) != 0 || name.compare(name.size() - 3, 3, ".h5") != 0) return false;
  return std::all_of(name.begin() + 5, name.end() - 3, [](char c) { return c >= '0' && c <= '9'; });
}

// The step_*.h5 names in `dir`, oldest step first (the zero-padded names sort by step); none when
// `dir` is not a folder.
std::vector<std::string> step_files_in(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name.rfind("step_", 0) == 0 && it->path().extension() == ".h5") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// fsync of `path`, a file or a folder (the names in it): what a node's crash cannot take back.
// "" or the error; a file system without the call (EINVAL) has nothing to do.
std::string sync_to_disk(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::strerror(errno);
  const bool synced = sync_file(fd);
  const int error = errno;
  ::close(fd);
  return synced ? "" : std::strerror(error);
}

// A rename made to last: the folder's entries to disk. A failure here finds the file committed
// already; it is said, and the run goes on. False when it failed.
bool sync_folder(const std::string& dir) {
  const std::string error = sync_to_disk(dir);
  if (!error.empty())
    log::warn("checkpoint: fsync of the folder {} failed ({}); a crash of this node now could lose its last rename",
              dir, error);
  return error.empty();
}

}  // namespace

namespace {

// An unfinished save in a checkpoints folder, and "name (size)" for the log.
struct UnfinishedSave {
  fs::path path;
  std::string text;
};

std::vector<UnfinishedSave> find_unfinished_saves(const std::string& dir, const std::string& keep) {
  std::vector<UnfinishedSave> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto name = entry.path().filename().string();
    const bool unfinished_step = name.rfind("step_", 0) == 0 && name.size() > 7 && name.substr(name.size() - 7) == ".h5.tmp";
    // (.trident-seen.*: a start-up's probe, run_folder.cpp, left by a start killed at that moment)
    const bool probe = name.rfind(".trident-seen.", 0) == 0;
    if (!(unfinished_step || probe || name == "latest.tmp") || !entry.is_regular_file(ec)) continue;
    if (!keep.empty() && fs::equivalent(entry.path(), keep, ec)) continue;
    const auto bytes = entry.file_size(ec);
    const std::string size = ec ? "size unknown" : fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
    found.push_back({entry.path(), fmt::format("{} ({})", name, size)});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.text < b.text; });
  return found;
}

}  // namespace

std::vector<std::string> unfinished_saves(const std::string& dir, const std::string& keep) {
  std::vector<std::string> texts;
  for (const auto& save : find_unfinished_saves(dir, keep)) texts.push_back(save.text);
  return texts;
}

std::vector<std::string> remove_unfinished_saves(const std::string& dir, const std::string& keep) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& save : find_unfinished_saves(dir, keep))
    if (fs::remove(save.path, ec)) removed.push_back(save.text);
  return removed;
}

std::vector<std::string> step_files_after(const std::string& dir, int64_t step) {
  std::vector<std::string> later = step_files_in(dir);
  later.erase(later.begin(), std::upper_bound(later.begin(), later.end(), step_file(step)));
  return later;
}

namespace {

// `p` with a suffix of the UTC time (and a count, were that taken): a name nothing has.
fs::path unused_name(const fs::path& p) {
  char when[32] = {0};
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(when, sizeof(when), "%Y%m%dT%H%M%SZ", &utc);
  std::error_code ec;
  fs::path name = p.string() + "." + when;
  for (int n = 1; fs::exists(fs::symlink_status(name, ec)); ++n) name = fmt::format("{}.{}.{}", p.string(), when, n);
  return name;
}

// A folder itself, not a link to one (nor a file).
bool own_folder(const fs::path& p) {
  std::error_code ec;
  return fs::symlink_status(p, ec).type() == fs::file_type::directory;
}

// A retired set of set-aside checkpoints: its step files and `latest` removed (their names added to
// `removed`), then the folder, when nothing else is in it (what a user put there stays). Only a
// folder of its own: nothing is removed through a link.
void retire(const fs::path& old, std::vector<std::string>& removed) {
  if (!own_folder(old)) return;
  std::error_code ec;
  for (const auto& name : step_files_in(old.string()))
    if (fs::remove(old / name, ec)) removed.push_back(name);
  fs::remove(old / "latest", ec);
  fs::remove(old, ec);  // only when empty
}

}  // namespace

SetAside set_aside_other_runs(const std::string& dir, int64_t step, const std::string& keep) {
  SetAside result;
  const fs::path folder(dir), previous = folder / "previous", staging = folder / "previous.new",
                 old = folder / "previous.old";
  std::error_code ec;
  const auto same = [&](const fs::path& a) { return !keep.empty() && fs::equivalent(a, keep, ec); };
  std::string latest;
  if (std::ifstream in(folder / "latest"); in) std::getline(in, latest);
  // The run continues the folder's lineage when it resumes from the file `latest` names; only
  // files of later steps are another run's then. Otherwise (a fresh start, a file elsewhere, an
  // older one of this folder) every step file but the one it resumes from is.
  const bool continues = !latest.empty() && same(folder / latest);
  std::vector<std::string> others;
  for (const auto& name : continues ? step_files_after(dir, step) : step_files_in(dir))
    if (!same(folder / name)) others.push_back(name);
  if (others.empty()) return result;
  // Before anything moves, the names of the swap below are made free: what is there is renamed
  // and left (a user's file or link named previous, the set of a start interrupted while it set
  // checkpoints aside, a set two starts back). Nothing is removed until every file has moved: a
  // failure puts back what moved and what was renamed, so that a refused start changes nothing.
  std::vector<std::pair<fs::path, fs::path>> renamed;  // (from, to), for the undo
  const auto out_of_the_way = [&](const fs::path& p) {
    const fs::path aside = unused_name(p);
    fs::rename(p, aside, ec);
    if (ec) {
      result.failure = fmt::format("renaming {} (in the way) to {} failed ({})", p.string(), aside.string(),
                                   ec.message());
      return fs::path();
    }
    renamed.emplace_back(p, aside);
    result.kept_aside.push_back(aside.filename().string());
    return aside;
  };
  std::error_code undo_ec;
  const bool latest_moves = std::find(others.begin(), others.end(), latest) != others.end();
  bool latest_moved = false, staged = false;
  const auto undo = [&](const std::string& why) {
    std::string unmoved;  // what could not be put back
    const auto put_back = [&](const fs::path& from, const fs::path& to) {
      fs::rename(from, to, undo_ec);
      if (undo_ec) unmoved += fmt::format("{}{} ({})", unmoved.empty() ? "" : ", ", from.string(), undo_ec.message());
    };
    for (const auto& name : result.moved) put_back(staging / name, folder / name);
    if (latest_moved) put_back(staging / "latest", folder / "latest");
    if (staged) fs::remove(staging, undo_ec);  // made by this call (and only when empty)
    for (auto it = renamed.rbegin(); it != renamed.rend(); ++it) put_back(it->second, it->first);
    result.moved.clear();
    result.kept_aside.clear();
    result.failure = unmoved.empty() ? why + "; nothing was moved"
                                     : fmt::format("{}; putting back what had moved failed too, for {}", why, unmoved);
    return result;
  };
  // A file of previous/ this run resumes from comes back into the folder: it is the run's start,
  // which a requeue before the first save resumes from again (--resume auto:PATH finds it here).
  // (Or of a set two starts back, previous.old, which is retired below.)
  fs::path keep_at = keep;
  const fs::path keep_folder = fs::path(keep).parent_path();
  const bool keep_in_old = !keep.empty() && fs::equivalent(keep_folder, old, ec);
  const bool keep_in_previous = keep_in_old || (!keep.empty() && fs::equivalent(keep_folder, previous, ec));
  if (fs::exists(fs::symlink_status(previous, ec)) && !own_folder(previous)) {
    const fs::path aside = out_of_the_way(previous);
    if (aside.empty()) return undo(result.failure);
    if (keep_in_previous) keep_at = aside / fs::path(keep).filename();  // (through the link, renamed)
  }
  if (fs::exists(fs::symlink_status(staging, ec)) && out_of_the_way(staging).empty()) return undo(result.failure);
  // The set two starts back (or whatever has its name), retired once the new set is in place.
  fs::path older;
  if (fs::exists(fs::symlink_status(old, ec)) && (older = out_of_the_way(old)).empty()) return undo(result.failure);
  if (keep_in_old) keep_at = older / fs::path(keep).filename();
  // Staged, so that nothing of the earlier set is removed unless every file moved.
  staged = fs::create_directories(staging, ec);
  for (const auto& name : others) {
    fs::rename(folder / name, staging / name, ec);
    if (ec) return undo(fmt::format("moving {} into {} failed ({})", name, staging.string(), ec.message()));
    result.moved.push_back(name);
  }
  if (latest_moves) {
    fs::rename(folder / "latest", staging / "latest", ec);
    if (ec) return undo(fmt::format("moving latest into {} failed ({})", staging.string(), ec.message()));
    latest_moved = true;
  }
  if (keep_in_previous) {  // after the others moved: a file of its name among them is not replaced
    fs::rename(keep_at, folder / fs::path(keep).filename(), ec);
    if (ec) return undo(fmt::format("moving {} back into {} failed ({})", keep_at.string(), dir, ec.message()));
    result.brought_back = fs::path(keep).filename().string();
  }
  // previous/ -> previous.old, previous.new -> previous, then the old sets removed. Every file has
  // left the folder by now: a failure here only leaves them in previous.new, which is said.
  if (fs::exists(previous, ec)) fs::rename(previous, old, ec);
  if (!ec) fs::rename(staging, previous, ec);
  if (ec)
    result.note = fmt::format("the set-aside checkpoints stay in {}: the swap with {} failed ({})", staging.string(),
                              previous.string(), ec.message());
  if (!older.empty()) {  // gone when it held only trident's files; said as kept aside otherwise
    retire(older, result.replaced);
    const auto said = std::find(result.kept_aside.begin(), result.kept_aside.end(), older.filename().string());
    if (!fs::exists(fs::symlink_status(older, ec)) && said != result.kept_aside.end()) result.kept_aside.erase(said);
  }
  if (!result.note.empty()) return result;
  retire(old, result.replaced);
  sync_folder(previous.string());
  sync_folder(dir);
  return result;
}

namespace {

// Tensors are float32; the RNG states (/rng/cpu) are bytes.
hid_t file_type(at::ScalarType type) { return type == at::kByte ? H5T_STD_U8LE : H5T_IEEE_F32LE; }

}  // namespace

// ---- save ----------------------------------------------------------------------------------
//
// A save has three parts, so that the middle one can run on a thread of its own
// (checkpoint.async): rank 0 lays the file out (HDF5: every dataset created and allocated at a
// fixed place, the file closed again) and tells every rank the places; each rank writes its
// bytes there with pwrite, and checksums them (no HDF5, no MPI); the ranks agree that every write
// succeeded, rank 0 adds the checksums and the metadata as attributes and commits the file.
// HDF5 and MPI calls stay on the main thread: Debian's parallel HDF5 is not thread-safe (the
// data prefetch thread shares it under hdf5::mutex()), and MPI from a second thread would need
// MPI_THREAD_MULTIPLE, whose lock MPICH takes around every call, the training's collectives
// included. A synchronous save runs the same three parts in a row, so both write the same file.

namespace {

// Elements [lo, hi) of dataset `dataset` (its index in creation order) that this rank writes,
// from byte `offset` of the file on, taken from `source` (host memory, hi - lo elements).
struct Piece {
  int64_t dataset = 0, lo = 0, hi = 0, offset = 0;
  at::Tensor source;
};

// A block this rank wrote and its CRC-32: the four numbers per block of the crc32_blocks lists.
struct Block {
  int64_t dataset, begin, end, crc;
};

struct Layout {
  std::string dir, tmp_path, final_path;
  int64_t step = 0;
  std::vector<std::string> names;  // datasets in creation order
  std::vector<Piece> pieces;       // this rank's
};

struct Written {
  std::vector<Block> blocks;
  std::string error;  // "" when every piece is in the file
};

// A barrier the fail-fast watchdog sees a rank blocked in (the commit's: rank 0 alone renames and
// syncs while the others wait), so that a rank stalled in its file I/O is found (comm/progress.hpp).
void barrier(MPI_Comm comm) {
  comm::OpScope op(comm::Op::barrier);
  MPI_CHECK(MPI_Barrier(comm));
}

std::string not_saved(int64_t step, const std::string& failure, const std::string& tmp_path, const std::string& dir) {
  const bool space = failure.find("No space left") != std::string::npos || failure.find("quota") != std::string::npos ||
                     failure.find("File too large") != std::string::npos;
  return fmt::format("checkpoint of step {} not saved: {}. Removed {}; the previous checkpoint and 'latest' are "
                     "unchanged. {} and resume with --resume auto",
                     step, failure, tmp_path,
                     space ? fmt::format("Free space in {} (or raise its quota or file size limit)", dir)
                           : fmt::format("Make sure {} stays a writable folder that every rank sees", dir));
}

// A file whose HDF5 writes failed (disk full, quota) removed. HDF5 cannot close a file whose
// final flush fails (its handle is left broken and crashes at exit): the file is emptied first,
// so the close only writes a little metadata. Returns `failure`, for the caller to agree on.
std::string abandon(Hid& file, const std::string& path, const std::string& failure) {
  std::error_code ignored;
  fs::resize_file(path, 0, ignored);
  file.reset();
  H5Eclear2(H5E_DEFAULT);
  fs::remove(path, ignored);
  return failure;
}

// Rank 0 makes a written file the checkpoint: rename (atomic on one file system), then
// `latest`, then the oldest pruned down to keep_last. Every step reaches the disk before the
// next (the pieces and the attributes did before this): a node that crashes after a commit
// (Lustre, GPFS and local disks keep written data in memory for a while) leaves `latest` naming
// a whole file, and the previous checkpoint is pruned only once the new one is durable. Files of later steps, and those of
// retention.not_this_runs, are not this run's (it started from an earlier step: a resume passed
// over them as damaged, or --resume PATH / never named an earlier start); they are left alone and
// do not count, so the good earlier ones are kept.
void commit(const std::string& dir, const std::string& tmp_path, int64_t step, const Retention& retention) {
  const std::string name = step_file(step);
  fs::rename(tmp_path, dir + "/" + name);
  bool durable = sync_folder(dir);
  const std::string latest_tmp = dir + "/latest.tmp";
  {
    std::ofstream out(latest_tmp);
    out << name << "\n";
    out.close();
    if (!out) fatal_one(fmt::format("checkpoint: cannot write {} ({})", latest_tmp, std::strerror(errno)));
  }
  if (const std::string error = sync_to_disk(latest_tmp); !error.empty()) {
    log::warn("checkpoint: fsync of {} failed ({})", latest_tmp, error);
    durable = false;
  }
  fs::rename(latest_tmp, dir + "/latest");
  durable = sync_folder(dir) && durable;
  // Not known to be on disk: the older checkpoints stay, for a crash to fall back on.
  if (!durable) {
    log::warn("checkpoint: {} kept the checkpoints checkpoint.keep_last would remove, as its commit may not be on disk",
              dir);
    return;
  }
  std::vector<std::string> saved;  // this run's and those it continues, oldest first
  for (const auto& file : step_files_in(dir)) {
    const auto& others = retention.not_this_runs;
    if (file <= name && (file == name || std::find(others.begin(), others.end(), file) == others.end()))
      saved.push_back(file);
  }
  for (size_t i = 0; i + static_cast<size_t>(retention.keep_last) < saved.size(); ++i) fs::remove(dir + "/" + saved[i]);
}

// The datasets of a save in creation order, and which of their elements this rank writes. Every
// rank lists the same datasets (the whole model); only rank 0 creates the file.
class FileLayout {
 public:
  FileLayout(Layout& layout, MPI_Comm comm) : layout_(layout), comm_(comm) {
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
  }

  // Dataset `path` of `shape`; this rank will write its elements [lo, hi) from `source`.
  void add(const std::string& path, const std::vector<int64_t>& shape, int64_t lo, int64_t hi, const at::Tensor& source,
           at::ScalarType type = at::kFloat) {
    if (hi > lo) {
      // The writer copies the source's bytes as they are into the dataset's place: anything but
      // exactly hi - lo contiguous elements of the stored type would spill into the next one.
      TRIDENT_CHECK(source.defined() && source.is_contiguous() && source.scalar_type() == type && source.numel() == hi - lo,
                    fmt::format("checkpoint: the data for {} [{}, {}) is not {} contiguous elements of its type", path, lo, hi,
                                hi - lo));
      layout_.pieces.push_back({static_cast<int64_t>(datasets_.size()), lo, hi, 0, source});
    }
    datasets_.push_back({path, shape, type});
    layout_.names.push_back(path);
  }

  // Every tensor of `params` under `group`; this rank writes the part of its stage's flat buffer
  // it holds (`flat` is elements [shard.begin, shard.end)).
  void add_flat(const std::string& group, const std::vector<TensorEntry>& params, const Shard& shard,
                const at::Tensor& flat) {
    for (const auto& t : params) {
      int64_t lo = 0, hi = 0;
      if (t.stage == shard.stage) {
        lo = std::max(shard.begin, t.offset) - t.offset;
        hi = std::max(lo, std::min(shard.end, t.offset + t.numel) - t.offset);
      }
      add(dataset_name(group, t.name), t.shape, lo, hi, hi > lo ? flat.narrow(0, t.offset + lo - shard.begin, hi - lo) : at::Tensor());
    }
  }

  // Every buffer, written whole by the rank whose shard carries it.
  void add_buffers(const std::vector<TensorEntry>& buffers, const Shard& shard) {
    for (const auto& b : buffers) {
      const auto it = std::find_if(shard.buffers.begin(), shard.buffers.end(),
                                   [&](const auto& p) { return p.first == b.name && b.stage == shard.stage; });
      const bool writes = it != shard.buffers.end();
      add(dataset_name("buffers", b.name), b.shape, 0, writes ? b.numel : 0, writes ? it->second.reshape({-1}) : at::Tensor());
    }
  }

  // Every rank's RNG states, one row each per generator kind (the states of one kind have one
  // size): the CPU generator's, and the CUDA generator's of ranks that train on a GPU. A kind is
  // stored when every rank has one.
  void add_rng_states(const Shard& shard) {
    for (const auto& [name, state] : {std::pair<const char*, at::Tensor>{"/rng/cpu", shard.rng_state},
                                      {"/rng/cuda", shard.cuda_rng_state}}) {
      int everyone = state.defined() ? 1 : 0;
      {
        comm::OpScope op(comm::Op::all_reduce);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &everyone, 1, MPI_INT, MPI_MIN, comm_));
      }
      if (!everyone) continue;
      const int64_t bytes = state.numel();
      int64_t sizes[2] = {bytes, -bytes};  // every rank's row has one size: min == max
      {
        comm::OpScope op(comm::Op::all_reduce);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT64_T, MPI_MIN, comm_));
      }
      TRIDENT_CHECK(sizes[0] == -sizes[1], fmt::format("checkpoint: the ranks' {} states differ in size", name));
      add(name, {size_, bytes}, rank_ * bytes, (rank_ + 1) * bytes, state, at::kByte);
    }
  }

  // Rank 0 creates the file: the groups, then every dataset, each allocated at once at a fixed
  // place and never filled; the places go to every rank, which finds its pieces' bytes there.
  // One process creating the file costs a few milliseconds; the collective parallel-HDF5 create
  // it replaces took 2-16 ms of every rank's time (benchmarks/README.md). A create or flush that
  // fails (disk full, quota) removes the file and throws AgreedFault on every rank.
  void create(const std::vector<std::string>& state_names) {
    std::vector<int64_t> offsets(datasets_.size(), 0);
    std::string failure;
    if (rank_ == 0) failure = create_file(state_names, offsets);
    if (const std::string agreed = comm::first_error(comm_, failure); !agreed.empty())
      throw AgreedFault(not_saved(layout_.step, agreed, layout_.tmp_path, layout_.dir));
    {
      comm::OpScope op(comm::Op::broadcast);
      MPI_CHECK(MPI_Bcast(offsets.data(), static_cast<int>(offsets.size()), MPI_INT64_T, 0, comm_));
    }
    for (auto& piece : layout_.pieces) {
      const auto& d = datasets_[static_cast<size_t>(piece.dataset)];
      piece.offset = offsets[static_cast<size_t>(piece.dataset)] + piece.lo * static_cast<int64_t>(at::elementSize(d.type));
    }
  }

 private:
  struct Dataset {
    std::string path;
    std::vector<int64_t> shape;
    at::ScalarType type;
  };

  std::string create_file(const std::vector<std::string>& state_names, std::vector<int64_t>& offsets) {
    std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
    hdf5::quiet();
    Hid file(H5Fcreate(layout_.tmp_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!file.valid()) {
      // HDF5 can fail after creating the file (a lock it could not take): the message says removed.
      const std::string failure =
          fmt::format("{}: cannot create {}: {}", who(), layout_.tmp_path, innermost(hdf5_error_text()));
      std::error_code ignored;
      fs::remove(layout_.tmp_path, ignored);
      return failure;
    }
    std::vector<std::string> groups{"params", "optim", "buffers", "rng"};
    for (const auto& s : state_names) groups.push_back("optim/" + s);
    const Hid no_times = hdf5::groups_without_times();
    const Hid creation = hdf5::creation_without_fill();
    bool ok = true;
    for (const auto& g : groups)
      ok = ok && Hid(H5Gcreate2(file, g.c_str(), H5P_DEFAULT, no_times, H5P_DEFAULT)).valid();
    for (size_t i = 0; i < datasets_.size() && ok; ++i) {
      const auto& d = datasets_[i];
      std::vector<hsize_t> dims(d.shape.begin(), d.shape.end());
      Hid space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
      Hid dataset(space.valid() ? H5Dcreate2(file, d.path.c_str(), file_type(d.type), space, H5P_DEFAULT, creation, H5P_DEFAULT)
                                : H5I_INVALID_HID);
      const haddr_t address = dataset.valid() ? H5Dget_offset(dataset) : HADDR_UNDEF;
      // A dataset of no elements has no storage (and no pieces).
      const bool empty = std::find(d.shape.begin(), d.shape.end(), 0) != d.shape.end();
      ok = dataset.valid() && (address != HADDR_UNDEF || empty);
      offsets[i] = address == HADDR_UNDEF ? 0 : static_cast<int64_t>(address);
    }
    // After a flush that wrote every piece of metadata, the close has nothing left to fail on.
    if (ok && H5Fflush(file, H5F_SCOPE_LOCAL) >= 0) return "";
    return abandon(file, layout_.tmp_path,
                   fmt::format("{}: laying out {} failed: {}", who(), layout_.tmp_path, innermost(hdf5_error_text())));
  }

  Layout& layout_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<Dataset> datasets_;
};

// Part 1 (collective, main thread): the file of `meta.step` created in `dir` by rank 0 with every
// dataset in place; `shard`'s tensors are where this rank's pieces will be written from.
Layout lay_out(const std::string& dir, const Meta& meta, const std::vector<TensorEntry>& params,
               const std::vector<std::string>& state_names, const std::vector<TensorEntry>& buffers, const Shard& shard,
               MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  Layout layout;
  layout.dir = dir;
  layout.step = meta.step;
  layout.final_path = dir + "/" + step_file(meta.step);
  layout.tmp_path = layout.final_path + ".tmp";
  if (rank == 0) fs::create_directories(dir);
  FileLayout file(layout, comm);
  file.add_flat("params", params, shard, shard.params);
  for (size_t k = 0; k < state_names.size(); ++k) file.add_flat("optim/" + state_names[k], params, shard, shard.states[k].second);
  file.add_buffers(buffers, shard);
  file.add_rng_states(shard);
  file.create(state_names);
  return layout;
}

// Part 2 (any thread; no HDF5, no MPI): this rank's pieces written at their places, each in
// pwrites of at most kWritePieceBytes (benchmarks/README.md, "Checkpoint I/O": large writes into
// the page cache ran several times slower than 1 MB ones), and checksummed. A failure (disk
// full, quota) is returned, not thrown: the ranks agree on it in part 3.
Written write_pieces(const Layout& layout, const std::atomic<bool>* abandon = nullptr) {
  // Fault injection for the tests: TRIDENT_TEST_SLOW_SAVE=RANK:MS stalls that rank MS ms before
  // it writes its pieces, as a write to a hung file system would.
  if (const char* slow = std::getenv("TRIDENT_TEST_SLOW_SAVE"); slow && std::atoi(slow) == log::rank()) {
    const char* ms = std::strchr(slow, ':');
    std::fprintf(stderr, "trident: test: rank %d's checkpoint write stalled %s ms (TRIDENT_TEST_SLOW_SAVE)\n",
                 log::rank(), ms ? ms + 1 : "0");
    std::this_thread::sleep_for(std::chrono::milliseconds(ms ? std::atoll(ms + 1) : 0));
  }
  Written written;
  const int fd = ::open(layout.tmp_path.c_str(), O_WRONLY);
  if (fd < 0) {
    written.error = fmt::format("{}: cannot open {}: {}", who(), layout.tmp_path, std::strerror(errno));
    return written;
  }
  for (const auto& piece : layout.pieces) {
    const at::Tensor& data = piece.source;
    const auto* bytes = static_cast<const char*>(data.data_ptr());
    const int64_t total = data.numel() * static_cast<int64_t>(data.element_size());
    for (int64_t done = 0; done < total && written.error.empty();) {
      if (abandon && abandon->load(std::memory_order_relaxed)) {
        written.error = fmt::format("{}: the write of {} was abandoned (the run is ending on an error)", who(),
                                    layout.tmp_path);
        break;
      }
      const ssize_t n = ::pwrite(fd, bytes + done, static_cast<size_t>(std::min(kWritePieceBytes, total - done)),
                                 static_cast<off_t>(piece.offset + done));
      if (n > 0) {
        done += n;
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        written.error = fmt::format("{}: writing {} failed: {}", who(), layout.names[static_cast<size_t>(piece.dataset)],
                                    n < 0 ? std::strerror(errno) : "no progress");
      }
    }
    if (!written.error.empty()) break;
    written.blocks.push_back(
        {piece.dataset, piece.lo, piece.hi, static_cast<int64_t>(crc_of(bytes, static_cast<size_t>(total)))});
  }
  // The written pages leave the page cache. This run never reads a checkpoint back, so they would
  // only crowd out the dataset's; and the next save gets pages the kernel has just freed, which
  // measured faster than fresh ones (benchmarks/README.md, "Checkpoint I/O"). Best effort: a
  // file system that ignores the advice loses nothing.
  // fdatasync first: the commit must not name a file whose pieces a node's crash could still
  // take (and only clean pages can leave the cache).
  if (written.error.empty() && ::fdatasync(fd) != 0 && errno != EINVAL)
    written.error = fmt::format("{}: writing {} to disk (fdatasync) failed: {}", who(), layout.tmp_path,
                               std::strerror(errno));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  if (::close(fd) != 0 && written.error.empty())
    written.error = fmt::format("{}: closing {} failed: {}", who(), layout.tmp_path, std::strerror(errno));
  // Fault injection for the tests: TRIDENT_TEST_KILL_DURING_SAVE=STEP kills every rank after its
  // pieces are written but before the file is committed, as a node failure or scancel -s KILL
  // would (under checkpoint.async, on the writer thread, while training goes on).
  if (const char* kill_at = std::getenv("TRIDENT_TEST_KILL_DURING_SAVE"); kill_at && std::atoll(kill_at) == layout.step)
    std::raise(SIGKILL);
  return written;
}

// Rank 0: the checksums (every rank's blocks, by dataset) and the metadata as attributes, the
// file opened on its own (the data is in it). "" or the failure (the file then removed).
std::string add_attributes(const Layout& layout, const std::vector<int64_t>& all_blocks, const Meta& meta) {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  hdf5::quiet();
  std::vector<std::vector<int64_t>> blocks(layout.names.size());
  for (size_t i = 0; i + 3 < all_blocks.size(); i += 4) {
    auto& b = blocks[static_cast<size_t>(all_blocks[i])];
    b.insert(b.end(), {all_blocks[i + 1], all_blocks[i + 2], all_blocks[i + 3]});
  }
  Hid file(H5Fopen(layout.tmp_path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
  if (!file.valid()) return fmt::format("{}: cannot reopen {}: {}", who(), layout.tmp_path, innermost(hdf5_error_text()));
  bool ok = true;
  for (size_t d = 0; d < layout.names.size() && ok; ++d) {
    Hid dataset(H5Dopen2(file, layout.names[d].c_str(), H5P_DEFAULT));
    ok = dataset.valid() && hdf5::write_crc32_blocks(dataset, blocks[d]);  // an empty tensor: no blocks
  }
  if (ok) {
    // The deck and the dataset names under the metadata's checksum too (what the blocks' do not cover).
    const DatasetManifest manifest = dataset_manifest(file);
    const std::string text = meta_text(meta) + fmt::format("deck_crc32={}\ndatasets={}\ndatasets_crc32={}\n",
                                                           text_crc(meta.deck), manifest.count, manifest.crc);
    hdf5::write_string_attribute(file, "meta", text);
    hdf5::write_string_attribute(file, "deck", meta.deck);
    hdf5::write_int_attribute(file, "meta_crc32", text_crc(text));
    ok = H5Fflush(file, H5F_SCOPE_LOCAL) >= 0;
  }
  if (!ok)
    return abandon(file, layout.tmp_path, fmt::format("{}: writing the checksums of {} failed: {}", who(),
                                                      layout.tmp_path, innermost(hdf5_error_text())));
  file.reset();
  if (const std::string error = sync_to_disk(layout.tmp_path); !error.empty()) {
    std::error_code ignored;
    fs::remove(layout.tmp_path, ignored);
    return fmt::format("{}: writing {} to disk (fsync) failed: {}", who(), layout.tmp_path, error);
  }
  return "";
}

// Part 3 (collective, main thread, once every rank's part 2 is done): agreement, checksums,
// metadata, commit. A failure anywhere removes the file and throws AgreedFault on every rank.
std::string finish(const Layout& layout, const Written& written, const Meta& meta, MPI_Comm comm,
                   const Retention& retention) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  std::error_code ignored;
  if (const std::string failure = comm::first_error(comm, written.error); !failure.empty()) {
    if (rank == 0) fs::remove(layout.tmp_path, ignored);
    barrier(comm);
    throw AgreedFault(not_saved(layout.step, failure, layout.tmp_path, layout.dir));
  }
  // Rank 0 learns every rank's blocks.
  std::vector<int64_t> mine;
  for (const auto& b : written.blocks) mine.insert(mine.end(), {b.dataset, b.begin, b.end, b.crc});
  const int my_count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  std::vector<int64_t> all;
  {
    comm::OpScope gathering(comm::Op::all_gather);  // (a gather: rank 0 waits for every rank's blocks)
    MPI_CHECK(MPI_Gather(&my_count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm));
    int total = 0;
    for (int r = 0; r < size; ++r) {
      displs[static_cast<size_t>(r)] = total;
      total += counts[static_cast<size_t>(r)];
    }
    all.resize(static_cast<size_t>(rank == 0 ? total : 0));
    MPI_CHECK(MPI_Gatherv(mine.data(), my_count, MPI_INT64_T, all.data(), counts.data(), displs.data(), MPI_INT64_T, 0,
                          comm));
  }
  const std::string attribute_error = rank == 0 ? add_attributes(layout, all, meta) : "";
  if (const std::string failure = comm::first_error(comm, attribute_error); !failure.empty())
    throw AgreedFault(not_saved(layout.step, failure, layout.tmp_path, layout.dir));
  if (rank == 0) commit(layout.dir, layout.tmp_path, layout.step, retention);
  barrier(comm);
  return layout.final_path;
}

}  // namespace

std::string save(const std::string& dir, const Meta& meta, const std::vector<TensorEntry>& params,
                 const std::vector<std::string>& state_names, const std::vector<TensorEntry>& buffers,
                 const Shard& shard, MPI_Comm comm, const Retention& retention) {
  const Layout layout = lay_out(dir, meta, params, state_names, buffers, shard, comm);
  return finish(layout, write_pieces(layout), meta, comm, retention);
}

// ---- background save ------------------------------------------------------------------------

struct BackgroundSave::Impl {
  Meta meta;
  MPI_Comm comm = MPI_COMM_NULL;
  Retention retention;
  Layout layout;
  // The copies the thread takes first: (from live, into the snapshot), both contiguous on the host.
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  std::mutex mutex;
  std::condition_variable snapshot_cv;
  bool snapshot_taken = false;
  std::atomic<bool> finished{false};
  // Set by the destructor, which runs with the thread still writing only when the run is ending
  // on an error: the write stops at its next piece (1 MB), so that the error is not held up by
  // a write nobody will commit.
  std::atomic<bool> abandon{false};
  std::condition_variable abandon_cv;
  Written written;
  double thread_seconds = 0;
  std::thread thread;

  // The thread's body: a failure becomes the write's error (agreed and reported at the commit),
  // never an exception leaving the thread; the update waiting for the copies is released either way.
  void run() {
    try {
      copy_and_write();
    } catch (const std::exception& e) {
      written.error = fmt::format("{}: the background save failed: {}", who(), e.what());
    } catch (...) {
      written.error = fmt::format("{}: the background save failed (an exception that is not a std::exception)", who());
    }
    release_snapshot();
    finished.store(true, std::memory_order_release);
  }

  // The copies are taken (or given up): the update may change the live tensors again.
  void release_snapshot() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      snapshot_taken = true;
      copies.clear();  // drops the handles on live tensors
    }
    snapshot_cv.notify_all();
  }

  void copy_and_write() {
    Stopwatch watch;
    // Fault injection for the tests: TRIDENT_TEST_SLOW_BACKGROUND_SAVE_MS=N makes the thread wait
    // N ms before its copies and again before writing, so that the update must wait for the
    // copies and the next save for the write.
    const char* slow = std::getenv("TRIDENT_TEST_SLOW_BACKGROUND_SAVE_MS");
    const auto pause = std::chrono::milliseconds(slow ? std::atoll(slow) : 0);
    const auto pause_unless_abandoned = [&] {
      std::unique_lock<std::mutex> lock(mutex);
      abandon_cv.wait_for(lock, pause, [&] { return abandon.load(); });
    };
    pause_unless_abandoned();
    for (auto& [from, into] : copies)
      std::memcpy(into.data_ptr(), from.data_ptr(), static_cast<size_t>(from.numel()) * from.element_size());
    release_snapshot();
    pause_unless_abandoned();
    written = write_pieces(layout, &abandon);
    thread_seconds = watch.seconds();
  }
};

namespace {
// `into` as a flat host tensor of `like`'s size and type, reused when it already is one.
void host_buffer_like(at::Tensor& into, const at::Tensor& like) {
  if (!into.defined() || into.numel() != like.numel() || into.scalar_type() != like.scalar_type())
    into = at::empty({like.numel()}, like.options().device(at::kCPU));
}
}  // namespace

BackgroundSave::BackgroundSave(const std::string& dir, const Meta& meta, const std::vector<TensorEntry>& params,
                               const std::vector<std::string>& state_names, const std::vector<TensorEntry>& buffers,
                               const Shard& live, Shard& snapshot, MPI_Comm comm, const Retention& retention)
    : impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  im.meta = meta;
  im.comm = comm;
  im.retention = retention;
  snapshot.stage = live.stage;
  snapshot.begin = live.begin;
  snapshot.end = live.end;
  // Parameters and optimizer states: the thread copies host tensors; a GPU's are copied now.
  auto stage_copy = [&](const at::Tensor& from, at::Tensor& into) {
    host_buffer_like(into, from);
    if (from.is_cpu() && from.is_contiguous())
      im.copies.emplace_back(from, into);
    else
      into.copy_(from.reshape({-1}));
  };
  stage_copy(live.params, snapshot.params);
  snapshot.states.resize(live.states.size());
  for (size_t k = 0; k < live.states.size(); ++k) {
    snapshot.states[k].first = live.states[k].first;
    stage_copy(live.states[k].second, snapshot.states[k].second);
  }
  snapshot.buffers.clear();
  for (const auto& [name, b] : live.buffers) snapshot.buffers.emplace_back(name, b.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true));
  snapshot.rng_state = live.rng_state.defined() ? live.rng_state.clone() : at::Tensor();
  snapshot.cuda_rng_state = live.cuda_rng_state.defined() ? live.cuda_rng_state.clone() : at::Tensor();
  im.layout = lay_out(dir, meta, params, state_names, buffers, snapshot, comm);
  im.thread = std::thread([&im] { im.run(); });
}

BackgroundSave::~BackgroundSave() {
  if (!impl_ || !impl_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->abandon = true;
  }
  impl_->abandon_cv.notify_all();
  impl_->thread.join();
}

int64_t BackgroundSave::step() const { return impl_->meta.step; }

void BackgroundSave::wait_for_snapshot() {
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->snapshot_cv.wait(lock, [&] { return impl_->snapshot_taken; });
}

bool BackgroundSave::written() const { return impl_->finished.load(std::memory_order_acquire); }

double BackgroundSave::wait() {
  Stopwatch watch;
  if (impl_->thread.joinable()) impl_->thread.join();
  return watch.seconds();
}

double BackgroundSave::write_seconds() const { return impl_->thread_seconds; }

std::string BackgroundSave::commit() {
  wait();
  return finish(impl_->layout, impl_->written, impl_->meta, impl_->comm, impl_->retention);
}

// ---- read ----------------------------------------------------------------------------------

namespace {

// Elements [lo, hi) of a tensor into `out` (contiguous, of the stored type), checked
// (detail::read_checked_into); adds the blocks it checksummed to `checksummed`.
void read_checked_into(hid_t dataset, const std::string& path, const std::string& name, int64_t lo, int64_t hi,
                       const at::Tensor& out, const VerifiedBlocks* verified, int64_t& checksummed) {
  checksummed += detail::read_checked_into(dataset, path, name, checksum_blocks(dataset, path, name), lo, hi,
                                           out.data_ptr(), out.element_size(), verified);
}

at::Tensor read_checked(hid_t dataset, const std::string& path, const std::string& name, int64_t lo, int64_t hi,
                        const VerifiedBlocks* verified, int64_t& checksummed) {
  at::Tensor out = at::empty({hi - lo}, stored_element_bytes(dataset) == 1 ? at::kByte : at::kFloat);
  read_checked_into(dataset, path, name, lo, hi, out, verified, checksummed);
  return out;
}

}  // namespace

Reader::Reader(const std::string& path, const VerifiedBlocks* verified) : path_(path) {
  file_ = open_checked(path, meta_);
  if (verified && verified->same_file(path)) verified_ = verified;
}

Reader::~Reader() {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  file_.reset();
}

void Reader::check_shapes(const std::string& group, const std::vector<TensorEntry>& entries) const {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  for (const auto& t : entries) {
    const std::string name = dataset_name(group, t.name);
    if (!hdf5::link_exists(*file_, name.substr(1)))
      fatal_all(fmt::format("checkpoint {}: tensor {} is missing (another model?)", path_, name));
    const auto dims = read_or_refuse(path_, name, [&] {
      Hid dataset(HDF5_CHECK(H5Dopen2(*file_, name.c_str(), H5P_DEFAULT)));
      return hdf5::dataset_shape(dataset);
    });
    if (std::vector<int64_t>(dims.begin(), dims.end()) != t.shape)
      fatal_all(fmt::format("checkpoint {}: tensor {} has shape {}, the model's is {}", path_, name,
                            fmt::join(dims, "x"), fmt::join(t.shape, "x")));
  }
  // Nothing stored under the group that the model lacks: a checkpoint of a deeper model would
  // otherwise load into its first layers and drop the rest.
  std::set<std::string> expected;
  for (const auto& t : entries) expected.insert(dataset_name(group, t.name));
  const std::string prefix = "/" + group + "/";
  std::vector<std::string> extra;
  for (const auto& name : read_or_refuse(path_, prefix, [&] { return hdf5::dataset_names(*file_); }))
    if (name.rfind(prefix, 0) == 0 && name.find('/', prefix.size()) == std::string::npos && !expected.count(name))
      extra.push_back(name);
  if (!extra.empty())
    fatal_all(fmt::format("checkpoint {}: it holds {} tensor{} the model lacks ({}{}): written for another model (its "
                          "model.* keys)?",
                          path_, extra.size(), extra.size() == 1 ? "" : "s",
                          fmt::join(extra.begin(), extra.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(extra.size(), 3)), ", "),
                          extra.size() > 3 ? ", ..." : ""));
}

at::Tensor Reader::read_flat(const std::string& group, const std::vector<TensorEntry>& entries, int64_t begin,
                             int64_t end) const {
  at::Tensor out = at::empty({end - begin}, at::kFloat);
  read_flat_into(group, entries, begin, end, out);
  return out;
}

void Reader::read_flat_into(const std::string& group, const std::vector<TensorEntry>& entries, int64_t begin,
                            int64_t end, const at::Tensor& out, int64_t chunk_elements) const {
  TRIDENT_CHECK(out.numel() == end - begin && chunk_elements > 0,
                fmt::format("read_flat_into: {} elements asked into a tensor of {}", end - begin, out.numel()));
  if (!(out.device().is_cpu() && out.dim() == 1 && out.is_contiguous() && out.scalar_type() == at::kFloat)) {
    const at::Tensor flat_out = out.view({-1});  // (a 1-D flat buffer's slice: a view)
    at::Tensor buffer = at::empty({std::min(chunk_elements, end - begin)}, at::kFloat);
    for (int64_t from = begin; from < end; from += chunk_elements) {
      const int64_t count = std::min(chunk_elements, end - from);
      at::Tensor piece = buffer.narrow(0, 0, count);
      read_flat_into(group, entries, from, from + count, piece);
      flat_out.narrow(0, from - begin, count).copy_(piece);
    }
    return;
  }
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  for (const auto& t : entries) {
    const int64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    if (lo >= hi) continue;
    const std::string name = dataset_name(group, t.name);
    read_or_refuse(path_, name, [&] {
      Hid dataset(HDF5_CHECK(H5Dopen2(*file_, name.c_str(), H5P_DEFAULT)));
      read_checked_into(dataset, path_, name, lo - t.offset, hi - t.offset, out.narrow(0, lo - begin, hi - lo),
                        verified_, checksummed_);
    });
  }
}

at::Tensor Reader::read_rng_state(int rank, const std::string& kind) const {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  const std::string name = "/rng/" + kind;
  if (!hdf5::link_exists(*file_, name.substr(1))) return at::Tensor();
  return read_or_refuse(path_, name, [&] {
    Hid dataset(HDF5_CHECK(H5Dopen2(*file_, name.c_str(), H5P_DEFAULT)));
    const auto shape = hdf5::dataset_shape(dataset);
    if (shape.size() != 2 || rank >= static_cast<int>(shape[0])) return at::Tensor();
    const auto bytes = static_cast<int64_t>(shape[1]);
    return read_checked(dataset, path_, name, rank * bytes, (rank + 1) * bytes, verified_, checksummed_);
  });
}

at::Tensor Reader::read_tensor(const std::string& name) const {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  if (!hdf5::link_exists(*file_, name.substr(1)))
    fatal_all(fmt::format("checkpoint {}: tensor {} is missing (another model?)", path_, name));
  return read_or_refuse(path_, name, [&] {
    Hid dataset(HDF5_CHECK(H5Dopen2(*file_, name.c_str(), H5P_DEFAULT)));
    int64_t numel = 1;
    for (auto d : hdf5::dataset_shape(dataset)) numel *= static_cast<int64_t>(d);
    return read_checked(dataset, path_, name, 0, numel, verified_, checksummed_);
  });
}

namespace {

// `latest` in `dir` if it verifies, else the newest step_*.h5 that does; "" when none does, with
// `skipped` saying why each was passed over. Rank 0 lists the candidates; every rank then checks
// the same ones, in the same order. Collective.
std::string newest_verified(const std::string& dir, MPI_Comm comm, int rank, std::string& skipped,
                            VerifiedBlocks* verified) {
  // One line per candidate, its first character saying what it is: '+' a file to verify, '!' a
  // `latest` naming no step file (a tag of its own, not a prefix of the path: any path can start
  // with '!').
  std::string listing;
  if (rank == 0) {
    if (std::ifstream in(dir + "/latest"); in) {
      std::string name;
      std::getline(in, name);
      // `latest` names a step file of this folder; anything else (a path into another run's
      // folder, an edited or damaged file) is passed over for the step files themselves.
      if (is_step_file_name(name))
        listing += "+" + dir + "/" + name + "\n";
      else if (!name.empty())
        listing += "!" + dir + "/latest\n";
    }
    const std::vector<std::string> saved = step_files_in(dir);
    for (auto name = saved.rbegin(); name != saved.rend(); ++name)  // newest first
      listing += "+" + dir + "/" + *name + "\n";
  }
  std::istringstream candidates(comm::broadcast(comm, listing));
  std::vector<std::string> tried;  // `latest` names one of the step files too
  for (std::string line; std::getline(candidates, line);) {
    if (line.empty()) continue;  // a folder name with a newline in it cut a line
    const std::string c = line.substr(1);
    if (line.front() == '!') {
      skipped += " (skipped " + c + ": it does not name a step_*.h5 file of its folder)";
      continue;
    }
    if (std::find(tried.begin(), tried.end(), c) != tried.end()) continue;
    tried.push_back(c);
    const std::string problem = verify_collective(c, comm, verified);
    if (problem.empty()) return c;
    skipped += " (skipped " + problem + ")";
  }
  return "";
}

}  // namespace

std::string resolve_resume(const std::string& dir, const std::string& mode, std::string& note, MPI_Comm comm,
                           VerifiedBlocks* verified) {
  if (verified) verified->forget();
  if (mode == "never") {
    note = "--resume never: starting fresh";
    return "";
  }
  if (mode.empty()) fatal_all("--resume '': give auto, never or a checkpoint file");
  // auto:PATH: this run's own newest checkpoint, or PATH while it has none. What a requeued or
  // chained job that started from PATH (another run's file, another layout) continues with: its
  // own progress, not PATH again (jobs/*.slurm pass it on a requeue).
  if (mode.rfind("auto:", 0) == 0) {
    const std::string path = mode.substr(5);
    if (path.empty() || path == "auto" || path == "never" || path.rfind("auto:", 0) == 0)
      fatal_all(fmt::format("--resume {}: auto:PATH needs a checkpoint file or folder after 'auto:'", mode));
    const std::string own = resolve_resume(dir, "auto", note, comm, verified);
    if (!own.empty()) {
      note = fmt::format("--resume {}: this run has checkpoints of its own; {}", mode, note);
      return own;
    }
    const std::string file = resolve_resume(dir, path, note, comm, verified);
    note = fmt::format("--resume {}: no checkpoint of this run in {} yet; {}", mode, dir, note);
    return file;
  }
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  std::string skipped;
  if (mode == "auto") {
    const std::string found = newest_verified(dir, comm, rank, skipped, verified);
    // Checkpoints that all fail verification are not "none": starting over would quietly throw
    // the run away (and a chain would go on from step 0). The user decides.
    if (found.empty() && !skipped.empty())
      fatal_all(fmt::format("--resume auto: no checkpoint in {} verifies{}: resume from one with --resume PATH, or "
                            "start over with --resume never",
                            dir, skipped));
    note = found.empty() ? "--resume auto: no checkpoint in " + dir + ", starting fresh"
                         : "--resume auto: resuming from " + found + skipped;
    return found;
  }
  // A checkpoint folder (or a run folder holding one) is read as --resume auto there, but must
  // give a checkpoint; its `latest` file, as the checkpoint it names. Rank 0 decides, so every
  // rank goes the same way.
  std::string folder, file = mode;
  if (rank == 0) {
    std::error_code ec;
    if (fs::is_directory(mode, ec)) {
      const fs::path inside = fs::path(mode) / "checkpoints";
      folder = step_files_in(mode).empty() && fs::is_directory(inside, ec) ? inside.string() : mode;
    } else if (fs::path(mode).filename() == "latest" && !hdf5::is_hdf5_file(mode)) {
      std::ifstream in(mode);
      std::string name;
      std::getline(in, name);
      if (is_step_file_name(name))
        file = (fs::path(mode).parent_path() / name).string();
      else  // not a step file of its folder: the folder's newest that verifies, as auto does there
        folder = fs::path(mode).parent_path().empty() ? "." : fs::path(mode).parent_path().string();
    }
  }
  folder = comm::broadcast(comm, folder);
  file = comm::broadcast(comm, file);
  if (!folder.empty()) {
    const std::string found = newest_verified(folder, comm, rank, skipped, verified);
    if (found.empty())
      fatal_all(skipped.empty() ? fmt::format("--resume {}: {} holds no checkpoint (step_*.h5)", mode, folder)
                                : fmt::format("--resume {}: no checkpoint in {} verifies{}", mode, folder, skipped));
    note = fmt::format("--resume {}: resuming from {}{}", mode, found, skipped);
    return found;
  }
  const std::string problem = verify_collective(file, comm, verified);
  if (!problem.empty()) fatal_all(problem);
  note = "resuming from " + file + (file == mode ? "" : " (named by " + mode + ")");
  return file;
}

}  // namespace trident::checkpoint
