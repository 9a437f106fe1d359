#include "core/hdf5.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <array>
#include <utility>

#include "core/error.hpp"

namespace trident::hdf5 {

std::recursive_mutex& mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

void without_its_file_locks() { setenv("HDF5_USE_FILE_LOCKING", "FALSE", /*overwrite=*/0); }

void Hid::reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: break;
  }
  id_ = H5I_INVALID_HID;
}

Hid creation_without_fill() {
  Hid creation(HDF5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  HDF5_CHECK(H5Pset_fill_time(creation, H5D_FILL_TIME_NEVER));
  HDF5_CHECK(H5Pset_alloc_time(creation, H5D_ALLOC_TIME_EARLY));
  // No creation/modification times in the object headers: two saves of the same state are the
  // same bytes.
  HDF5_CHECK(H5Pset_obj_track_times(creation, 0));
  return creation;
}

Hid groups_without_times() {
  Hid creation(HDF5_CHECK(H5Pcreate(H5P_GROUP_CREATE)));
  HDF5_CHECK(H5Pset_obj_track_times(creation, 0));
  return creation;
}

bool is_hdf5_file(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  return H5Fis_hdf5(path.c_str()) > 0;
}

bool link_exists(hid_t loc, const std::string& path) {
  std::string prefix;
  size_t start = 0;
  while (start <= path.size()) {
    const auto slash = path.find('/', start);
    prefix = path.substr(0, slash);
    if (!prefix.empty() && H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return true;
}

std::vector<hsize_t> dataset_shape(hid_t dataset) {
  Hid space(HDF5_CHECK(H5Dget_space(dataset)));
  const int rank = HDF5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  HDF5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  return dims;
}

bool list_objects(hid_t file, std::vector<Object>& objects) {
  // The callback only records (no HDF5 call, nothing that throws through HDF5's C frames): what
  // callers do with each object happens after the walk.
  auto visit = [](hid_t, const char* name, const H5O_info_t* info, void* data) -> herr_t {
    if (info->type != H5O_TYPE_GROUP && info->type != H5O_TYPE_DATASET) return 0;
    const std::string path = std::string(name) == "." ? "/" : "/" + std::string(name);
    static_cast<std::vector<Object>*>(data)->push_back({path, info->type == H5O_TYPE_GROUP});
    return 0;
  };
  objects.clear();
  return H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, visit, &objects, H5O_INFO_BASIC) >= 0;
}

std::vector<std::string> dataset_names(hid_t file) {
  std::vector<Object> objects;
  if (!list_objects(file, objects)) fail_hdf5("H5Ovisit2", __FILE__, __LINE__);
  std::vector<std::string> names;
  for (const auto& object : objects)
    if (!object.is_group) names.push_back(object.path);
  return names;
}

void write_string_attribute(hid_t object, const std::string& name, const std::string& value) {
  if (H5Aexists(object, name.c_str()) > 0) HDF5_CHECK(H5Adelete(object, name.c_str()));
  Hid type(HDF5_CHECK(H5Tcopy(H5T_C_S1)));
  HDF5_CHECK(H5Tset_size(type, value.empty() ? 1 : value.size()));
  HDF5_CHECK(H5Tset_strpad(type, H5T_STR_NULLPAD));
  Hid space(HDF5_CHECK(H5Screate(H5S_SCALAR)));
  Hid attr(HDF5_CHECK(H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT)));
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  HDF5_CHECK(H5Awrite(attr, type, padded.data()));
}

std::string read_string_attribute(hid_t object, const std::string& name) {
  if (H5Aexists(object, name.c_str()) <= 0) return "";
  Hid attr(HDF5_CHECK(H5Aopen(object, name.c_str(), H5P_DEFAULT)));
  Hid type(HDF5_CHECK(H5Aget_type(attr)));
  if (H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) > 0) return "";
  Hid space(HDF5_CHECK(H5Aget_space(attr)));
  if (H5Sget_simple_extent_npoints(space) != 1) return "";  // an array of strings would overrun `value`
  std::string value(H5Tget_size(type), '\0');
  HDF5_CHECK(H5Aread(attr, type, value.data()));
  return value.substr(0, value.find('\0'));
}

bool read_int_attribute(hid_t object, const std::string& name, long long& value) {
  if (H5Aexists(object, name.c_str()) <= 0) return false;
  Hid attr(H5Aopen(object, name.c_str(), H5P_DEFAULT));
  Hid space(attr.valid() ? H5Aget_space(attr) : H5I_INVALID_HID);
  Hid type(attr.valid() ? H5Aget_type(attr) : H5I_INVALID_HID);
  if (!space.valid() || !type.valid() || H5Sget_simple_extent_npoints(space) != 1 || H5Tget_class(type) != H5T_INTEGER)
    return false;
  return H5Aread(attr, H5T_NATIVE_LLONG, &value) >= 0;
}

