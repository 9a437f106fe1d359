#include "checkpoint/checkpoint.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)
#include <hdf5.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "comm/world.hpp"
#include "core/error.hpp"
#include "core/hdf5.hpp"
#include "data/prepare.hpp"

namespace trident::checkpoint {

namespace fs = std::filesystem;
using hdf5::Hid;

namespace {
constexpr int64_t kWritePieceBytes = int64_t{1} << 20;  // the largest single write (see save)

// The innermost entry of an HDF5 error stack: the system's reason ("No space left on device").
std::string innermost(const std::string& stack) {
  std::string text = stack.substr(0, stack.find(" (H5"));
  std::replace(text.begin(), text.end(), '\n', ' ');  // MPI-IO's error strings span lines
  return text;
}

// Drops a written, flushed file's pages from the page cache. This run never reads a checkpoint
// back, so its pages would only crowd out the dataset's; and the next save gets pages the kernel
// has just freed, which measured faster than fresh ones (benchmarks/README.md, "Checkpoint I/O").
// Best effort: a file system that ignores the advice loses nothing.
void release_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// ---- selections of a flat element range in an N-d dataspace ---------------------------------

// Adds elements [lo, hi) (C order, relative to the sub-array at `prefix`) of a dataspace with
// `dims` to its selection, as at most 2 x rank hyperslabs.
void add_range(hid_t space, const std::vector<hsize_t>& dims, std::vector<hsize_t> prefix, hsize_t lo, hsize_t hi,
               bool& first) {
  if (lo >= hi) return;
  const size_t level = prefix.size();
  hsize_t inner = 1;
  for (size_t d = level + 1; d < dims.size(); ++d) inner *= dims[d];
  auto block = [&](hsize_t row_begin, hsize_t row_end) {  // whole rows at this level
    std::vector<hsize_t> start(prefix), count(prefix.size(), 1);
    start.push_back(row_begin);
    count.push_back(row_end - row_begin);
    for (size_t d = level + 1; d < dims.size(); ++d) {
      start.push_back(0);
      count.push_back(dims[d]);
    }
    HDF5_CHECK(H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(), nullptr,
                                   count.data(), nullptr));
    first = false;
  };
  if (lo % inner == 0 && hi % inner == 0) return block(lo / inner, hi / inner);
  const hsize_t first_row = lo / inner, last_row = (hi - 1) / inner;
  auto sub = [&](hsize_t row, hsize_t a, hsize_t b) {
    auto p = prefix;
    p.push_back(row);
    add_range(space, dims, p, a, b, first);
  };
  if (first_row == last_row) return sub(first_row, lo - first_row * inner, hi - first_row * inner);
  hsize_t full_begin = first_row, full_end = last_row + 1;
  if (lo % inner != 0) {
    sub(first_row, lo % inner, inner);
    full_begin = first_row + 1;
  }
  if (hi % inner != 0) {
    sub(last_row, 0, hi % inner);
    full_end = last_row;
  }
  if (full_begin < full_end) block(full_begin, full_end);
}

Hid select_range(hid_t dataset, hsize_t lo, hsize_t hi) {
  Hid space(HDF5_CHECK(H5Dget_space(dataset)));
  const auto dims = hdf5::dataset_shape(dataset);
  bool first = true;
  if (dims.empty()) {
    HDF5_CHECK(H5Sselect_all(space));
  } else if (lo >= hi) {
    HDF5_CHECK(H5Sselect_none(space));
  } else {
    add_range(space, dims, {}, lo, hi, first);
  }
  return space;
}

Hid memory_space(hsize_t n) {
  const hsize_t dims[1] = {std::max<hsize_t>(n, 1)};
  Hid space(HDF5_CHECK(H5Screate_simple(1, dims, nullptr)));
  if (n == 0) HDF5_CHECK(H5Sselect_none(space));
  return space;
}

// The metadata attribute's checksum, as written and as verified.
long long text_crc(const std::string& text) {
  return static_cast<long long>(crc32(0L, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())));
}

uint32_t crc_of(const at::Tensor& t) {  // crc32_z: a rank's piece of a tensor may pass 4 GB
  return static_cast<uint32_t>(
      crc32_z(0L, static_cast<const Bytef*>(t.data_ptr()), static_cast<z_size_t>(t.numel() * t.element_size())));
}

