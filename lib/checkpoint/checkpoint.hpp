#pragma once
// Distributed checkpoints (README.md "Checkpoints and restarts"): one HDF5 file per save,
// independent of the layout that wrote it. Every tensor is stored under its model name with
// its full shape (/params/<name>, /optim/<state>/<name>, /buffers/<name>); rank 0 lays the file
// out and every rank writes, at the places it was given, the elements it owns under the current
// dp/pp/ZeRO layout (save() in checkpoint.cpp says why not through MPI-IO); each written block
// carries a CRC-32 so any reader can verify what it reads. Tensors are written from host memory
// (a GPU rank stages its shard there first) and read into host memory. Written to a temporary name and
// committed by rename, then `latest` is updated, then old ones are pruned.
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/file.hpp"
#include "parallel/plan.hpp"

namespace trident::hdf5 { class Hid; }

namespace trident::checkpoint {

// One tensor of the whole model (every stage) and its place in its stage's flat buffer, as
// the run's layout plan places it (parallel/plan.hpp): what is written and read by.
using TensorEntry = parallel::PlacedTensor;

// What one rank writes: elements [begin, end) of its stage's flat parameter buffer and of each
// optimizer state buffer, and (one rank per stage) the stage's buffers (batch-norm statistics).
struct Shard {
  int stage = 0;
  int64_t begin = 0, end = 0;
  at::Tensor params;
  std::vector<std::pair<std::string, at::Tensor>> states;
  std::vector<std::pair<std::string, at::Tensor>> buffers;  // empty on ranks that do not write them
  at::Tensor rng_state;       // this rank's CPU generator state (uint8); every rank passes one or none
  at::Tensor cuda_rng_state;  // its CUDA generator's (uint8), on ranks that train on a GPU
};

// What pruning keeps after a commit: the newest keep_last step files up to the committed step,
// not counting `not_this_runs`, which are left as they are: the files of later steps than the
// one a run started from that were in the folder when it started (a resume passed over them as
// damaged, or --resume PATH / never started earlier) and stayed there (set_aside_later_steps
// moves them out where the run holds the folder's lock). A save of the same step replaces such a
// file, which is the run's from then on (the caller drops it from the list).
struct Retention {
  int keep_last = 1;
  std::vector<std::string> not_this_runs;  // step_*.h5 names in the checkpoint folder
};
// The step_*.h5 names in `dir` of steps after `step`, oldest first (none when `dir` is absent).
std::vector<std::string> step_files_after(const std::string& dir, int64_t step);

// A run that does not continue its folder's newest checkpoint (--resume never, --resume PATH of
// an earlier step or of another folder, a resume past damaged files): the step files there are
// another run's (all but the one it resumes from; only later steps' when it resumes from the
// file `latest` names). Left there, a requeue of this run before its first save (--resume auto)
// would resume from them, and each fresh start would add to them. They go into `dir`/previous,
// with `latest` when it names one; that folder's earlier set is removed once every file has moved
// (one start back is kept; files a user put there stay). A file of previous/ the run resumes from
// (`keep`) comes back into `dir`. What is in the way is renamed NAME.<UTC time> and left: a
// `previous` that is not a folder, a previous.new an interrupted start left, a previous.old (a set
// two starts back) holding other files than trident's or not a folder. Nothing is removed before
// every file has moved. `failure`: a rename failed before that; what moved and what was renamed
// are put back.
// Rank 0, holding the folder's lock.
struct SetAside {
  std::vector<std::string> moved;     // names now in `dir`/previous
  std::vector<std::string> replaced;  // names of the earlier set, removed
  std::string brought_back;           // `keep`'s name, moved from previous/ into `dir`
  std::vector<std::string> kept_aside;  // what was in the way, renamed NAME.<UTC time> (in `dir`)
  std::string note;                     // every file moved, but the swap into previous/ failed: why
  std::string failure;                // why not all moved ("" when all did); nothing removed then
};
SetAside set_aside_other_runs(const std::string& dir, int64_t step, const std::string& keep);
// The saves an earlier run of the folder left unfinished (step_*.h5.tmp, latest.tmp: it was killed
// while writing them; nothing reads them; and a start-up probe, .trident-seen.*), "name (size)" each, but `keep` (a file this run resumes
// from: --resume naming a .tmp). Without the folder's lock they may be another live run's: only
// listed then.
std::vector<std::string> unfinished_saves(const std::string& dir, const std::string& keep = "");
// The same, removed (those that could be); only for the run that holds the folder's lock, before
// its first save.
std::vector<std::string> remove_unfinished_saves(const std::string& dir, const std::string& keep = "");

// Collective over `comm`. `params` and `buffers` list the whole model (every rank passes the
// same lists and the same state names). Returns the committed file's path.
std::string save(const std::string& dir, const Meta& meta, const std::vector<TensorEntry>& params,
                 const std::vector<std::string>& state_names, const std::vector<TensorEntry>& buffers,
                 const Shard& shard, MPI_Comm comm, const Retention& retention);

// checkpoint.async: a save that blocks training only while the file is laid out (rank 0, a few
// milliseconds) and, at a later step boundary, committed; a thread of this rank copies the shard's
// parameters and optimizer state into `snapshot` and writes them in between (save()'s three parts,
// see checkpoint.cpp: the thread makes no HDF5 and no MPI call). The file is the one save() writes.
class BackgroundSave {
 public:
  // Collective over `comm`, with save()'s arguments; `live` is the shard as training holds it.
  // Buffers and RNG states (small) are copied here; parameters and optimizer states are copied
  // by the thread into `snapshot`, host tensors the caller keeps from save to save (allocated here
  // when their sizes change; a GPU shard is copied here, at once). Until snapshot_taken(), live's
  // parameters and states must not change: the caller waits for it before its next update.
  BackgroundSave(const std::string& dir, const Meta& meta, const std::vector<TensorEntry>& params,
                 const std::vector<std::string>& state_names, const std::vector<TensorEntry>& buffers,
                 const Shard& live, Shard& snapshot, MPI_Comm comm, const Retention& retention);
  // Joins the thread, whose write stops at its next piece: the save was not committed (an error
  // ends the run). Its file stays as step_N.h5.tmp (the next run of the folder removes it).
  ~BackgroundSave();
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;