void write_int_attribute(hid_t object, const std::string& name, long long value) {
  if (H5Aexists(object, name.c_str()) > 0) HDF5_CHECK(H5Adelete(object, name.c_str()));
  Hid space(HDF5_CHECK(H5Screate(H5S_SCALAR)));
  Hid attr(HDF5_CHECK(H5Acreate2(object, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT)));
  HDF5_CHECK(H5Awrite(attr, H5T_NATIVE_LLONG, &value));
}

std::string type_name(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return fmt::format("{}int{}", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", 8 * H5Tget_size(type));
    case H5T_FLOAT: return fmt::format("float{}", 8 * H5Tget_size(type));
    case H5T_STRING: return "string";
    default: return "other";
  }
}

// ---- CRC-32 checksums of a dataset's rows ----------------------------------------------------

namespace {

constexpr hsize_t kBlockBytes = hsize_t{1} << 20;  // a checksummed block: about 1 MiB of rows
constexpr hsize_t kMaxBlocks = 2048;               // 3 x 8 bytes each: the attribute stays < 64 KiB
constexpr hsize_t kReadBytes = hsize_t{8} << 20;   // rows read at a time while checksumming

// Bytes of one row (a slice along the first axis) as stored.
hsize_t row_bytes(hid_t type, const std::vector<hsize_t>& dims) {
  hsize_t bytes = H5Tget_size(type);
  for (size_t d = 1; d < dims.size(); ++d) bytes *= dims[d];
  return std::max<hsize_t>(bytes, 1);
}

// A dataset's rows as stored: its shape, file type and row size, read once for all its blocks.
struct StoredRows {
  hid_t dataset;
  std::vector<hsize_t> dims;
  Hid type;
  hsize_t row;
  explicit StoredRows(hid_t d)
      : dataset(d), dims(dataset_shape(d)), type(HDF5_CHECK(H5Dget_type(d))), row(row_bytes(type, dims)) {}

  // Rows [begin, end) in the file's own type, so HDF5 converts nothing, a few MiB at a time, each
  // piece given to `each`; "" when all were read, else HDF5's reason (taken before any other call
  // clears its error stack).
  template <typename Each>
  std::string read_rows(hsize_t begin, hsize_t end, Each each) const {
    const hsize_t rows_per_read = std::max<hsize_t>(1, kReadBytes / row);
    Hid file_space(HDF5_CHECK(H5Dget_space(dataset)));
    std::vector<unsigned char> buffer;
    for (hsize_t first = begin; first < end; first += rows_per_read) {
      std::vector<hsize_t> start(dims.size(), 0), count(dims);
      start[0] = first;
      count[0] = std::min(end - first, rows_per_read);
      HDF5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
      Hid memory(HDF5_CHECK(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr)));
      buffer.resize(count[0] * row);
      if (H5Dread(dataset, type, memory, file_space, H5P_DEFAULT, buffer.data()) < 0)
        return innermost(hdf5_error_text());
      each(buffer);
    }
    return "";
  }

  // CRC-32 of rows [begin, end).
  uint32_t crc32(hsize_t begin, hsize_t end) const {
    uLong crc = crc32_z(0L, Z_NULL, 0);
    const std::string failure =
        read_rows(begin, end, [&](const std::vector<unsigned char>& b) { crc = crc32_z(crc, b.data(), b.size()); });
    if (!failure.empty()) fatal_one(fmt::format("{}:{}: H5Dread failed: {}", __FILE__, __LINE__, failure));
    return static_cast<uint32_t>(crc);
  }
};

}  // namespace

bool read_crc32_blocks(hid_t dataset, std::vector<int64_t>& blocks) {
  if (H5Aexists(dataset, "crc32_blocks") <= 0) return false;
  // No HDF5_CHECK: an attribute of that name another tool wrote as, say, a string is a damaged
  // record (bad input), not a fault of this rank.
  Hid attr(H5Aopen(dataset, "crc32_blocks", H5P_DEFAULT));
  Hid space(attr.valid() ? H5Aget_space(attr) : H5I_INVALID_HID);
  const hssize_t n = space.valid() ? H5Sget_simple_extent_npoints(space) : -1;
  if (n < 0) return false;
  std::vector<int64_t> values(static_cast<size_t>(n));
  if (n > 0 && H5Aread(attr, H5T_NATIVE_INT64, values.data()) < 0) return false;
  blocks = std::move(values);
  return true;
}