std::string dataset_name(const std::string& group, const std::string& name) { return "/" + group + "/" + name; }

std::string meta_text(const Meta& m) {
  return fmt::format(
      "format_version={}\nstep={}\nepoch={}\ncursor={}\noptimizer_steps={}\nglobal_batch={}\nworld={}\ndp={}\npp={}\n"
      "zero={}\ntrident_version={}\ntorch_version={}\nloss_scale={}\nloss_scale_good_steps={}\nskipped_steps={}\n",
      kFormatVersion, m.step, m.epoch, m.cursor, m.optimizer_steps, m.global_batch, m.world, m.dp, m.pp, m.zero,
      m.trident_version, m.torch_version, m.loss_scale, m.loss_scale_good_steps, m.skipped_steps);
}

std::map<std::string, std::string> parse_lines(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

std::string step_file(int64_t step) { return fmt::format("step_{:07d}.h5", step); }

// The step_*.h5 names in `dir`, oldest step first (the zero-padded names sort by step); none when
// `dir` is not a folder.
std::vector<std::string> step_files_in(const std::string& dir) {
  std::vector<std::string> names;
  if (!fs::is_directory(dir)) return names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (name.rfind("step_", 0) == 0 && entry.path().extension() == ".h5") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Every dataset of the file that holds tensor data.
void collect_datasets(hid_t file, std::vector<std::string>& out) {
  auto visit = [](hid_t, const char* name, const H5O_info_t* info, void* data) -> herr_t {
    if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(data)->push_back(std::string("/") + name);
    return 0;
  };
  HDF5_CHECK(H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, visit, &out, H5O_INFO_BASIC));
}

// (begin, end, crc) blocks recorded on a dataset; false if the attribute is missing.
bool read_blocks(hid_t dataset, std::vector<int64_t>& blocks) {
  if (H5Aexists(dataset, "crc32_blocks") <= 0) return false;
  Hid attr(HDF5_CHECK(H5Aopen(dataset, "crc32_blocks", H5P_DEFAULT)));
  Hid space(HDF5_CHECK(H5Aget_space(attr)));
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  blocks.resize(static_cast<size_t>(n));
  if (n > 0) HDF5_CHECK(H5Aread(attr, H5T_NATIVE_INT64, blocks.data()));
  return true;
}

// Tensors are float32; the RNG states (/rng/cpu) are bytes.
hid_t memory_type(at::ScalarType type) { return type == at::kByte ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT; }
hid_t file_type(at::ScalarType type) { return type == at::kByte ? H5T_STD_U8LE : H5T_IEEE_F32LE; }

// Tensors are stored as float32, the RNG states as bytes.
at::ScalarType stored_type(hid_t dataset) {
  Hid type(HDF5_CHECK(H5Dget_type(dataset)));
  return H5Tget_size(type) == 1 ? at::kByte : at::kFloat;
}

// Elements [lo, hi) into `out` (contiguous, hi - lo elements of the stored type).
void read_elements_into(hid_t dataset, int64_t lo, int64_t hi, const at::Tensor& out) {
  Hid file_space = select_range(dataset, static_cast<hsize_t>(lo), static_cast<hsize_t>(hi));
  Hid mem = memory_space(static_cast<hsize_t>(hi - lo));
  HDF5_CHECK(H5Dread(dataset, memory_type(out.scalar_type()), mem, file_space, H5P_DEFAULT, out.data_ptr()));
}

// Elements [lo, hi) of a tensor into `out` (contiguous, of the stored type), each stored block they
// touch read once, whole, and checked against its CRC-32 before its part is used. Problems throw
// BadInput naming file and tensor.
void read_checked_into(hid_t dataset, const std::string& path, const std::string& name, int64_t lo, int64_t hi,
                       const at::Tensor& out) {
  std::vector<int64_t> blocks;
  if (!read_blocks(dataset, blocks)) fatal_all(fmt::format("checkpoint {}: tensor {} has no checksums", path, name));
  int64_t covered = 0;
  for (size_t b = 0; b + 2 < blocks.size(); b += 3) {
    const int64_t begin = blocks[b], end = blocks[b + 1];
    if (end <= lo || begin >= hi) continue;
    const int64_t from = std::max(lo, begin), to = std::min(hi, end);
    // A block inside the range is read straight into place; one that sticks out, whole and aside.
    const bool inside = from == begin && to == end;
    const at::Tensor block = inside ? out.narrow(0, begin - lo, end - begin) : at::empty({end - begin}, out.dtype());
    read_elements_into(dataset, begin, end, block);
    if (crc_of(block) != static_cast<uint32_t>(blocks[b + 2]))
      fatal_all(fmt::format("checkpoint {}: tensor {} is damaged (checksum mismatch in elements {}..{})", path, name,
                            begin, end));
    if (!inside) out.narrow(0, from - lo, to - from).copy_(block.narrow(0, from - begin, to - from));
    covered += to - from;
  }
  if (covered < hi - lo)  // the writers' blocks tile each tensor: a gap means a damaged record
    fatal_all(fmt::format("checkpoint {}: tensor {} has no checksummed block for some of elements {}..{}", path, name,
                          lo, hi));
}

at::Tensor read_checked(hid_t dataset, const std::string& path, const std::string& name, int64_t lo, int64_t hi) {
  at::Tensor out = at::empty({hi - lo}, stored_type(dataset));
  read_checked_into(dataset, path, name, lo, hi, out);
  return out;
}

}  // namespace

