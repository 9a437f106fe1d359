#pragma once
#include <mpi.h>

#include <vector>

#include "comm/communicator.hpp"

namespace trident::comm {

// MPI backend: contiguous tensors, MPI datatypes from the tensor dtype (fp32, fp64, integers;
// bf16 and fp16 travel as 16-bit words and are summed by MPI operators of their own).
//
// Tensors in host memory are handed to MPI as they are. Tensors on a GPU are staged: copied into
// a (pinned) host buffer, moved by MPI, and the result copied back into the tensor -- so several
// ranks sharing one GPU, which NCCL refuses, run dp, pp and ZeRO on CUDA tensors over MPI.
// `stage_through_host` stages host tensors as well (the staging path tested without a GPU).
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, bool stage_through_host = false);  // does not take ownership
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  MPI_Comm handle() const { return comm_; }

  void all_reduce_sum(at::Tensor& tensor) override;
  std::unique_ptr<Work> all_reduce_sum_async(at::Tensor& tensor) override;
  void reduce_scatter_sum(const at::Tensor& input, at::Tensor& output) override;
  void all_gather(const at::Tensor& input, at::Tensor& output) override;
  void reduce_scatter_sum_v(const at::Tensor& input, at::Tensor& output,
                            const std::vector<int64_t>& counts) override;
  void all_gather_v(const at::Tensor& input, at::Tensor& output, const std::vector<int64_t>& counts) override;
  std::unique_ptr<Work> all_gather_v_async(const at::Tensor& input, at::Tensor& output,
                                           const std::vector<int64_t>& counts) override;
  void broadcast(at::Tensor& tensor, int root) override;
  void send(const at::Tensor& tensor, int peer, int tag) override;
  std::unique_ptr<Work> send_async(const at::Tensor& tensor, int peer, int tag) override;
  void recv(at::Tensor& tensor, int peer, int tag) override;
  void barrier() override;
  void reduce_numbers(std::vector<double>& values, Reduce op) override;

 private:
  // The host tensor MPI works on for `t`: `t` itself, or a host copy (of its values when
  // `copy_in`) when `t` is on a device or staging is forced.
  at::Tensor host(const at::Tensor& t, bool copy_in) const;
  std::vector<int> place_own_piece(const at::Tensor& input, at::Tensor& output, const std::vector<int64_t>& counts,
                                   std::vector<int>& displacements);

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  bool stage_through_host_ = false;
};

// Whether every rank of `group` passed the same value (two small reductions).
bool same_on_every_rank(MpiCommunicator& group, uint64_t value);

// Makes contiguous host tensors equal on every rank of `group` to rank 0's: compares a hash of
// their bytes (same_on_every_rank) and broadcasts them only if any rank's differ. Returns
// whether it did. For what every rank should have computed alike (a model built from one seed):
// no traffic when they did.
bool make_identical(MpiCommunicator& group, std::vector<at::Tensor>& tensors);

}  // namespace trident::comm
