#pragma once
// The pieces of a checkpoint file that its writer (checkpoint.cpp) and its readers (file.cpp,
// checkpoint.cpp's Reader) share: checksums, the metadata text, and checked reads of a tensor's
// blocks. Internal to lib/checkpoint; no LibTorch.
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/file.hpp"
#include "core/error.hpp"
#include "core/hdf5.hpp"

namespace trident::checkpoint::detail {

// The metadata attribute's checksum, as written and as verified.
long long text_crc(const std::string& text);
uint32_t crc_of(const void* bytes, size_t size);
std::string meta_text(const Meta& m);

// The file's dataset names: how many, and the CRC-32 of their sorted list. The metadata holds both,
// since the blocks' checksums cover each tensor's data but not the name it is found under.
struct DatasetManifest {
  size_t count = 0;
  long long crc = 0;
};
DatasetManifest dataset_manifest(hid_t file);

// Tensors are stored as float32 (4 bytes an element), the RNG states as bytes.
size_t stored_element_bytes(hid_t dataset);
// A tensor's checksummed blocks of elements, in order. The list must tile the tensor as its
// shape says: a damaged list (or shape) is refused before any range in it is allocated or read.
std::vector<hdf5::Crc32Block> checksum_blocks(hid_t dataset, const std::string& path, const std::string& name);
// Elements [lo, hi) of a tensor into `out` (hi - lo elements of `element_bytes`, the stored type's), each stored
// block they touch (of `blocks`) read once, whole, and checked against its CRC-32 before its part is used; a block
// `verified` holds (this rank checked it while verifying the same file) is not checked again, and only its part is
// read. Problems throw BadInput naming file and tensor. Returns how many blocks it checksummed.
int64_t read_checked_into(hid_t dataset, const std::string& path, const std::string& name,
                          const std::vector<hdf5::Crc32Block>& blocks, int64_t lo, int64_t hi, void* out,
                          size_t element_bytes, const VerifiedBlocks* verified = nullptr);

// An HDF5 call failing on a checkpoint that opened, its metadata intact, means damage where no
// checksum reaches (an object header, a link): bad input naming file and tensor, as a checksum
// mismatch is, not a fault of this rank. (A resume verifies the file first, but a link damaged to
// point elsewhere hides a tensor from that walk.)
template <class Read>
auto read_or_refuse(const std::string& path, const std::string& name, Read&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const Fault& e) {
    const std::string what = e.what();
    const size_t reason = what.find(" failed: ");  // past fail_hdf5's "rank 0 on host: file:line: call"
    fatal_all(fmt::format("checkpoint {}: tensor {} cannot be read ({}): the file is damaged", path, name,
                          innermost(reason == std::string::npos ? what : what.substr(reason + 9))));
  }
}


// The file opened, its metadata read into `meta` and checked (its checksum, format version, numbers, the deck's and
// the tensor names' checksums); BadInput naming the file otherwise. Takes hdf5::mutex(); the caller closes the
// file (destroys the handle) holding it too, as every HDF5 call must be (the prefetch thread's among them).
std::unique_ptr<hdf5::Hid> open_checked(const std::string& path, Meta& meta);

}  // namespace trident::checkpoint::detail