// ---- save ----------------------------------------------------------------------------------

namespace {

// One checkpoint file written by every rank of `comm` together. Every rank creates every
// dataset (collective) in the same order and writes its own piece of it, maybe none, as
// independent MPI-IO. This rank's own writes may fail (disk full, quota) while the others'
// succeed: the failure is kept, not thrown, until every rank has reached flush(), so no rank is
// left waiting in a collective HDF5 call the failed one never makes.
class FileWriter {
 public:
  FileWriter(const std::string& path, MPI_Comm comm) : path_(path), comm_(comm) {
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
    // ROMIO's data sieving would read back and rewrite the regions around each piece: each
    // piece is written whole, so it is off.
    Hid access = hdf5::parallel_file_access(comm, {{"romio_ds_write", "disable"}, {"romio_ds_read", "disable"}});
    file_ = Hid(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access));
    if (!file_.valid()) fatal_one("checkpoint: cannot create " + path);
    // Each rank's piece of a tensor is one contiguous run of elements: independent writes go
    // straight to the file, where collective two-phase I/O would only shuffle them between ranks.
    transfer_ = hdf5::independent_transfer();
    // Parallel HDF5 allocates datasets when they are created; without this it would also write
    // fill values over every byte first.
    creation_ = hdf5::creation_without_fill();
  }

