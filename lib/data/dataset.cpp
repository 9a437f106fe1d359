#include "data/dataset.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <numeric>

#include "core/error.hpp"

namespace trident::data {

std::string SplitReader::find_bad_values(int64_t begin, int64_t end) {
  if (tokens()) {
    // The tokens samples [begin, end) cover, one contiguous read of up to 1 Mi tokens at a time
    // (not a window per sample).
    constexpr int64_t kTokens = 1 << 20;
    const int64_t last = end * seq_len_ + 1;  // one past the last target
    for (int64_t first = begin * seq_len_; first < last; first += kTokens) {
      const int64_t n = std::min(last, first + kTokens) - first;
      at::Tensor tokens = at::empty({n}, at::kLong);
      {
        std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
        hdf5::Hid file_space(HDF5_CHECK(H5Dget_space(tokens_)));
        const hsize_t start[1] = {static_cast<hsize_t>(first)}, count[1] = {static_cast<hsize_t>(n)};
        HDF5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, count, nullptr));
        hdf5::Hid mem_space(HDF5_CHECK(H5Screate_simple(1, count, nullptr)));
        read_or_fault(tokens_, "tokens", H5T_NATIVE_INT64, mem_space, file_space, tokens.data_ptr());
      }
      const at::Tensor where = tokens.lt(0).logical_or(tokens.ge(classes_)).nonzero();
      if (where.numel() > 0) {
        const int64_t at = where[0][0].item<int64_t>();
        return fmt::format("data.path {}: /{}/tokens: token {} at position {} is outside [0, {}) (attribute 'vocab')",
                           path_, split_, tokens[at].item<int64_t>(), first + at, classes_);
      }
    }
    return "";
  }
  if (inputs_are_bytes_) return "";
  constexpr int64_t kChunk = 1024;
  for (int64_t first = begin; first < end; first += kChunk) {
    at::Tensor inputs;
    read_range(first, std::min(end, first + kChunk), &inputs, nullptr);
    const at::Tensor bad_rows = inputs.isfinite().logical_not().flatten(1).any(1).nonzero();
    if (bad_rows.numel() > 0)
      return fmt::format("data.path {}: /{}/inputs sample {} holds NaN or Inf (data.check_finite)", path_, split_,
                         first + bad_rows[0][0].item<int64_t>());
  }
  return "";
}

at::Tensor SplitReader::read_windows(const std::vector<int64_t>& indices) {
  // Consecutive samples share one token (the last target of one is the first input of the
  // next), so each sample is its own hyperslab read of T + 1 tokens.
  const auto n = static_cast<int64_t>(indices.size());
  at::Tensor windows = at::empty({n, seq_len_ + 1}, at::kLong);
  {
    std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
    hdf5::Hid file_space(HDF5_CHECK(H5Dget_space(tokens_)));
    const hsize_t count[1] = {static_cast<hsize_t>(seq_len_ + 1)};
    hdf5::Hid mem_space(HDF5_CHECK(H5Screate_simple(1, count, nullptr)));
    for (int64_t i = 0; i < n; ++i) {
      const hsize_t start[1] = {static_cast<hsize_t>(indices[static_cast<size_t>(i)] * seq_len_)};
      HDF5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, count, nullptr));
      read_or_fault(tokens_, "tokens", H5T_NATIVE_INT64, mem_space, file_space, windows[i].data_ptr());
    }
  }
  return windows;
}

void SplitReader::read_tokens(const std::vector<int64_t>& indices, at::Tensor* inputs, at::Tensor* labels) {
  const at::Tensor windows = read_windows(indices);
  if (inputs) *inputs = windows.narrow(1, 0, seq_len_).contiguous();
  if (labels) *labels = windows.narrow(1, 1, seq_len_).contiguous();
}

void SplitReader::read(const std::vector<int64_t>& indices, at::Tensor* inputs, at::Tensor* labels) {
  read_unchecked(indices, inputs, labels);
  check_unchanged();  // after the read: a file cut short during it gave zeros, which go no further
}

void SplitReader::read_unchecked(const std::vector<int64_t>& indices, at::Tensor* inputs, at::Tensor* labels) {
  if (tokens()) return read_tokens(indices, inputs, labels);
  const auto n = static_cast<int64_t>(indices.size());
  // HDF5 fills memory in file order: read the sorted rows, then put them back in the order asked.
  std::vector<int64_t> order(indices.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return indices[a] < indices[b]; });

  std::vector<int64_t> in_shape{n};
  in_shape.insert(in_shape.end(), sample_shape_.begin(), sample_shape_.end());
  at::Tensor raw_inputs = inputs ? at::empty(in_shape, inputs_are_bytes_ ? at::kByte : at::kFloat) : at::Tensor();
  at::Tensor raw_labels = labels ? at::empty({n}, at::kLong) : at::Tensor();
  {
    std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
    for (auto [dataset, tensor] : {std::pair<hid_t, at::Tensor*>{inputs_, &raw_inputs}, {labels_, &raw_labels}}) {
      if (!tensor->defined()) continue;
      hdf5::Hid file_space(HDF5_CHECK(H5Dget_space(dataset)));
      const int rank = H5Sget_simple_extent_ndims(file_space);
      std::vector<hsize_t> dims(static_cast<size_t>(rank));
      H5Sget_simple_extent_dims(file_space, dims.data(), nullptr);
      std::vector<hsize_t> start(dims.size(), 0), count(dims);
      // One hyperslab per run of consecutive rows, OR-ed together.
      bool first = true;
      for (int64_t i = 0; i < n;) {
        int64_t j = i + 1;
        while (j < n && indices[order[j]] == indices[order[j - 1]] + 1) ++j;
        start[0] = static_cast<hsize_t>(indices[order[i]]);
        count[0] = static_cast<hsize_t>(j - i);
        HDF5_CHECK(H5Sselect_hyperslab(file_space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(), nullptr,
                                       count.data(), nullptr));
        first = false;
        i = j;
      }
      std::vector<hsize_t> mem_dims(dims);
      mem_dims[0] = static_cast<hsize_t>(n);
      hdf5::Hid mem_space(HDF5_CHECK(H5Screate_simple(rank, mem_dims.data(), nullptr)));
      const hid_t mem_type = tensor == &raw_labels ? H5T_NATIVE_INT64
                             : inputs_are_bytes_   ? H5T_NATIVE_UINT8
                                                   : H5T_NATIVE_FLOAT;
      read_or_fault(dataset, tensor == &raw_labels ? "labels" : "inputs", mem_type, mem_space, file_space,
                    tensor->data_ptr());
    }
  }
  // Row k of the sorted read is indices[order[k]]: scatter back to the requested order.
  at::Tensor position = at::from_blob(order.data(), {n}, at::kLong).clone();
  if (inputs) {
    at::Tensor sorted_inputs = inputs_are_bytes_ ? raw_inputs.to(at::kFloat).div_(255.0) : raw_inputs;
    *inputs = at::empty_like(sorted_inputs).index_copy_(0, position, sorted_inputs);
  }
  if (labels) *labels = at::empty_like(raw_labels).index_copy_(0, position, raw_labels);
}

void SplitReader::read_range(int64_t begin, int64_t end, at::Tensor* inputs, at::Tensor* labels) {
  std::vector<int64_t> indices(static_cast<size_t>(end - begin));
  std::iota(indices.begin(), indices.end(), begin);
  read(indices, inputs, labels);
}

}  // namespace trident::data
