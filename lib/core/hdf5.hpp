#pragma once
// Small RAII layer over the HDF5 C API, shared by the dataset, its converters, checkpoints and inspect.
#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace trident::hdf5 {

// Debian's parallel HDF5 is not built thread-safe: every HDF5 call in trident holds this lock
// (the prefetch thread reads while the main thread may inspect or save).
std::recursive_mutex& mutex();

// Turns off HDF5's own error printing; trident reports errors itself (HDF5_CHECK).
void quiet();

// HDF5's own file locks (flock, since 1.10) off, unless the user set HDF5_USE_FILE_LOCKING: they
// guard single-writer/multi-reader access, and each file trident writes is written by one
// process under the run folder's lock (a checkpoint's other ranks pwrite their pieces) and
// published by rename, so they add nothing here. Where a file system has no lock manager (NFSv3
// without lockd) they fail every create and open ("unable to lock file, errno = 37") even though
// the run folder's own lock just warns. Called at the start of main, before any other thread.
void without_its_file_locks();

// Owns one hid_t and closes it with the matching H5?close.
class Hid {
 public:
  Hid() = default;
  explicit Hid(hid_t id) : id_(id) {}
  ~Hid() { reset(); }
  Hid(Hid&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  operator hid_t() const { return id_; }  // NOLINT: handles pass straight to the C API
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Property lists.
Hid creation_without_fill();  // datasets allocated at creation, never filled with a fill value, no times
Hid groups_without_times();   // group creation without creation/modification times

bool is_hdf5_file(const std::string& path);
bool link_exists(hid_t loc, const std::string& path);  // every component of a/b/c
std::vector<hsize_t> dataset_shape(hid_t dataset);
// Every group and dataset: "/" (the root), then "/train", "/train/inputs", ... in name order; false
// when HDF5 cannot walk the file (a damaged object header; its error stack says why).
struct Object {
  std::string path;
  bool is_group;
};
bool list_objects(hid_t file, std::vector<Object>& objects);
std::vector<std::string> dataset_names(hid_t file);  // the datasets' paths of list_objects (a Fault if it fails)

// A string attribute on an object (created or replaced).
void write_string_attribute(hid_t object, const std::string& name, const std::string& value);
std::string read_string_attribute(hid_t object, const std::string& name);  // "" if absent or not one string
// One integer attribute into `value`; false when absent, not an integer, or not exactly one value.
bool read_int_attribute(hid_t object, const std::string& name, long long& value);
void write_int_attribute(hid_t object, const std::string& name, long long value);

// Text describing an HDF5 type: uint8, int64, float32, ...
std::string type_name(hid_t type);

// ---- CRC-32 checksums of a dataset's rows ----------------------------------------------------
// The attribute "crc32_blocks" on a dataset lists (begin, end, crc) for blocks of rows (slices
// along the first axis), each crc the CRC-32 of those rows' bytes as the file stores them. The
// blocks tile [0, rows). Checkpoint tensors (one block per writer's piece) and the datasets
// prepare-data writes (blocks of about 1 MiB) carry it, so a flipped byte is found, not trained on.

// The flat (begin, end, crc) list; false (and `blocks` untouched) when the attribute is absent or
// cannot be read as integers.
bool read_crc32_blocks(hid_t dataset, std::vector<int64_t>& blocks);
// The blocks of a flat (begin, end, crc) list in order of `begin`, into `sorted`; "" when they
// tile [0, count) exactly, else what is wrong with the list ("its crc32_blocks attribute does not
// tile rows [0, 60000) ...", `unit` naming what is counted: rows, elements). Writers may list the
// blocks in any order (a checkpoint's come writer by writer); a damaged list must not be read.
struct Crc32Block {
  int64_t begin, end, crc;
};
std::string tile_crc32_blocks(const std::vector<int64_t>& flat, int64_t count, const char* unit,
                              std::vector<Crc32Block>& sorted);
// Creates the attribute from a flat (begin, end, crc) list; false on failure (HDF5's error stack
// says why). An empty list is stored as one padding value.
bool write_crc32_blocks(hid_t dataset, const std::vector<int64_t>& blocks);
// Checksums the dataset as stored, in blocks of about 1 MiB of whole rows (at most 2048 blocks,
// so the attribute stays under HDF5's 64 KiB limit), and writes the attribute.
void checksum_rows(hid_t dataset);
// Part `part` of `parts` of the dataset's blocks, each read as stored and compared with its
// checksum: "" when they match or the dataset has no checksums, else what is wrong ("rows [a, b)
// differ from their CRC-32 ...: the file is damaged", or a list that does not tile the rows).
std::string find_damaged_rows(hid_t dataset, int part = 0, int parts = 1);
// For a dataset without checksums: the part's rows read once (a damaged compressed chunk fails to
// decompress); "" when they all could be, else the message.
std::string find_unreadable_rows(hid_t dataset, int part = 0, int parts = 1);

}  // namespace trident::hdf5