  void create_groups(const std::vector<std::string>& state_names) {
    std::vector<std::string> groups{"params", "optim", "buffers", "rng"};
    for (const auto& s : state_names) groups.push_back("optim/" + s);
    for (const auto& g : groups) Hid(HDF5_CHECK(H5Gcreate2(file_, g.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  }

  // Creates dataset `path` of `shape` and writes this rank's elements [lo, hi) from `source`.
  void write(const std::string& path, const std::vector<int64_t>& shape, int64_t lo, int64_t hi,
             const at::Tensor& source, at::ScalarType type = at::kFloat) {
    std::vector<hsize_t> dims(shape.begin(), shape.end());
    Hid space(HDF5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
    Hid dataset(HDF5_CHECK(
        H5Dcreate2(file_, path.c_str(), file_type(type), space, H5P_DEFAULT, creation_, H5P_DEFAULT)));
    const at::Tensor data = hi > lo ? source.contiguous() : at::zeros({1}, type);
    // Written in pieces of at most kWritePieceBytes (benchmarks/README.md, "Checkpoint I/O":
    // large writes into the page cache ran several times slower than 1 MB ones).
    const int64_t piece = std::max<int64_t>(1, kWritePieceBytes / static_cast<int64_t>(data.element_size()));
    for (int64_t at = lo; at < hi && write_error_.empty(); at += piece) {
      const int64_t to = std::min(hi, at + piece);
      Hid file_space = select_range(dataset, static_cast<hsize_t>(at), static_cast<hsize_t>(to));
      Hid mem = memory_space(static_cast<hsize_t>(to - at));
      const auto* bytes = static_cast<const char*>(data.data_ptr()) + (at - lo) * data.element_size();
      if (H5Dwrite(dataset, memory_type(type), mem, file_space, transfer_, bytes) < 0)
        write_error_ = fmt::format("{}: writing {} failed: {}", who(), path, innermost(hdf5_error_text()));
    }
    if (hi > lo) mine_.push_back({static_cast<int64_t>(names_.size()), lo, hi, crc_of(data)});
    names_.push_back(path);
  }

  // Every tensor of `params` under `group`; this rank writes the part of its stage's flat buffer
  // it holds (`flat` is elements [shard.begin, shard.end)).
  void write_flat(const std::string& group, const std::vector<TensorEntry>& params, const Shard& shard,
                  const at::Tensor& flat) {
    for (const auto& t : params) {
      int64_t lo = 0, hi = 0;
      if (t.stage == shard.stage) {
        lo = std::max(shard.begin, t.offset) - t.offset;
        hi = std::max(lo, std::min(shard.end, t.offset + t.numel) - t.offset);
      }
      write(dataset_name(group, t.name), t.shape, lo, hi,
            hi > lo ? flat.narrow(0, t.offset + lo - shard.begin, hi - lo) : at::Tensor());
    }
  }

  // Every buffer, written whole by the rank whose shard carries it.
  void write_buffers(const std::vector<TensorEntry>& buffers, const Shard& shard) {
    for (const auto& b : buffers) {
      const auto it = std::find_if(shard.buffers.begin(), shard.buffers.end(),
                                   [&](const auto& p) { return p.first == b.name && b.stage == shard.stage; });
      const bool writes = it != shard.buffers.end();
      write(dataset_name("buffers", b.name), b.shape, 0, writes ? b.numel : 0,
            writes ? it->second.reshape({-1}) : at::Tensor());
    }
  }

  // Every rank's RNG states, one row each per generator kind (the states of one kind have one
  // size): the CPU generator's, and the CUDA generator's of ranks that train on a GPU. A kind is
  // written when every rank has one (creating the dataset is collective).
  void write_rng_states(const Shard& shard) {
    for (const auto& [name, state] : {std::pair<const char*, at::Tensor>{"/rng/cpu", shard.rng_state},
                                      {"/rng/cuda", shard.cuda_rng_state}}) {
      int everyone = state.defined() ? 1 : 0;
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &everyone, 1, MPI_INT, MPI_MIN, comm_));
      if (!everyone) continue;
      const int64_t bytes = state.numel();
      write(name, {size_, bytes}, rank_ * bytes, (rank_ + 1) * bytes, state.cpu(), at::kByte);
    }
  }

  // Checksums: every rank learns every block, then all write the same attributes (collective).
  void write_checksums() {
    const int my_count = static_cast<int>(mine_.size() * 4);
    std::vector<int> counts(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
    MPI_CHECK(MPI_Allgather(&my_count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_));
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[static_cast<size_t>(r)] = total;
      total += counts[static_cast<size_t>(r)];
    }
    std::vector<int64_t> all(static_cast<size_t>(total));
    MPI_CHECK(MPI_Allgatherv(mine_.data(), my_count, MPI_INT64_T, all.data(), counts.data(), displs.data(),
                             MPI_INT64_T, comm_));
    std::vector<std::vector<int64_t>> blocks(names_.size());
    for (size_t i = 0; i + 3 < all.size(); i += 4) {
      auto& b = blocks[static_cast<size_t>(all[i])];
      b.insert(b.end(), {all[i + 1], all[i + 2], all[i + 3]});
    }
    for (size_t d = 0; d < names_.size(); ++d) {
      Hid dataset(HDF5_CHECK(H5Dopen2(file_, names_[d].c_str(), H5P_DEFAULT)));
      const hsize_t n = std::max<size_t>(blocks[d].size(), 1);
      if (blocks[d].empty()) blocks[d] = {0};  // an empty tensor: one padding value, no blocks
      Hid space(HDF5_CHECK(H5Screate_simple(1, &n, nullptr)));
      Hid attr(HDF5_CHECK(H5Acreate2(dataset, "crc32_blocks", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT)));
      HDF5_CHECK(H5Awrite(attr, H5T_NATIVE_INT64, blocks[d].data()));
    }
  }

  void write_meta(const Meta& meta) {
    const std::string text = meta_text(meta);
    hdf5::write_string_attribute(file_, "meta", text);
    hdf5::write_string_attribute(file_, "deck", meta.deck);
    hdf5::write_int_attribute(file_, "meta_crc32", text_crc(text));
  }

  // The first failure of any rank's writes or of the flush ("" when every rank's data is in the
  // file). Agreed before the flush too: H5Fflush is collective, a rank that skipped it would
  // hang the rest.
  std::string flush() {
    std::string failure = comm::first_error(comm_, write_error_);
    if (!failure.empty()) return failure;
    std::string flush_error;
    if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0)
      flush_error = fmt::format("{}: flushing failed: {}", who(), innermost(hdf5_error_text()));
    return comm::first_error(comm_, flush_error);
  }

  void close() { file_.reset(); }  // collective

  // After a failed flush: the file removed. HDF5 cannot close a file whose final flush fails (its
  // handle is left broken and crashes at exit): the data blocks go first, so the close only
  // writes a little metadata.
  void discard() {
    std::error_code ignored;
    if (rank_ == 0) fs::resize_file(path_, 0, ignored);
    MPI_CHECK(MPI_Barrier(comm_));
    file_.reset();  // collective close
    H5Eclear2(H5E_DEFAULT);
    MPI_CHECK(MPI_Barrier(comm_));
    if (rank_ == 0) fs::remove(path_, ignored);
  }

 private:
  struct Record {
    int64_t dataset, begin, end, crc;
  };
  std::string path_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  Hid file_, transfer_, creation_;
  std::vector<std::string> names_;  // datasets in creation order
  std::vector<Record> mine_;        // the blocks this rank wrote
  std::string write_error_;
};

// Rank 0 makes a written file the checkpoint: rename (atomic on one file system), then
// `latest`, then the oldest pruned down to keep_last.
void commit(const std::string& dir, const std::string& tmp_path, int64_t step, int keep_last) {
  fs::rename(tmp_path, dir + "/" + step_file(step));
  const std::string latest_tmp = dir + "/latest.tmp";
  {
    std::ofstream out(latest_tmp);
    out << step_file(step) << "\n";
    out.flush();
    if (!out) fatal_one("checkpoint: cannot write " + latest_tmp);
  }
  fs::rename(latest_tmp, dir + "/latest");
  const std::vector<std::string> saved = step_files_in(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < saved.size(); ++i) fs::remove(dir + "/" + saved[i]);
}

}  // namespace

