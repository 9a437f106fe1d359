#include "core/hdf5.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace trident::hdf5 {

std::recursive_mutex& mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

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
  std::string value(H5Tget_size(type), '\0');
  HDF5_CHECK(H5Aread(attr, type, value.data()));
  return value.substr(0, value.find('\0'));
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

}  // namespace trident::hdf5
