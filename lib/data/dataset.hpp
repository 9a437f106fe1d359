#pragma once
// One split (/train or /test) of a classification dataset in HDF5:
//   /<split>/inputs  N x ... (uint8 scaled to [0, 1], or float32 as stored)
//   /<split>/labels  N integers in [0, classes)
//   root attribute "classes".
// Reads only the rows asked for, through HDF5 hyperslab selections. Opening checks the layout,
// the types and that every label is in [0, classes).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/hdf5_file.hpp"

namespace trident::data {

class SplitReader {
 public:
  // Throws BadInput naming the file and the dataset when the file or split is unusable.
  SplitReader(const std::string& path, const std::string& split);

  int64_t size() const { return size_; }
  const std::vector<int64_t>& sample_shape() const { return sample_shape_; }
  int64_t classes() const { return classes_; }
  const std::string& path() const { return path_; }

  // Rows `indices` (any order, no repeats) as float inputs [n, ...] and int64 labels [n],
  // in the order asked for. A null pointer skips that dataset (a middle pipeline stage reads
  // nothing, the last stage only labels).
  void read(const std::vector<int64_t>& indices, at::Tensor* inputs, at::Tensor* labels);
  void read_range(int64_t begin, int64_t end, at::Tensor* inputs, at::Tensor* labels);
  // The first sample in [begin, end) whose inputs hold NaN or Inf, as a message; "" if none.
  std::string find_non_finite(int64_t begin, int64_t end);

 private:
  std::string path_, split_;
  Hid file_, inputs_, labels_;
  int64_t size_ = 0, classes_ = 0;
  std::vector<int64_t> sample_shape_;
  bool inputs_are_bytes_ = false;
};

}  // namespace trident::data
