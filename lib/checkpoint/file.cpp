#include "checkpoint/file_blocks.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)
#include <hdf5.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

#include "comm/world.hpp"
#include "core/error.hpp"
#include "data/describe.hpp"

namespace trident::checkpoint {

namespace fs = std::filesystem;
using hdf5::Hid;

namespace detail {

namespace {

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

// Elements [lo, hi) (C order) of a dataset's dataspace, selected (at most 2 x rank hyperslabs).
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

// A one-dimensional memory space of n elements (none selected when n is 0).
Hid memory_space(hsize_t n) {
  const hsize_t dims[1] = {std::max<hsize_t>(n, 1)};
  Hid space(HDF5_CHECK(H5Screate_simple(1, dims, nullptr)));
  if (n == 0) HDF5_CHECK(H5Sselect_none(space));
  return space;
}

// "key=value" lines, as meta_text writes them.
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

}  // namespace

long long text_crc(const std::string& text) {
  return static_cast<long long>(crc32(0L, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())));
}

uint32_t crc_of(const void* bytes, size_t size) {  // crc32_z: a rank's piece of a tensor may pass 4 GB
  return static_cast<uint32_t>(crc32_z(0L, static_cast<const Bytef*>(bytes), static_cast<z_size_t>(size)));
}

std::string meta_text(const Meta& m) {
  return fmt::format(
      "format_version={}\nstep={}\nepoch={}\ncursor={}\noptimizer_steps={}\nglobal_batch={}\nworld={}\ndp={}\npp={}\n"
      "zero={}\ntrident_version={}\ntorch_version={}\nloss_scale={}\nloss_scale_good_steps={}\nskipped_steps={}\n"
      "epoch_loss_sum={}\nepoch_loss_steps={}\n",
      kFormatVersion, m.step, m.epoch, m.cursor, m.optimizer_steps, m.global_batch, m.world, m.dp, m.pp, m.zero,
      m.trident_version, m.torch_version, m.loss_scale, m.loss_scale_good_steps, m.skipped_steps, m.epoch_loss_sum,
      m.epoch_loss_steps);
}

DatasetManifest dataset_manifest(hid_t file) {
  auto names = hdf5::dataset_names(file);
  std::sort(names.begin(), names.end());
  return {names.size(), text_crc(fmt::format("{}", fmt::join(names, "\n")))};
}

size_t stored_element_bytes(hid_t dataset) {
  Hid type(HDF5_CHECK(H5Dget_type(dataset)));
  return H5Tget_size(type) == 1 ? 1 : 4;
}

namespace {

// Bytes to read blocks into, grown as needed and left uninitialised (a block may pass 4 GB, and
// every byte of it is read over).
class ScratchBytes {
 public:
  unsigned char* at_least(size_t n) {
    if (n > size_) {
      data_.reset(new unsigned char[n]);
      size_ = n;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<unsigned char[]> data_;
  size_t size_ = 0;
};

// Elements [lo, hi) into `out` (hi - lo elements of `element_bytes`: float32 or bytes).
void read_elements_into(hid_t dataset, int64_t lo, int64_t hi, void* out, size_t element_bytes) {
  Hid file_space = select_range(dataset, static_cast<hsize_t>(lo), static_cast<hsize_t>(hi));
  Hid mem = memory_space(static_cast<hsize_t>(hi - lo));
  HDF5_CHECK(H5Dread(dataset, element_bytes == 1 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT, mem, file_space, H5P_DEFAULT,
                     out));
}

}  // namespace

std::vector<hdf5::Crc32Block> checksum_blocks(hid_t dataset, const std::string& path, const std::string& name) {
  std::vector<int64_t> flat;
  if (!hdf5::read_crc32_blocks(dataset, flat))
    fatal_all(fmt::format("checkpoint {}: tensor {} has no checksums", path, name));
  int64_t numel = 1;
  for (const hsize_t d : hdf5::dataset_shape(dataset)) numel *= static_cast<int64_t>(d);
  std::vector<hdf5::Crc32Block> blocks;
  if (const std::string problem = hdf5::tile_crc32_blocks(flat, numel, "elements", blocks); !problem.empty())
    fatal_all(fmt::format("checkpoint {}: tensor {}: {}: the file is damaged", path, name, problem));
  return blocks;
}

int64_t read_checked_into(hid_t dataset, const std::string& path, const std::string& name,
                          const std::vector<hdf5::Crc32Block>& blocks, int64_t lo, int64_t hi, void* out,
                          size_t element_bytes, const VerifiedBlocks* verified) {
  auto* const into = static_cast<unsigned char*>(out);
  ScratchBytes aside;
  int64_t covered = 0, checksummed = 0;
  for (const auto [begin, end, crc] : blocks) {
    if (end <= lo || begin >= hi) continue;
    const int64_t from = std::max(lo, begin), to = std::min(hi, end);
    covered += to - from;
    if (verified && verified->covers(name, begin, end)) {  // checked moments ago: just its part, into place
      read_elements_into(dataset, from, to, into + static_cast<size_t>(from - lo) * element_bytes, element_bytes);
      continue;
    }
    // A block inside the range is read straight into place; one that sticks out, whole and aside.
    const bool inside = from == begin && to == end;
    const auto bytes = static_cast<size_t>(end - begin) * element_bytes;
    unsigned char* const block =
        inside ? into + static_cast<size_t>(begin - lo) * element_bytes : aside.at_least(bytes);
    read_elements_into(dataset, begin, end, block, element_bytes);
    ++checksummed;
    if (crc_of(block, bytes) != static_cast<uint32_t>(crc))
      fatal_all(fmt::format("checkpoint {}: tensor {} is damaged (checksum mismatch in elements {}..{})", path, name,
                            begin, end));
    if (!inside)
      std::memcpy(into + static_cast<size_t>(from - lo) * element_bytes,
                  block + static_cast<size_t>(from - begin) * element_bytes,
                  static_cast<size_t>(to - from) * element_bytes);
  }
  if (covered < hi - lo)  // the blocks tile the tensor: only a range past its end gets here
    fatal_all(fmt::format("checkpoint {}: tensor {} has no checksummed block for some of elements {}..{}", path, name,
                          lo, hi));
  return checksummed;
}

std::unique_ptr<Hid> open_checked(const std::string& path, Meta& meta) {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  hdf5::quiet();
  // A file that fails a check is closed here, under the HDF5 lock (the prefetch thread may be in
  // HDF5 once it is released).
  std::unique_ptr<Hid> file;
  try {
    if (!fs::exists(path)) fatal_all(fmt::format("checkpoint {}: no such file", path));
    if (!hdf5::is_hdf5_file(path)) fatal_all(fmt::format("checkpoint {}: not an HDF5 file (truncated?)", path));
    file = std::make_unique<Hid>(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    if (!file->valid())  // (truncated or damaged, most often; or a lock HDF5 could not take)
      fatal_all(fmt::format("checkpoint {}: HDF5 cannot open it: {}", path, innermost(hdf5_error_text())));
    const std::string text = hdf5::read_string_attribute(*file, "meta");
    long long stored_crc = -1;
    if (!hdf5::read_int_attribute(*file, "meta_crc32", stored_crc)) stored_crc = -1;
    if (text.empty() || stored_crc != text_crc(text))
      fatal_all(fmt::format("checkpoint {}: metadata missing or damaged", path));
    auto m = parse_lines(text);
    if (m["format_version"] != std::to_string(kFormatVersion))
      fatal_all(fmt::format("checkpoint {}: format version {} (this trident reads version {})", path,
                            m["format_version"], kFormatVersion));
    // A line its checksum covers yet that reads as no number (a writer's fault, or a hand-edited
    // file given a fresh checksum) is damage too: bad input, which --resume auto passes over.
    auto number_line = [&](const char* key, auto parse) {
      const std::string& text = m[key];
      size_t used = 0;
      try {
        const auto value = parse(text, &used);
        if (used == text.size()) return value;
      } catch (const std::exception&) {
      }
      fatal_all(fmt::format("checkpoint {}: metadata line '{}' is {}", path, key,
                            text.empty() ? std::string("missing") : fmt::format("not a number ('{}')", text)));
    };
    auto num = [&](const char* key) {
      return number_line(key, [](const std::string& t, size_t* used) { return std::stoll(t, used); });
    };
    auto real = [&](const char* key) {
      return number_line(key, [](const std::string& t, size_t* used) { return std::stod(t, used); });
    };
    auto count = [&](const char* key) {  // a rank count or ZeRO stage, kept as int
      const int64_t value = num(key);
      if (value < 0 || value > std::numeric_limits<int>::max())
        fatal_all(fmt::format("checkpoint {}: metadata line '{}' is out of range ('{}')", path, key, m[key]));
      return static_cast<int>(value);
    };
    meta.step = num("step");
    meta.epoch = num("epoch");
    meta.cursor = num("cursor");
    meta.optimizer_steps = num("optimizer_steps");
    meta.global_batch = num("global_batch");
    meta.world = count("world");
    meta.dp = count("dp");
    meta.pp = count("pp");
    meta.zero = count("zero");
    meta.trident_version = m["trident_version"];
    meta.torch_version = m["torch_version"];
    if (m.count("loss_scale")) {
      meta.loss_scale = real("loss_scale");
      meta.loss_scale_good_steps = num("loss_scale_good_steps");
      meta.skipped_steps = num("skipped_steps");
    }
    if (m.count("epoch_loss_sum")) {
      meta.epoch_loss_sum = real("epoch_loss_sum");
      meta.epoch_loss_steps = num("epoch_loss_steps");
    }
    meta.deck = hdf5::read_string_attribute(*file, "deck");
    // Files of older writers have neither line.
    if (m.count("deck_crc32") && num("deck_crc32") != text_crc(meta.deck))
      fatal_all(fmt::format("checkpoint {}: its deck (attribute 'deck') is damaged: it fails its checksum", path));
    if (m.count("datasets_crc32")) {
      const DatasetManifest now = read_or_refuse(path, "/", [&] { return dataset_manifest(*file); });
      if (num("datasets_crc32") != now.crc)
        fatal_all(fmt::format("checkpoint {}: its tensor names are damaged ({} datasets written, {} now; the names "
                              "fail their checksum)",
                              path, m["datasets"], now.count));
    }
  } catch (...) {
    file.reset();
    throw;
  }
  return file;
}

}  // namespace detail

using namespace detail;

namespace {

// What identifies a file's contents for VerifiedBlocks: device, inode, size, modification and
// status-change times ("" when it cannot be read). A file replaced (renamed over) or written
// since differs, even when the writer put the modification time back (touch -r, rsync -t).
std::string file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  return fmt::format("{}:{}:{}:{}.{}:{}.{}", st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec,
                     st.st_mtim.tv_nsec, st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
}

}  // namespace

void VerifiedBlocks::start(const std::string& path) {
  forget();
  identity_ = file_identity(path);
}

bool VerifiedBlocks::same_file(const std::string& path) const {
  return !identity_.empty() && file_identity(path) == identity_;
}

std::string verify(const std::string& path, int part, int parts, VerifiedBlocks* verified) {
  std::string problem;
  try {
    std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
    if (verified) verified->start(path);  // (before reading: a write meanwhile changes the identity)
    Meta meta;
    const std::unique_ptr<Hid> file = open_checked(path, meta);  // its metadata checked first
    int64_t index = 0;  // of the block across the file: blocks are dealt out to the parts in turn
    ScratchBytes bytes;
    for (const auto& name : hdf5::dataset_names(*file)) {
      Hid dataset(H5Dopen2(*file, name.c_str(), H5P_DEFAULT));
      if (!dataset.valid()) {
        problem = fmt::format("checkpoint {}: tensor {} cannot be opened", path, name);
        break;
      }
      const auto blocks = checksum_blocks(dataset, path, name);  // read once per tensor; throws if bad
      const size_t element_bytes = stored_element_bytes(dataset);
      for (const auto& block : blocks) {
        if (index++ % parts != part) continue;
        read_checked_into(dataset, path, name, blocks, block.begin, block.end,
                          bytes.at_least(static_cast<size_t>(block.end - block.begin) * element_bytes), element_bytes);
        if (verified) verified->add(name, block.begin, block.end);
      }
    }
  } catch (const BadInput& e) {
    problem = e.what();
  } catch (const Fault& e) {
    problem = fmt::format("checkpoint {}: unreadable ({})", path, e.what());
  }
  if (verified && !problem.empty()) verified->forget();
  return problem;
}

bool is_checkpoint(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  hdf5::quiet();
  if (!hdf5::is_hdf5_file(path)) return false;
  Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  return file.valid() && H5Aexists(file, "meta") > 0;
}

std::string verify_collective(const std::string& path, MPI_Comm comm, VerifiedBlocks* verified) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  const std::string verdict = comm::first_error(comm, verify(path, rank, size, verified));
  if (verified && !verdict.empty()) verified->forget();  // (another rank's block failed)
  return verdict;
}

std::string describe(const std::string& path, std::string& problem) {
  problem = verify(path);
  std::string out;
  std::string unlisted;
  try {
    out = data::describe_hdf5(path);
  } catch (const std::runtime_error& e) {  // damaged structure (BadInput, Fault)
    out = path + "\n(its objects cannot be listed)\n";
    unlisted = e.what();
  }
  // The checksums cover the tensors' bytes, not the headers, group entries and attributes the
  // listing reads: a file whose tensors verify can still be damaged there, and is not "verified".
  if (!problem.empty())
    out += "checksums: FAILED: " + problem + "\n";
  else if (!unlisted.empty())
    out += "checksums: its tensors' blocks verify, but its structure is damaged\n";
  else
    out += "checksums: every block verified\n";
  if (problem.empty()) problem = unlisted;
  return out;
}

}  // namespace trident::checkpoint
