#include "data/describe.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/hdf5.hpp"

namespace trident::data {

namespace fs = std::filesystem;

namespace {

std::string attributes_of(hid_t object) {
  std::string out;
  H5O_info_t info;
  if (H5Oget_info2(object, &info, H5O_INFO_NUM_ATTRS) < 0) return out;
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    hdf5::Hid attr(H5Aopen_by_idx(object, ".", H5_INDEX_NAME, H5_ITER_INC, i, H5P_DEFAULT, H5P_DEFAULT));
    if (!attr.valid()) continue;
    char name[256] = {0};
    H5Aget_name(attr, sizeof(name), name);
    hdf5::Hid type(H5Aget_type(attr));
    std::string value;
    std::vector<int64_t> blocks;
    if (std::string(name) == "crc32_blocks" && hdf5::read_crc32_blocks(object, blocks)) {
      const size_t count = blocks.size() / 3;  // a summary: thousands of numbers otherwise
      value = fmt::format("CRC-32 of {} block{} of rows", count, count == 1 ? "" : "s");
    } else if (H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0) {
      // h5py's default strings: each a pointer HDF5 allocates, given back after.
      hdf5::Hid space(H5Aget_space(attr));
      const auto n = static_cast<size_t>(std::max<hssize_t>(1, H5Sget_simple_extent_npoints(space)));
      std::vector<char*> strings(n, nullptr);
      hdf5::Hid memory_type(H5Tcopy(H5T_C_S1));
      H5Tset_size(memory_type, H5T_VARIABLE);
      H5Tset_cset(memory_type, H5Tget_cset(type));  // h5py's are UTF-8: HDF5 converts no character set
      std::vector<std::string> texts;
      if (H5Aread(attr, memory_type, strings.data()) >= 0) {
        for (const char* s : strings) texts.push_back("\"" + std::string(s ? s : "") + "\"");
        H5Dvlen_reclaim(memory_type, space, H5P_DEFAULT, strings.data());
      }
      value = texts.size() == 1 ? texts[0] : fmt::format("[{}]", fmt::join(texts, ", "));
    } else if (H5Tget_class(type) == H5T_STRING) {
      value = "\"" + hdf5::read_string_attribute(object, name) + "\"";
    } else if (H5Tget_class(type) == H5T_INTEGER || H5Tget_class(type) == H5T_FLOAT) {
      // Scalars and arrays alike: read every element (an array into a scalar would overflow).
      hdf5::Hid space(H5Aget_space(attr));
      const auto n = static_cast<size_t>(std::max<hssize_t>(1, H5Sget_simple_extent_npoints(space)));
      std::vector<double> values(n);
      H5Aread(attr, H5T_NATIVE_DOUBLE, values.data());
      value = n == 1 ? fmt::format("{}", values[0]) : fmt::format("[{}]", fmt::join(values, ", "));
    } else {
      value = "(" + hdf5::type_name(type) + ")";
    }
    out += fmt::format("    @{} = {}\n", name, value);
  }
  return out;
}

// One group ("/train/") or dataset ("/train/inputs  uint8  [60000 x 1 x 28 x 28]") and its attributes.
std::string describe_object(hid_t file, const hdf5::Object& object) {
  if (object.is_group) {
    hdf5::Hid group(HDF5_CHECK(H5Gopen2(file, object.path.c_str(), H5P_DEFAULT)));
    return (object.path == "/" ? "/" : object.path + "/") + "\n" + attributes_of(group);
  }
  hdf5::Hid dataset(HDF5_CHECK(H5Dopen2(file, object.path.c_str(), H5P_DEFAULT)));
  hdf5::Hid type(HDF5_CHECK(H5Dget_type(dataset)));
  std::string shape;
  for (auto d : hdf5::dataset_shape(dataset)) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
  return fmt::format("{}  {}  [{}]\n", object.path, hdf5::type_name(type), shape) + attributes_of(dataset);
}

}  // namespace

std::string describe_hdf5(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  hdf5::quiet();
  if (!fs::exists(path)) fatal_all(fmt::format("inspect: {}: no such file", path));
  if (fs::is_directory(path))
    fatal_all(fmt::format("inspect: {}: a folder; give a dataset or a checkpoint file (a run's are in "
                          "RUN/checkpoints/step_*.h5)", path));
  if (!hdf5::is_hdf5_file(path)) fatal_all(fmt::format("inspect: {}: not an HDF5 file", path));
  hdf5::Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) fatal_all(fmt::format("inspect: {}: HDF5 cannot open it: {}", path, innermost(hdf5_error_text())));
  // A damaged file is bad input named as such (exit 2), not a fault of the process.
  std::vector<hdf5::Object> objects;
  if (!hdf5::list_objects(file, objects))
    fatal_all(fmt::format("inspect: {}: HDF5 cannot list its objects, the file is damaged ({})", path, hdf5_error_text()));
  std::string out = fmt::format("{}\n", path);
  for (const auto& object : objects) {
    try {
      out += describe_object(file, object);
    } catch (const Fault& e) {
      fatal_all(fmt::format("inspect: {}: {} cannot be read, the file is damaged ({})", path, object.path, e.what()));
    }
  }
  return out;
}

std::string find_damaged_dataset(const std::string& path, int part, int parts, int* checksummed) {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  hdf5::quiet();
  hdf5::Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) return fmt::format("{}: HDF5 cannot open it: {}", path, innermost(hdf5_error_text()));
  if (checksummed) *checksummed = 0;
  std::vector<hdf5::Object> objects;
  if (!hdf5::list_objects(file, objects)) return fmt::format("{}: HDF5 cannot list its objects, the file is damaged", path);
  for (const auto& object : objects) {
    if (object.is_group) continue;
    try {
      hdf5::Hid dataset(HDF5_CHECK(H5Dopen2(file, object.path.c_str(), H5P_DEFAULT)));
      const bool has_checksums = H5Aexists(dataset, "crc32_blocks") > 0;
      if (checksummed && has_checksums) ++*checksummed;
      const std::string problem = has_checksums ? hdf5::find_damaged_rows(dataset, part, parts)
                                                : hdf5::find_unreadable_rows(dataset, part, parts);
      if (!problem.empty()) return fmt::format("{}: {}: {}", path, object.path, problem);
    } catch (const Fault& e) {  // a read HDF5 refuses: damage too, not a fault of this process
      return fmt::format("{}: {} cannot be read, the file is damaged ({})", path, object.path, e.what());
    }
  }
  return "";
}

}  // namespace trident::data
