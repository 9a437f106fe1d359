#pragma once
// Comparing checkpoint files dataset by dataset, byte for byte.
#include <hdf5.h>

#include <map>
#include <string>
#include <vector>

#include "train_helpers.hpp"

namespace trident::test_support {

// Every dataset of an HDF5 file (path -> its raw bytes as stored) and every dataset
// attribute (path@name -> raw bytes): parameters, optimizer state, buffers, RNG states and the
// block checksums. The root's attributes are not datasets (meta_of reads the training state; the
// deck, which names the output folder, is left out).
inline std::map<std::string, std::vector<char>> datasets_of(const std::string& path) {
  std::map<std::string, std::vector<char>> out;
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) {
    ADD_FAILURE() << "cannot open " << path;
    return out;
  }
  auto read_raw = [](hid_t object, bool attribute) {
    const hid_t type = attribute ? H5Aget_type(object) : H5Dget_type(object);
    const hid_t space = attribute ? H5Aget_space(object) : H5Dget_space(object);
    std::vector<char> bytes(static_cast<size_t>(H5Sget_simple_extent_npoints(space)) * H5Tget_size(type));
    if (!bytes.empty()) {
      if (attribute) H5Aread(object, type, bytes.data());
      else H5Dread(object, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
    }
    H5Sclose(space);
    H5Tclose(type);
    return bytes;
  };
  struct Visit {
    std::map<std::string, std::vector<char>>* out;
    decltype(read_raw)* read;
  } visit{&out, &read_raw};
  H5Ovisit2(
      file, H5_INDEX_NAME, H5_ITER_NATIVE,
      [](hid_t root, const char* name, const H5O_info_t* info, void* data) -> herr_t {
        if (info->type != H5O_TYPE_DATASET) return 0;
        auto& v = *static_cast<Visit*>(data);
        const hid_t dataset = H5Dopen2(root, name, H5P_DEFAULT);
        (*v.out)[name] = (*v.read)(dataset, false);
        for (hsize_t a = 0; a < info->num_attrs; ++a) {
          const hid_t attr = H5Aopen_by_idx(dataset, ".", H5_INDEX_NAME, H5_ITER_NATIVE, a, H5P_DEFAULT, H5P_DEFAULT);
          char attr_name[256] = {0};
          H5Aget_name(attr, sizeof(attr_name), attr_name);
          (*v.out)[std::string(name) + "@" + attr_name] = (*v.read)(attr, true);
          H5Aclose(attr);
        }
        H5Dclose(dataset);
        return 0;
      },
      &visit, H5O_INFO_BASIC | H5O_INFO_NUM_ATTRS);
  H5Fclose(file);
  return out;
}

// The root's "meta" attribute: the training state (step, data cursor, optimizer steps, loss
// scale, the epoch's loss so far) and the layout, as text, less its deck_crc32 line: the runs
// compared differ in their decks (a resumed run's output folder and step count), which the deck
// attribute holds and these comparisons leave out.
inline std::string meta_of(const std::string& path) {
  std::string text;
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) return text;
  if (H5Aexists(file, "meta") > 0) {
    const hid_t attr = H5Aopen(file, "meta", H5P_DEFAULT);
    const hid_t type = H5Aget_type(attr);
    text.resize(H5Tget_size(type));
    H5Aread(attr, type, text.data());
    H5Tclose(type);
    H5Aclose(attr);
  }
  H5Fclose(file);
  if (const auto at = text.find("deck_crc32="); at != std::string::npos) text.erase(at, text.find('\n', at) + 1 - at);
  return text;
}

// The final checkpoints of two runs of one layout hold the same datasets with the same bytes, and
// the same metadata.
inline void expect_identical_checkpoints(const std::string& a, const std::string& b, const std::string& what) {
  if (world_rank() != 0) return;
  const std::string meta_a = meta_of(a);
  EXPECT_NE(meta_a.find("optimizer_steps="), std::string::npos) << what << ": no metadata read from " << a;
  EXPECT_EQ(meta_a, meta_of(b)) << what << ": the metadata differs between " << a << " and " << b;
  const auto left = datasets_of(a), right = datasets_of(b);
  ASSERT_FALSE(left.empty()) << a;
  std::vector<std::string> names_left, names_right;
  for (const auto& kv : left) names_left.push_back(kv.first);
  for (const auto& kv : right) names_right.push_back(kv.first);
  ASSERT_EQ(names_left, names_right) << what << ": the two checkpoints hold different datasets";
  int buffers = 0;
  for (const auto& [name, bytes] : left) {
    buffers += name.rfind("buffers/", 0) == 0 && name.find('@') == std::string::npos;
    EXPECT_TRUE(bytes == right.at(name)) << what << ": " << name << " differs between " << a << " and " << b;
  }
  if (what.find("cnn") != std::string::npos) {
    EXPECT_GT(buffers, 0) << what << ": the cnn's batch-norm statistics are missing from " << a;
  }
}

}  // namespace trident::test_support
