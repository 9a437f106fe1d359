#pragma once
// Converters that write trident datasets (layout in data/dataset.hpp).
#include <cstdint>
#include <string>

namespace trident::data {

// The IDX files of Debian's dataset-fashion-mnist (gzip) -> HDF5. Written to a temporary file beside OUT, then renamed.
void prepare_fashion_mnist(const std::string& source_dir, const std::string& out);

// A learnable synthetic classification set: `classes` random prototypes of shape
// channels x height x width plus Gaussian noise, float32.
struct SyntheticSpec {
  int64_t train = 4096, test = 1024, classes = 10, channels = 1, height = 28, width = 28;
  double noise = 1.0;
  uint64_t seed = 7;
};
void prepare_synthetic(const SyntheticSpec& spec, const std::string& out);

// Byte-level tokens (vocab 256) of a real text corpus: every regular file under `source` (a file
// or a directory, in name order; files with NUL bytes, e.g. fortune's .dat indexes, and symbolic
// links are skipped). The last `test_fraction` of each file goes to /test, the rest to /train.
void prepare_text(const std::string& source, double test_fraction, const std::string& out);

// Uniformly random tokens in [0, vocab): a throughput workload of any size (nothing to learn:
// the loss stays near ln(vocab)).
struct SyntheticTokensSpec {
  int64_t train_tokens = 1 << 20, test_tokens = 1 << 16, vocab = 50304;
  uint64_t seed = 7;
};
void prepare_synthetic_tokens(const SyntheticTokensSpec& spec, const std::string& out);

}  // namespace trident::data
