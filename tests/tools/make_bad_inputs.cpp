// Makes the damaged inputs the bad-input tests feed to trident (tests/cli):
//   trident_make_bad_inputs datasets DIR        small HDF5 datasets, each wrong in one way (and
//                                               good ones to pair with a wrong deck)
//   trident_make_bad_inputs flip-byte FILE DATASET BYTE
//                                               inverts one byte of a dataset's data in place
//   trident_make_bad_inputs format-version CKPT N
//                                               rewrites a checkpoint's format version (with a
//                                               matching metadata checksum, so only the version
//                                               is wrong)
// HDF5 C API only: no LibTorch in this tool.
#include <hdf5.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/hdf5.hpp"
#include "flip_byte.hpp"

namespace {

using trident::hdf5::Hid;

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "make_bad_inputs: %s\n", message.c_str());
  std::exit(1);
}

void check(bool ok, const std::string& what) {
  if (!ok) die(what + " failed");
}

void write(hid_t file, const std::string& name, const std::vector<hsize_t>& dims, hid_t type, const void* data) {
  Hid space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  Hid dataset(H5Dcreate2(file, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  check(dataset.valid(), "H5Dcreate2 " + name);
  check(H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, "H5Dwrite " + name);
}

// One dataset of `n` samples of 1 x side x side floats (4x4 unless said), 4 classes, then `damage` applied.
struct Spec {
  std::string name;
  int64_t n = 256;
  bool labels = true, flat_inputs = false, int_inputs = false;
  int64_t bad_label_at = -1, nan_at = -1;
  hsize_t side = 4;
};

void make_dataset(const std::string& dir, const Spec& spec) {
  const std::string path = dir + "/" + spec.name + ".h5";
  Hid file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  check(file.valid(), "H5Fcreate " + path);
  trident::hdf5::write_int_attribute(file, "classes", 4);
  for (const char* split : {"train", "test"}) {
    Hid group(H5Gcreate2(file, split, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    const auto n = static_cast<hsize_t>(spec.n);
    const hsize_t pixels = spec.side * spec.side;
    std::vector<float> inputs(n * pixels);
    std::vector<int64_t> labels(n);
    for (hsize_t i = 0; i < n; ++i) {
      labels[i] = static_cast<int64_t>(i % 4);
      for (hsize_t j = 0; j < pixels; ++j)
        inputs[i * pixels + j] = static_cast<float>(labels[i]) + 0.01f * static_cast<float>(j);
    }
    if (spec.bad_label_at >= 0) labels[static_cast<size_t>(spec.bad_label_at)] = 7;
    if (spec.nan_at >= 0) inputs[static_cast<size_t>(spec.nan_at) * pixels + 3] = std::nanf("");
    const std::string g = std::string("/") + split;
    if (spec.flat_inputs) {
      write(file, g + "/inputs", {n}, H5T_NATIVE_FLOAT, inputs.data());
    } else if (spec.int_inputs) {
      std::vector<int32_t> ints(inputs.begin(), inputs.end());
      write(file, g + "/inputs", {n, 1, spec.side, spec.side}, H5T_NATIVE_INT32, ints.data());
    } else {
      write(file, g + "/inputs", {n, 1, spec.side, spec.side}, H5T_NATIVE_FLOAT, inputs.data());
    }
    if (spec.labels) write(file, g + "/labels", {n}, H5T_NATIVE_INT64, labels.data());
  }
}

// Datasets a writer of one's own (h5py) can make, that trident must refuse naming the problem:
// 'classes' as an array (read into one integer it overran the stack), a test split without
// samples (its loss was NaN), samples with a dimension of size 0, a group where a dataset belongs.
void make_writer_mistakes(const std::string& dir) {
  const auto open = [&](const char* name) {
    Hid file(H5Fopen((dir + "/" + name + ".h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    check(file.valid(), std::string("H5Fopen ") + name);
    return file;
  };
  make_dataset(dir, {"classes_array"});
  {
    Hid file = open("classes_array");
    check(H5Adelete(file, "classes") >= 0, "H5Adelete classes");
    const std::vector<int64_t> many(8000, 4);
    const hsize_t n = many.size();
    Hid space(H5Screate_simple(1, &n, nullptr));
    Hid attr(H5Acreate2(file, "classes", H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT));
    check(attr.valid() && H5Awrite(attr, H5T_NATIVE_INT64, many.data()) >= 0, "classes as an array");
  }
  make_dataset(dir, {"empty_test"});
  {
    Hid file = open("empty_test");
    check(H5Ldelete(file, "/test/inputs", H5P_DEFAULT) >= 0 && H5Ldelete(file, "/test/labels", H5P_DEFAULT) >= 0,
          "H5Ldelete /test");
    write(file, "/test/inputs", {0, 1, 4, 4}, H5T_NATIVE_FLOAT, nullptr);
    write(file, "/test/labels", {0}, H5T_NATIVE_INT64, nullptr);
  }
  make_dataset(dir, {"zero_width"});
  {
    Hid file = open("zero_width");
    check(H5Ldelete(file, "/train/inputs", H5P_DEFAULT) >= 0, "H5Ldelete /train/inputs");
    write(file, "/train/inputs", {256, 1, 4, 0}, H5T_NATIVE_FLOAT, nullptr);
  }
  make_dataset(dir, {"inputs_group"});
  {
    Hid file = open("inputs_group");
    check(H5Ldelete(file, "/train/inputs", H5P_DEFAULT) >= 0, "H5Ldelete /train/inputs");
    Hid group(H5Gcreate2(file, "/train/inputs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    check(group.valid(), "H5Gcreate2 /train/inputs");
  }
}

// A good dataset whose /train/labels another tool wrote compressed (gzip chunks, no checksums),
// then 32 bytes of its first chunk overwritten: the chunk no longer decompresses.
void make_damaged_chunk(const std::string& dir) {
  make_dataset(dir, {"damaged_chunk"});
  const std::string path = dir + "/damaged_chunk.h5";
  haddr_t address = 0;
  hsize_t chunk_bytes = 0;
  {
    Hid file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    check(file.valid() && H5Ldelete(file, "/train/labels", H5P_DEFAULT) >= 0, "H5Ldelete /train/labels");
    std::vector<int64_t> labels(256);
    uint32_t state = 12345;  // labels that do not compress to almost nothing
    for (auto& label : labels) label = static_cast<int64_t>(((state = state * 1664525u + 1013904223u) >> 16) % 4);
    const hsize_t n = labels.size();
    Hid space(H5Screate_simple(1, &n, nullptr));
    Hid properties(H5Pcreate(H5P_DATASET_CREATE));
    check(H5Pset_chunk(properties, 1, &n) >= 0 && H5Pset_deflate(properties, 6) >= 0, "gzip chunks");
    Hid dataset(H5Dcreate2(file, "/train/labels", H5T_NATIVE_INT64, space, H5P_DEFAULT, properties, H5P_DEFAULT));
    check(dataset.valid() && H5Dwrite(dataset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()) >= 0,
          "write compressed /train/labels");
    check(H5Fflush(file, H5F_SCOPE_GLOBAL) >= 0, "H5Fflush");
    const hsize_t origin = 0;
    unsigned filter_mask = 0;
    check(H5Dget_chunk_info_by_coord(dataset, &origin, &filter_mask, &address, &chunk_bytes) >= 0, "chunk address");
  }
  check(chunk_bytes > 40, "a chunk of more than 40 bytes");
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  check(f != nullptr, "fopen " + path);
  const std::vector<unsigned char> junk(32, 0x5a);
  check(std::fseek(f, static_cast<long>(address + 8), SEEK_SET) == 0 && std::fwrite(junk.data(), 1, 32, f) == 32,
        "overwrite the chunk");
  check(std::fclose(f) == 0, "fclose " + path);
}

// A token dataset: `n` tokens i % 50 per split, attribute vocab = 50; `bad_at` >= 0 puts
// token 300 at that position of /train/tokens.
void make_tokens(const std::string& dir, const std::string& name, hsize_t n, int64_t bad_at) {
  const std::string path = dir + "/" + name + ".h5";
  Hid file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  check(file.valid(), "H5Fcreate " + path);
  trident::hdf5::write_int_attribute(file, "vocab", 50);
  for (const char* split : {"train", "test"}) {
    Hid group(H5Gcreate2(file, split, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    std::vector<uint16_t> tokens(n);
    for (hsize_t i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>(i % 50);
    if (bad_at >= 0 && std::string(split) == "train") tokens[static_cast<size_t>(bad_at)] = 300;
    write(file, std::string("/") + split + "/tokens", {n}, H5T_NATIVE_UINT16, tokens.data());
  }
}

// A uint8 image dataset (256 samples of 1 x 28 x 28, 4 classes) with the crc32_blocks attribute
// prepare-data writes, computed here with zlib over blocks of 64 rows; then byte 5 of row 200 of
// /train/inputs changes, so that rows [192, 256) no longer match (a block in the second half: at
// np 2, rank 1's share).
void make_damaged_bytes(const std::string& dir) {
  const std::string path = dir + "/damaged_bytes.h5";
  Hid file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  check(file.valid(), "H5Fcreate " + path);
  trident::hdf5::write_int_attribute(file, "classes", 4);
  constexpr hsize_t n = 256, row = 28 * 28, block = 64;
  for (const char* split : {"train", "test"}) {
    Hid group(H5Gcreate2(file, split, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    std::vector<uint8_t> pixels(n * row);
    std::vector<int64_t> labels(n);
    for (hsize_t i = 0; i < n; ++i) {
      labels[i] = static_cast<int64_t>(i % 4);
      for (hsize_t j = 0; j < row; ++j) pixels[i * row + j] = static_cast<uint8_t>((i * 31 + j) % 251);
    }
    auto blocks_of = [&](const void* data, hsize_t row_bytes) {
      std::vector<int64_t> blocks;
      for (hsize_t b = 0; b < n; b += block)
        blocks.insert(blocks.end(), {static_cast<int64_t>(b), static_cast<int64_t>(b + block),
                                     static_cast<int64_t>(crc32(0L, static_cast<const Bytef*>(data) + b * row_bytes,
                                                                static_cast<uInt>(block * row_bytes)))});
      return blocks;
    };
    const std::vector<int64_t> pixel_blocks = blocks_of(pixels.data(), row);
    const std::vector<int64_t> label_blocks = blocks_of(labels.data(), sizeof(int64_t));
    if (std::string(split) == "train") pixels[200 * row + 5] ^= 0x40;
    const std::string g = std::string("/") + split;
    write(file, g + "/inputs", {n, 1, 28, 28}, H5T_NATIVE_UINT8, pixels.data());
    write(file, g + "/labels", {n}, H5T_NATIVE_INT64, labels.data());
    for (const auto& [name, blocks] : {std::pair{g + "/inputs", pixel_blocks}, std::pair{g + "/labels", label_blocks}}) {
      Hid dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
      check(trident::hdf5::write_crc32_blocks(dataset, blocks), "crc32_blocks of " + name);
    }
  }
}

// A line of a checkpoint's metadata rewritten, its checksum kept valid: what only the reader's
// own checks of the line can catch.
void set_meta_line(const std::string& path, const std::string& key, const std::string& value) {
  Hid file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
  check(file.valid(), "H5Fopen " + path);
  std::string meta = trident::hdf5::read_string_attribute(file, "meta");
  const std::string line = key + "=";
  const auto at = meta.find(line);
  if (at == std::string::npos || (at > 0 && meta[at - 1] != '\n')) die(path + ": no " + key + " in its metadata");
  meta.replace(at + line.size(), meta.find('\n', at) - at - line.size(), value);
  trident::hdf5::write_string_attribute(file, "meta", meta);
  trident::hdf5::write_int_attribute(
      file, "meta_crc32",
      static_cast<long long>(crc32(0L, reinterpret_cast<const Bytef*>(meta.data()), static_cast<uInt>(meta.size()))));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "datasets" && argc == 3) {
    const std::string dir = argv[2];
    make_dataset(dir, {"good"});
    make_dataset(dir, {"missing_labels", 256, false});
    make_dataset(dir, {"flat_inputs", 256, true, true});
    make_dataset(dir, {"int_inputs", 256, true, false, true});
    make_dataset(dir, {"label_out_of_range", 256, true, false, false, 100});
    make_dataset(dir, {"too_few_samples", 24});
    make_dataset(dir, {"nan_input", 256, true, false, false, -1, 77});
    make_dataset(dir, {"small_images", 256, true, false, false, -1, -1, 3});
    make_tokens(dir, "tokens", 8192, -1);
    make_tokens(dir, "token_out_of_range", 8192, 1234);
    make_damaged_bytes(dir);
    make_writer_mistakes(dir);
    make_damaged_chunk(dir);
    return 0;
  }
  if (mode == "flip-byte" && argc == 5) {
    const std::string error = trident::test::flip_byte(argv[2], argv[3], std::atoll(argv[4]));
    if (!error.empty()) die(error);
    return 0;
  }
  if (mode == "meta-line" && argc == 5) {
    set_meta_line(argv[2], argv[3], argv[4]);
    return 0;
  }
  std::fprintf(stderr, "usage: %s datasets DIR | meta-line CHECKPOINT KEY VALUE | flip-byte FILE DATASET BYTE\n", argv[0]);
  return 2;
}
