#pragma once
// A checkpoint file as read without LibTorch: its metadata, and every block of every tensor
// checked against its CRC-32. What `trident inspect` needs, which `trident` runs itself, without
// loading LibTorch (app/main.cpp); checkpoint.hpp reads the tensors into training.
#include <mpi.h>

#include <cstdint>
#include <set>
#include <string>
#include <tuple>

namespace trident::checkpoint {

constexpr int kFormatVersion = 1;

struct Meta {
  int64_t step = 0, epoch = 0, cursor = 0, optimizer_steps = 0, global_batch = 0;
  int world = 1, dp = 1, pp = 1, zero = 0;
  std::string deck, trident_version, torch_version;
  // fp16's dynamic loss scale (0: the run did not scale), good steps since it last changed,
  // steps skipped so far. Files without these lines (older writers) read as 0.
  double loss_scale = 0;
  int64_t loss_scale_good_steps = 0, skipped_steps = 0;
  // The training loss of the epoch of the last step trained so far: the sum of its steps'
  // losses (each the mean over the global batch) and their count, so that a run resumed inside
  // an epoch reports the epoch's train loss as an uninterrupted run does. Files without these
  // lines (older writers) read as 0: the resumed run's steps alone.
  double epoch_loss_sum = 0;
  int64_t epoch_loss_steps = 0;
};

// The blocks of one checkpoint file that this rank checked against their CRC-32 while verifying
// it, so that its reader (a resume's load, right after) does not checksum them again: at np 1 a
// resume checked every block twice. Tied to the file as it was then (device, inode, size,
// modification and status-change times): a reader of a file replaced or rewritten since checks
// every block.
class VerifiedBlocks {
 public:
  void start(const std::string& path);  // forgets the blocks held; `path` is the file now verified
  void add(const std::string& dataset, int64_t begin, int64_t end) { blocks_.emplace(dataset, begin, end); }
  void forget() { *this = VerifiedBlocks(); }
  bool same_file(const std::string& path) const;  // `path` is still the file that was verified
  bool covers(const std::string& dataset, int64_t begin, int64_t end) const {
    return blocks_.count({dataset, begin, end}) > 0;
  }
  size_t size() const { return blocks_.size(); }

 private:
  std::string identity_;  // "" when no file was verified
  std::set<std::tuple<std::string, int64_t, int64_t>> blocks_;
};

// Every block of every tensor re-read and checked; "" when the file is sound, else why not.
// With parts > 1, only the blocks dealt to `part` (blocks are dealt out in turn). `verified`
// (optional) is given the blocks checked, or emptied when the file is not sound.
std::string verify(const std::string& path, int part = 0, int parts = 1, VerifiedBlocks* verified = nullptr);
// verify() shared out over the ranks of `comm`, each reading 1/size of the blocks; every rank
// gets the verdict, and in `verified` (optional) the blocks it checked itself. Collective.
std::string verify_collective(const std::string& path, MPI_Comm comm, VerifiedBlocks* verified = nullptr);
// A listing for `trident inspect`: metadata, each tensor with shape and dtype, and the verdict
// of verify(), which is also returned in `problem` ("" when sound), so the file is read once.
std::string describe(const std::string& path, std::string& problem);
bool is_checkpoint(const std::string& path);

}  // namespace trident::checkpoint
