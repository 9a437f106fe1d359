#pragma once
// One split (/train or /test) of a dataset in HDF5, opened and checked, one of two kinds:
// classification
//   /<split>/inputs  N x ... (uint8 scaled to [0, 1], or float32 as stored)
//   /<split>/labels  N integers in [0, classes)
//   root attribute "classes"
// tokens (language modelling, read with a sequence length T)
//   /<split>/tokens  1-D integers in [0, vocab)
//   root attribute "vocab"
//   sample i is tokens [i T, i T + T + 1): inputs its first T tokens, labels its last T (the
//   next token at each position), both int64 [n, T]; (tokens - 1) / T samples.
// Opening checks the layout, the types and that every label is in [0, classes). What it knows
// of the split (its size, sample shape, classes or vocabulary) needs no LibTorch: `trident plan`
// reads it in `trident` itself; data::SplitReader (data/dataset.hpp) reads the samples.
#include <cstdint>
#include <string>
#include <vector>

#include "core/hdf5.hpp"

namespace trident::data {

class SplitFile {
 public:
  // Throws BadInput naming the file and the dataset when the file or split is unusable.
  // seq_len > 0 opens a token dataset (model.kind = gpt), 0 a classification one.
  SplitFile(const std::string& path, const std::string& split, int64_t seq_len = 0);

  int64_t size() const { return size_; }
  const std::vector<int64_t>& sample_shape() const { return sample_shape_; }
  int64_t classes() const { return classes_; }  // the vocabulary for tokens
  bool tokens() const { return seq_len_ > 0; }
  int64_t targets_per_sample() const { return tokens() ? seq_len_ : 1; }
  const std::string& path() const { return path_; }

  // Part `part` of `parts` of this split's checksummed blocks (prepare-data writes them; see
  // hdf5::find_damaged_rows) read and compared, as a message naming the dataset and its rows; ""
  // when they match or the file has no checksums.
  std::string find_damaged_rows(int part, int parts);

 protected:
  // H5Dread, or a fault naming the data file and the dataset (a damaged chunk, an I/O error).
  void read_or_fault(hid_t dataset, const char* name, hid_t mem_type, hid_t mem_space, hid_t file_space, void* out);
  // A fault naming the file when its size changed since it was opened (truncated or written
  // over in place: HDF5 reads zeros past a file's end and raises no error, and the run would
  // train on them); a warning, once, when only its modification time did (a `touch` against a
  // scratch purge, or content written over at the same size).
  void check_unchanged();

  std::string path_, split_;
  hdf5::Hid file_, inputs_, labels_, tokens_;
  int64_t size_ = 0, classes_ = 0, seq_len_ = 0;
  std::vector<int64_t> sample_shape_;
  bool inputs_are_bytes_ = false;

 private:
  void open_tokens();
  std::string damaged(const char* dataset, const std::string& problem) const;  // the message of find_damaged_rows
  long long read_count_attribute(const char* name);  // 'classes' or 'vocab', one integer in [2, 2^31)
  hdf5::Hid open_dataset(const char* name);          // /<split>/<name>, or bad input naming it
  int fd_ = -1;  // HDF5's descriptor of the open file (-1: a driver without one; not checked)
  int64_t opened_size_ = 0, opened_mtime_ns_ = 0;
};

}  // namespace trident::data