bool write_crc32_blocks(hid_t dataset, const std::vector<int64_t>& blocks) {
  const std::vector<int64_t> stored = blocks.empty() ? std::vector<int64_t>{0} : blocks;
  const hsize_t n = stored.size();
  Hid space(H5Screate_simple(1, &n, nullptr));
  Hid attr(space.valid() ? H5Acreate2(dataset, "crc32_blocks", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT)
                         : H5I_INVALID_HID);
  return attr.valid() && H5Awrite(attr, H5T_NATIVE_INT64, stored.data()) >= 0;
}

void checksum_rows(hid_t dataset) {
  const StoredRows stored(dataset);
  if (stored.dims.empty()) return;  // a scalar has no rows
  const hsize_t rows = stored.dims[0];
  const hsize_t rows_per_block = std::max({hsize_t{1}, kBlockBytes / stored.row, (rows + kMaxBlocks - 1) / kMaxBlocks});
  std::vector<int64_t> blocks;
  for (hsize_t begin = 0; begin < rows; begin += rows_per_block) {
    const hsize_t end = std::min(rows, begin + rows_per_block);
    blocks.insert(blocks.end(), {static_cast<int64_t>(begin), static_cast<int64_t>(end),
                                 static_cast<int64_t>(stored.crc32(begin, end))});
  }
  if (!write_crc32_blocks(dataset, blocks)) fail_hdf5("H5Acreate2(crc32_blocks)", __FILE__, __LINE__);
}

std::string tile_crc32_blocks(const std::vector<int64_t>& flat, int64_t count, const char* unit,
                              std::vector<Crc32Block>& sorted) {
  sorted.clear();
  if (flat.size() == 1 && count == 0) return "";  // nothing to cover: one padding value
  if (flat.size() % 3 != 0) return "its crc32_blocks attribute is not a list of (begin, end, crc) triples";
  for (size_t i = 0; i < flat.size(); i += 3) sorted.push_back({flat[i], flat[i + 1], flat[i + 2]});
  std::sort(sorted.begin(), sorted.end(), [](const Crc32Block& a, const Crc32Block& b) { return a.begin < b.begin; });
  int64_t covered = 0;
  for (const auto& [begin, end, crc] : sorted) {
    if (begin != covered || end <= begin || end > count)
      return fmt::format("its crc32_blocks attribute does not tile {} [0, {}): block [{}, {}) follows [0, {})", unit,
                         count, begin, end, covered);
    covered = end;
  }
  if (covered != count) return fmt::format("its crc32_blocks attribute does not cover {} [{}, {})", unit, covered, count);
  return "";
}

std::string find_damaged_rows(hid_t dataset, int part, int parts) {
  std::vector<int64_t> flat;
  if (H5Aexists(dataset, "crc32_blocks") <= 0) return "";  // unchecked: not written by trident
  if (!read_crc32_blocks(dataset, flat)) return "its crc32_blocks attribute cannot be read as integers";
  const StoredRows stored(dataset);
  const int64_t rows = stored.dims.empty() ? 1 : static_cast<int64_t>(stored.dims[0]);
  std::vector<Crc32Block> blocks;
  if (std::string problem = tile_crc32_blocks(flat, rows, "rows", blocks); !problem.empty()) return problem;
  const size_t first = blocks.size() * static_cast<size_t>(part) / static_cast<size_t>(parts);
  const size_t last = blocks.size() * static_cast<size_t>(part + 1) / static_cast<size_t>(parts);
  for (size_t b = first; b < last; ++b) {
    const auto [begin, end, crc] = blocks[b];
    if (stored.crc32(static_cast<hsize_t>(begin), static_cast<hsize_t>(end)) != static_cast<uint32_t>(crc))
      return fmt::format("rows [{}, {}) differ from their CRC-32 (attribute crc32_blocks): the file is damaged", begin,
                         end);
  }
  return "";
}

std::string find_unreadable_rows(hid_t dataset, int part, int parts) {
  const StoredRows stored(dataset);
  // Rows of fixed size only: a scalar has none, and variable-length data (h5py's strings) would
  // come back as pointers HDF5 allocates. Neither is training data.
  if (stored.dims.empty() || H5Tis_variable_str(stored.type) > 0 || H5Tget_class(stored.type) == H5T_VLEN) return "";
  const hsize_t rows = stored.dims[0];
  const hsize_t begin = rows * static_cast<hsize_t>(part) / static_cast<hsize_t>(parts);
  const hsize_t end = rows * static_cast<hsize_t>(part + 1) / static_cast<hsize_t>(parts);
  const std::string failure = stored.read_rows(begin, end, [](const std::vector<unsigned char>&) {});
  return failure.empty() ? "" : fmt::format("rows [{}, {}) cannot be read ({}): the file is damaged", begin, end, failure);
}

}  // namespace trident::hdf5