std::string save(const std::string& dir, const Meta& meta, const std::vector<TensorEntry>& params,
                 const std::vector<std::string>& state_names, const std::vector<TensorEntry>& buffers,
                 const Shard& shard, MPI_Comm comm, int keep_last) {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  hdf5::quiet();
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const std::string final_path = dir + "/" + step_file(meta.step);
  const std::string tmp_path = final_path + ".tmp";
  if (rank == 0) fs::create_directories(dir);
  MPI_CHECK(MPI_Barrier(comm));

  FileWriter writer(tmp_path, comm);
  writer.create_groups(state_names);
  writer.write_flat("params", params, shard, shard.params);
  for (size_t k = 0; k < state_names.size(); ++k)
    writer.write_flat("optim/" + state_names[k], params, shard, shard.states[k].second);
  writer.write_buffers(buffers, shard);
  writer.write_rng_states(shard);
  writer.write_checksums();
  writer.write_meta(meta);
  if (const std::string failure = writer.flush(); !failure.empty()) {
    writer.discard();  // the last good checkpoint stays
    throw AgreedFault(fmt::format("checkpoint of step {} not saved: {}. Removed {}; the previous checkpoint and "
                                  "'latest' are unchanged. Free space in {} and resume with --resume auto",
                                  meta.step, failure, tmp_path, dir));
  }
  writer.close();  // every rank's data is in the file
  if (rank == 0) release_page_cache(tmp_path);

  // Fault injection for the tests: TRIDENT_TEST_KILL_DURING_SAVE=STEP kills every rank after the
  // file is written but before it is committed, as a node failure or scancel -s KILL would.
  if (const char* kill_at = std::getenv("TRIDENT_TEST_KILL_DURING_SAVE"); kill_at && std::atoll(kill_at) == meta.step)
    std::raise(SIGKILL);
  if (rank == 0) commit(dir, tmp_path, meta.step, keep_last);
  MPI_CHECK(MPI_Barrier(comm));
  return final_path;
}

