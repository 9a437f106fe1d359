#pragma once
// What `trident inspect` says of an HDF5 file that is not a checkpoint (a dataset), and its
// checksums verified. No LibTorch: `trident` itself runs it (app/main.cpp).
#include <string>

namespace trident::data {

// Lists every group and dataset of an HDF5 file with shape, dtype and attributes.
std::string describe_hdf5(const std::string& path);
// Every dataset's checksummed blocks (part `part` of `parts` of each; hdf5::find_damaged_rows),
// and a dataset without checksums read once (hdf5::find_unreadable_rows): "PATH: /DATASET: what
// is wrong", or "" when all is well; `checksummed`, if given, counts the datasets that carry them.
std::string find_damaged_dataset(const std::string& path, int part = 0, int parts = 1, int* checksummed = nullptr);

}  // namespace trident::data
