#pragma once
// The samples of one split of a dataset (data/split_file.hpp: its layout and the checks made
// when it is opened) as tensors. Reads only the rows asked for, through HDF5 hyperslab
// selections; token ranges are checked by find_bad_values and the checksums by
// find_damaged_rows (each rank its share).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/split_file.hpp"

namespace trident::data {

class SplitReader : public SplitFile {
 public:
  using SplitFile::SplitFile;

  // Rows `indices` (any order, no repeats) as float inputs [n, ...] and int64 labels [n],
  // in the order asked for. A null pointer skips that dataset (a middle pipeline stage reads
  // nothing, the last stage only labels).
  void read(const std::vector<int64_t>& indices, at::Tensor* inputs, at::Tensor* labels);
  void read_range(int64_t begin, int64_t end, at::Tensor* inputs, at::Tensor* labels);
  // The first sample in [begin, end) whose inputs hold NaN or Inf, or (tokens) a token outside
  // [0, vocab), as a message; "" if none.
  std::string find_bad_values(int64_t begin, int64_t end);

 private:
  at::Tensor read_windows(const std::vector<int64_t>& indices);  // int64 [n, seq_len + 1]
  void read_unchecked(const std::vector<int64_t>& indices, at::Tensor* inputs, at::Tensor* labels);
  void read_tokens(const std::vector<int64_t>& indices, at::Tensor* inputs, at::Tensor* labels);
};

}  // namespace trident::data