// ---- read ----------------------------------------------------------------------------------

Reader::Reader(const std::string& path) : path_(path) {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  hdf5::quiet();
  if (!fs::exists(path)) fatal_all(fmt::format("checkpoint {}: no such file", path));
  if (!hdf5::is_hdf5_file(path)) fatal_all(fmt::format("checkpoint {}: not an HDF5 file (truncated?)", path));
  file_ = std::make_unique<Hid>(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file_->valid()) fatal_all(fmt::format("checkpoint {}: HDF5 cannot open it (truncated or damaged)", path));
  const std::string text = hdf5::read_string_attribute(*file_, "meta");
  long long stored_crc = -1;
  if (H5Aexists(*file_, "meta_crc32") > 0) {
    Hid attr(HDF5_CHECK(H5Aopen(*file_, "meta_crc32", H5P_DEFAULT)));
    HDF5_CHECK(H5Aread(attr, H5T_NATIVE_LLONG, &stored_crc));
  }
  if (text.empty() || stored_crc != text_crc(text))
    fatal_all(fmt::format("checkpoint {}: metadata missing or damaged", path));
  auto m = parse_lines(text);
  if (m["format_version"] != std::to_string(kFormatVersion))
    fatal_all(fmt::format("checkpoint {}: format version {} (this trident reads version {})", path,
                          m["format_version"], kFormatVersion));
  auto num = [&](const char* key) { return std::stoll(m[key]); };
  meta_.step = num("step");
  meta_.epoch = num("epoch");
  meta_.cursor = num("cursor");
  meta_.optimizer_steps = num("optimizer_steps");
  meta_.global_batch = num("global_batch");
  meta_.world = static_cast<int>(num("world"));
  meta_.dp = static_cast<int>(num("dp"));
  meta_.pp = static_cast<int>(num("pp"));
  meta_.zero = static_cast<int>(num("zero"));
  meta_.trident_version = m["trident_version"];
  meta_.torch_version = m["torch_version"];
  if (m.count("loss_scale")) {
    meta_.loss_scale = std::stod(m["loss_scale"]);
    meta_.loss_scale_good_steps = num("loss_scale_good_steps");
    meta_.skipped_steps = num("skipped_steps");
  }
  meta_.deck = hdf5::read_string_attribute(*file_, "deck");
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
    Hid dataset(HDF5_CHECK(H5Dopen2(*file_, name.c_str(), H5P_DEFAULT)));
    const auto dims = hdf5::dataset_shape(dataset);
    if (std::vector<int64_t>(dims.begin(), dims.end()) != t.shape)
      fatal_all(fmt::format("checkpoint {}: tensor {} has shape {}, the model's is {}", path_, name,
                            fmt::join(dims, "x"), fmt::join(t.shape, "x")));
  }
}

at::Tensor Reader::read_flat(const std::string& group, const std::vector<TensorEntry>& entries, int64_t begin,
                             int64_t end) const {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  at::Tensor out = at::empty({end - begin}, at::kFloat);
  for (const auto& t : entries) {
    const int64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    if (lo >= hi) continue;
    const std::string name = dataset_name(group, t.name);
    Hid dataset(HDF5_CHECK(H5Dopen2(*file_, name.c_str(), H5P_DEFAULT)));
    read_checked_into(dataset, path_, name, lo - t.offset, hi - t.offset, out.narrow(0, lo - begin, hi - lo));
  }
  return out;
}

