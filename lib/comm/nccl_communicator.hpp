#pragma once
// NCCL backend of Communicator: contiguous CUDA tensors on this process's device. Built only
// when CMake finds CUDA LibTorch and NCCL (TRIDENT_CUDA); the rest of trident reaches it through
// comm/backend.hpp, so no other file needs to know whether it exists.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include "comm/communicator.hpp"
#include "comm/progress.hpp"

namespace trident::comm {

// One NcclCommunicator per process group (world, a dp group, a pp group), each with its own
// NCCL communicator and CUDA stream.
//
// Streams: every operation runs on the communicator's own stream, ordered against LibTorch's
// current stream on the device (the "compute stream") by CUDA events in both directions: the
// communicator's stream first waits for what the compute stream had queued (the tensor's
// producers), and the compute stream waits for the collective before anything queued later.
//
// Completion: the blocking calls (all_reduce_sum, broadcast, ...) return once the operation is
// done on the GPU; the host waits by polling, not in a CUDA call it cannot leave, so it also
// watches NCCL's asynchronous errors and a timeout measured from the moment the operation started
// on the GPU (run.fail_timeout_s; 20 x that where the watchdog judges the peers, which may be
// reading files through a file system's stall meanwhile: connect.cpp). On an error or the timeout the NCCL communicator is aborted
// (so no kernel stays spinning on this GPU) and fatal_one names rank, host and the operation.
// The *_async calls return at once; the caching allocator is told the tensor is in use on the
// communicator's stream, so freeing it early is safe.
//
// send/recv: NCCL has no tags; messages between two ranks match in the order they are posted.
// A send is complete only once its peer receives it (beyond NCCL's internal buffers), and all
// operations of one communicator run in order: two ranks that each send_async to the other and
// then recv may deadlock for large messages. Pipelines need a grouped send+recv for that.
class NcclCommunicator final : public Communicator {
 public:
  // Collective over `comm` (not owned): rank 0 creates the ncclUniqueId and broadcasts it over
  // MPI, then every rank joins on its current CUDA device (set it first: comm/device_placement).
  // fail_timeout_s <= 0: no timeout (errors are still detected).
  NcclCommunicator(MPI_Comm comm, double fail_timeout_s);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // The NCCL library in use ("2.28.9"), for report.json.
  static std::string library_version();

  void all_reduce_sum(at::Tensor& tensor) override;
  // The Work must not outlive this communicator.
  std::unique_ptr<Work> all_reduce_sum_async(at::Tensor& tensor) override;
  void reduce_scatter_sum(const at::Tensor& input, at::Tensor& output) override;
  void all_gather(const at::Tensor& input, at::Tensor& output) override;
  void reduce_scatter_sum_v(const at::Tensor& input, at::Tensor& output,
                            const std::vector<int64_t>& counts) override;
  void all_gather_v(const at::Tensor& input, at::Tensor& output, const std::vector<int64_t>& counts) override;
  std::unique_ptr<Work> all_gather_v_async(const at::Tensor& input, at::Tensor& output,
                                           const std::vector<int64_t>& counts) override;
  void broadcast(at::Tensor& tensor, int root) override;
  void send(const at::Tensor& tensor, int peer, int tag) override;  // tag ignored (see above)
  std::unique_ptr<Work> send_async(const at::Tensor& tensor, int peer, int tag) override;
  void recv(at::Tensor& tensor, int peer, int tag) override;  // tag ignored (see above)
  void barrier() override;
  // Through a device buffer and back: a host wait, for the rare scalars only.
  void reduce_numbers(std::vector<double>& values, Reduce op) override;

 private:
  class AsyncWork;

  // Enqueues one operation on stream_ (ordered after the compute stream), then waits for it.
  template <class Enqueue>
  void run_blocking(Op op, Enqueue&& enqueue);
  // stream_ waits for the work queued so far on the compute stream, then records `start`.
  void begin_on_stream(cudaEvent_t start);
  // The current compute stream waits for `done` (recorded on stream_); the host does not.
  void compute_waits_for(cudaEvent_t done) const;
  // Host polls until `done` completed; on an NCCL async error or the timeout: abort_and_fail.
  void await(cudaEvent_t start, cudaEvent_t done, Op op);
  void check_async_error(Op op);
  [[noreturn]] void abort_and_fail(Op op, const std::string& why);
  void check_usable() const;
  void check_tensor(const at::Tensor& t, const char* what) const;
  void record_on_stream(const at::Tensor& t) const;  // caching allocator: in use on stream_
  void check_all_gather_v(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& counts) const;
  void enqueue_all_gather_v(const at::Tensor& input, at::Tensor& output, const std::vector<int64_t>& counts);

  ncclComm_t comm_ = nullptr;  // null once aborted
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // recorded on the compute stream; stream_ waits on it
  cudaEvent_t start_ = nullptr;  // start and end of the current blocking operation on stream_
  cudaEvent_t done_ = nullptr;
  at::Tensor barrier_buffer_;    // one int32 on the device, made at the first barrier()
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  double fail_timeout_s_ = 0;
};

}  // namespace trident::comm
