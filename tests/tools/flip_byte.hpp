#pragma once
// Inverts one byte of a contiguous HDF5 dataset, `byte` bytes into its data, behind HDF5's back
// (its checksums, if any, are left as they were): "" on success, else what failed. Shared by
// trident_make_bad_inputs (flip-byte) and the unit tests. HDF5 C API only.
#include <hdf5.h>

#include <cstdio>
#include <string>

#include "core/hdf5.hpp"

namespace trident::test {

inline std::string flip_byte(const std::string& path, const std::string& name, long long byte) {
  haddr_t offset = HADDR_UNDEF;
  {
    hdf5::Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    if (!file.valid()) return "H5Fopen " + path + " failed";
    hdf5::Hid dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
    if (!dataset.valid()) return "H5Dopen2 " + name + " failed";
    offset = H5Dget_offset(dataset);
  }
  if (offset == HADDR_UNDEF) return "H5Dget_offset " + name + " failed (not contiguous?)";
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  if (!f) return "opening " + path + " failed";
  const long at = static_cast<long>(offset) + static_cast<long>(byte);
  int old = EOF;
  const bool ok = std::fseek(f, at, SEEK_SET) == 0 && (old = std::fgetc(f)) != EOF && std::fseek(f, at, SEEK_SET) == 0 &&
                  std::fputc(old ^ 0xFF, f) != EOF;
  if (std::fclose(f) != 0 || !ok) return "changing byte " + std::to_string(at) + " of " + path + " failed";
  return "";
}

}  // namespace trident::test