  int64_t step() const;
  void wait_for_snapshot();  // until the copies are taken (at once when they already are)
  bool written() const;      // this rank's thread has finished (written or failed); no wait
  double wait();             // joins the thread; the seconds waited
  double write_seconds() const;  // the thread's copy and write time (after wait())
  // Collective, after wait() on every rank: commits the file and returns its path, or removes it
  // and throws AgreedFault on every rank when any rank's write failed (as save() does).
  std::string commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads a checkpoint; every read block is checked against its CRC-32, except the blocks of
// `verified` (optional: what this rank checked while verifying the same file, still unchanged;
// read without a second checksum). Problems throw BadInput naming the file and the tensor.
class Reader {
 public:
  explicit Reader(const std::string& path, const VerifiedBlocks* verified = nullptr);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const Meta& meta() const { return meta_; }
  const std::string& path() const { return path_; }
  // Fails unless every tensor of `entries` is stored under `group` with the same shape.
  void check_shapes(const std::string& group, const std::vector<TensorEntry>& entries) const;
  // Elements [begin, end) of a stage's flat buffer, assembled from the tensors of `entries`.
  at::Tensor read_flat(const std::string& group, const std::vector<TensorEntry>& entries, int64_t begin,
                       int64_t end) const;
  // The same into `out` (end - begin elements, viewable as 1-D): straight into it when it is 1-D,
  // fp32, contiguous and in host memory; otherwise (a GPU's) through one host buffer of at most
  // `chunk_elements`, so that restoring a state to a device never holds a whole tensor of it on
  // the host.
  void read_flat_into(const std::string& group, const std::vector<TensorEntry>& entries, int64_t begin, int64_t end,
                      const at::Tensor& out, int64_t chunk_elements = int64_t{1} << 24) const;
  at::Tensor read_tensor(const std::string& dataset) const;
  // The state of generator `kind` ("cpu" or "cuda") rank `rank` saved (uint8), or an undefined
  // tensor when the file has none for that rank (an older file, fewer ranks wrote it, or it was
  // written on CPUs and "cuda" is asked for).
  at::Tensor read_rng_state(int rank, const std::string& kind = "cpu") const;
  // Blocks checksummed so far (the ones `verified` held are not).
  int64_t blocks_checksummed() const { return checksummed_; }

 private:
  std::string path_;
  const VerifiedBlocks* verified_ = nullptr;  // null unless the file is the one verified
  mutable int64_t checksummed_ = 0;
  std::unique_ptr<hdf5::Hid> file_;  // core/hdf5.hpp, kept out of this header
  Meta meta_;
};


// --resume: "never" -> ""; "auto" -> `latest` in `dir` if it verifies, else the newest
// step_*.h5 there that does, else "" (fresh start) when there is none (bad input when there are
// some and none verifies); a checkpoint file -> that file (must
// verify); a folder (a checkpoints folder, or a run folder holding one) -> as auto there, but a
// checkpoint must be found; a `latest` file -> the file it names. `note` says which.
// Collective: the ranks verify each candidate together; `verified` (optional) is given the
// blocks of the returned file that this rank checked, for its Reader.
std::string resolve_resume(const std::string& dir, const std::string& mode, std::string& note, MPI_Comm comm,
                           VerifiedBlocks* verified = nullptr);

}  // namespace trident::checkpoint