at::Tensor Reader::read_rng_state(int rank, const std::string& kind) const {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  const std::string name = "/rng/" + kind;
  if (!hdf5::link_exists(*file_, name.substr(1))) return at::Tensor();
  Hid dataset(HDF5_CHECK(H5Dopen2(*file_, name.c_str(), H5P_DEFAULT)));
  const auto shape = hdf5::dataset_shape(dataset);
  if (shape.size() != 2 || rank >= static_cast<int>(shape[0])) return at::Tensor();
  const auto bytes = static_cast<int64_t>(shape[1]);
  return read_checked(dataset, path_, name, rank * bytes, (rank + 1) * bytes);
}

at::Tensor Reader::read_tensor(const std::string& name) const {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  if (!hdf5::link_exists(*file_, name.substr(1)))
    fatal_all(fmt::format("checkpoint {}: tensor {} is missing (another model?)", path_, name));
  Hid dataset(HDF5_CHECK(H5Dopen2(*file_, name.c_str(), H5P_DEFAULT)));
  int64_t numel = 1;
  for (auto d : hdf5::dataset_shape(dataset)) numel *= static_cast<int64_t>(d);
  return read_checked(dataset, path_, name, 0, numel);
}

std::string verify(const std::string& path, int part, int parts) {
  try {
    Reader reader(path);
    std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
    std::vector<std::string> datasets;
    Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    collect_datasets(file, datasets);
    int64_t index = 0;  // of the block across the file: blocks are dealt out to the parts in turn
    for (const auto& name : datasets) {
      Hid dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
      if (!dataset.valid()) return fmt::format("checkpoint {}: tensor {} cannot be opened", path, name);
      std::vector<int64_t> blocks;
      if (!read_blocks(dataset, blocks)) return fmt::format("checkpoint {}: tensor {} has no checksums", path, name);
      for (size_t b = 0; b + 2 < blocks.size(); b += 3)
        if (index++ % parts == part) read_checked(dataset, path, name, blocks[b], blocks[b + 1]);  // throws if bad
    }
  } catch (const BadInput& e) {
    return e.what();
  } catch (const Fault& e) {
    return fmt::format("checkpoint {}: unreadable ({})", path, e.what());
  }
  return "";
}

bool is_checkpoint(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  hdf5::quiet();
  if (!hdf5::is_hdf5_file(path)) return false;
  Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  return file.valid() && H5Aexists(file, "meta") > 0;
}

std::string verify_collective(const std::string& path, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  return comm::first_error(comm, verify(path, rank, size));
}

std::string describe(const std::string& path, std::string& problem) {
  problem = verify(path);
  std::string out;
  try {
    out = data::describe_hdf5(path);
  } catch (const Fault&) {  // damaged structure: verify() already says what is wrong
    out = path + "\n(its objects cannot be listed)\n";
  }
  out += problem.empty() ? "checksums: every block verified\n" : "checksums: FAILED: " + problem + "\n";
  return out;
}

std::string resolve_resume(const std::string& dir, const std::string& mode, std::string& note, MPI_Comm comm) {
  if (mode == "never") {
    note = "--resume never: starting fresh";
    return "";
  }
  if (mode != "auto") {
    const std::string problem = verify_collective(mode, comm);
    if (!problem.empty()) fatal_all(problem);
    note = "resuming from " + mode;
    return mode;
  }
  // Rank 0 lists the candidates (every rank then checks the same ones, in the same order).
  std::string listing;
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  if (rank == 0) {
    if (std::ifstream in(dir + "/latest"); in) {
      std::string name;
      std::getline(in, name);
      if (!name.empty()) listing += dir + "/" + name + "\n";
    }
    const std::vector<std::string> saved = step_files_in(dir);
    for (auto name = saved.rbegin(); name != saved.rend(); ++name) listing += dir + "/" + *name + "\n";  // newest first
  }
  std::istringstream candidates(comm::broadcast(comm, listing));
  std::string skipped;
  for (std::string c; std::getline(candidates, c);) {
    const std::string problem = verify_collective(c, comm);
    if (problem.empty()) {
      note = "--resume auto: resuming from " + c + skipped;
      return c;
    }
    skipped += " (skipped " + problem + ")";
  }
  note = "--resume auto: no valid checkpoint in " + dir + ", starting fresh" + skipped;
  return "";
}

}  // namespace trident::checkpoint
