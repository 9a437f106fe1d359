#include "comm/nccl_communicator.hpp"

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "comm/cuda_check.hpp"
#include "core/error.hpp"

namespace trident::comm {

namespace {

// ---- tensors -------------------------------------------------------------------------------

ncclDataType_t nccl_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ncclFloat32;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kDouble: return ncclFloat64;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kByte: return ncclUint8;
    case at::kChar: return ncclInt8;
    default: break;
  }
  fatal_one(std::string("NCCL backend: unsupported dtype ") + std::string(c10::toString(t.scalar_type())));
}

size_t count_of(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

int64_t total_of(const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (auto c : counts) total += c;
  return total;
}

c10::DeviceIndex device_index(int device) { return static_cast<c10::DeviceIndex>(device); }

cudaStream_t compute_stream(int device) { return c10::cuda::getCurrentCUDAStream(device_index(device)).stream(); }

cudaEvent_t make_event() {
  cudaEvent_t event = nullptr;
  // No timing: cheaper to record, and cudaStreamWaitEvent/cudaEventQuery are all we need.
  CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

// cudaEventQuery, with cudaErrorNotReady taken out of CUDA's last-error slot: LibTorch checks
// cudaGetLastError() after its kernel launches and would report our "not ready" as its failure.
cudaError_t query(cudaEvent_t event) {
  const cudaError_t rc = cudaEventQuery(event);
  if (rc == cudaErrorNotReady) (void)cudaGetLastError();
  return rc;
}

// Polling back-off: spin briefly (small collectives finish in microseconds), then sleep so a
// long wait does not burn the core the next rank's data loader may need.
void back_off(int polls) {
  if (polls < 64)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(polls < 1024 ? 20 : 200));
}

}  // namespace

// ---- asynchronous work ---------------------------------------------------------------------

class NcclCommunicator::AsyncWork final : public Work {
 public:
  AsyncWork(NcclCommunicator& comm, Op op) : comm_(comm), op_(op), start_(make_event()), done_(make_event()) {}
  ~AsyncWork() override {
    // Never waited: still order later compute after it (host not blocked, errors not thrown).
    if (!waited_) (void)cudaStreamWaitEvent(compute_stream(comm_.device_), done_, 0);
    (void)cudaEventDestroy(start_);
    (void)cudaEventDestroy(done_);
  }
  AsyncWork(const AsyncWork&) = delete;
  AsyncWork& operator=(const AsyncWork&) = delete;

  cudaEvent_t start() const { return start_; }
  cudaEvent_t done() const { return done_; }

  bool test() override {
    if (complete_) return true;
    const cudaError_t rc = query(done_);
    if (rc == cudaErrorNotReady) {
      comm_.check_async_error(op_);
      return false;
    }
    if (rc != cudaSuccess) comm_.abort_and_fail(op_, std::string("cudaEventQuery: ") + cudaGetErrorString(rc));
    complete_ = true;
    note_completed(op_);
    return true;
  }

  void wait() override {
    if (waited_) return;
    c10::cuda::CUDAGuard guard(device_index(comm_.device_));
    // First the stream order, which holds whatever the host does next; then the host waits too,
    // so that a hung or failed collective is reported here and not in some later CUDA call.
    comm_.compute_waits_for(done_);
    waited_ = true;
    if (complete_) return;
    OpScope scope(op_);
    comm_.await(start_, done_, op_);
    complete_ = true;
  }

 private:
  NcclCommunicator& comm_;
  Op op_;
  cudaEvent_t start_;
  cudaEvent_t done_;
  bool complete_ = false;
  bool waited_ = false;
};

// ---- construction --------------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(MPI_Comm comm, double fail_timeout_s) : fail_timeout_s_(fail_timeout_s) {
  MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  MPI_CHECK(MPI_Comm_size(comm, &size_));
  CUDA_CHECK(cudaGetDevice(&device_));
  c10::cuda::CUDAGuard guard(device_index(device_));

  // The highest priority the device offers: the collectives (the critical path of a DDP step's
  // tail) then are not queued behind the next micro-batch's compute kernels. Non-blocking: no
  // implicit synchronisation with the legacy default stream; the events do all the ordering.
  int least_priority = 0, greatest_priority = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest_priority));
  ready_ = make_event();
  start_ = make_event();
  done_ = make_event();

  ncclUniqueId id{};
  if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  // Counted as a barrier for the fail-fast watchdog: every rank of the group must get here, and
  // a rank that never does leaves the others blocked in ncclCommInitRank.
  OpScope scope(Op::barrier);
  MPI_CHECK(MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, comm));
  NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) {
    // Unwinding from a fault (here or agreed with the other ranks): a peer may never reach the
    // collectives still queued, and ncclCommDestroy would wait for them. Abort returns at once.
    if (std::uncaught_exceptions() > 0)
      (void)ncclCommAbort(comm_);
    else
      (void)ncclCommDestroy(comm_);
  }
  for (cudaEvent_t event : {ready_, start_, done_})
    if (event) (void)cudaEventDestroy(event);
  if (stream_) (void)cudaStreamDestroy(stream_);
}

std::string NcclCommunicator::library_version() {
  int code = 0;
  NCCL_CHECK(ncclGetVersion(&code));
  // NCCL_VERSION_CODE: X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z from 2.9.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return fmt::format("{}.{}.{}", major, minor, code % 100);
}

// ---- ordering and completion ---------------------------------------------------------------

void NcclCommunicator::check_usable() const {
  TRIDENT_CHECK(comm_ != nullptr, "the NCCL communicator was aborted after an earlier failure");
}

void NcclCommunicator::check_tensor(const at::Tensor& t, const char* what) const {
  TRIDENT_CHECK(t.is_cuda() && t.device().index() == device_index(device_),
                fmt::format("NCCL backend: {} must be a CUDA tensor on cuda:{} (got {})", what, device_,
                            t.device().str()));
  TRIDENT_CHECK(t.is_contiguous(), fmt::format("NCCL backend: {} must be contiguous", what));
}

void NcclCommunicator::record_on_stream(const at::Tensor& t) const {
  // Without this, a tensor freed on the compute stream while the collective still reads or
  // writes it could be handed to the next allocation before stream_ is done with it.
  c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(),
                                                c10::cuda::getStreamFromExternal(stream_, device_index(device_)));
}

void NcclCommunicator::begin_on_stream(cudaEvent_t start) {
  CUDA_CHECK(cudaEventRecord(ready_, compute_stream(device_)));
  CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
  // Marks when the operation itself starts on the GPU: the timeout counts from there, not from
  // the (possibly long) compute queued ahead of it.
  CUDA_CHECK(cudaEventRecord(start, stream_));
}

void NcclCommunicator::compute_waits_for(cudaEvent_t done) const {
  CUDA_CHECK(cudaStreamWaitEvent(compute_stream(device_), done, 0));
}

void NcclCommunicator::check_async_error(Op op) {
  check_usable();
  ncclResult_t async_error = ncclSuccess;
  NCCL_CHECK(ncclCommGetAsyncError(comm_, &async_error));
  if (async_error != ncclSuccess && async_error != ncclInProgress) {
    const char* last = ncclGetLastError(comm_);
    abort_and_fail(op, fmt::format("asynchronous NCCL error: {}{}", ncclGetErrorString(async_error),
                                   last && *last ? fmt::format(" ({})", last) : std::string()));
  }
}

void NcclCommunicator::abort_and_fail(Op op, const std::string& why) {
  // Abort before throwing: it stops this rank's NCCL kernels, so the GPU is not left spinning in
  // a collective while the job is torn down, and later calls on this object fail cleanly.
  if (comm_) (void)ncclCommAbort(comm_);
  comm_ = nullptr;
  fatal_one(fmt::format("NCCL {} on cuda:{} (rank {} of {} in this group): {}; NCCL communicator aborted", op_name(op),
                        device_, rank_, size_, why));
}

void NcclCommunicator::await(cudaEvent_t start, cudaEvent_t done, Op op) {
  using clock = std::chrono::steady_clock;
  bool started = false;
  clock::time_point started_at;
  for (int polls = 0;; ++polls) {
    const cudaError_t rc = query(done);
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) abort_and_fail(op, std::string("cudaEventQuery: ") + cudaGetErrorString(rc));
    check_async_error(op);
    if (fail_timeout_s_ > 0) {
      if (!started) {
        const cudaError_t s = query(start);
        if (s == cudaSuccess) {
          started = true;
          started_at = clock::now();
        } else if (s != cudaErrorNotReady) {
          abort_and_fail(op, std::string("cudaEventQuery: ") + cudaGetErrorString(s));
        }
      } else if (std::chrono::duration<double>(clock::now() - started_at).count() > fail_timeout_s_) {
        abort_and_fail(op, fmt::format("not complete {} s after it started on the GPU (the limit run.fail_timeout_s "
                                       "sets: 20 x it where the watchdog runs, 1 x without); a peer rank may have "
                                       "died or called a different collective",
                                       fail_timeout_s_));
      }
    }
    back_off(polls);
  }
}

template <class Enqueue>
void NcclCommunicator::run_blocking(Op op, Enqueue&& enqueue) {
  check_usable();
  c10::cuda::CUDAGuard guard(device_index(device_));
  OpScope scope(op);
  begin_on_stream(start_);
  enqueue();
  CUDA_CHECK(cudaEventRecord(done_, stream_));
  compute_waits_for(done_);
  await(start_, done_, op);
}

// ---- collectives ---------------------------------------------------------------------------

void NcclCommunicator::all_reduce_sum(at::Tensor& tensor) {
  check_tensor(tensor, "all_reduce tensor");
  if (tensor.numel() == 0) return;  // the same on every rank: sizes are part of the collective
  run_blocking(Op::all_reduce, [&] {
    NCCL_CHECK(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), count_of(tensor), nccl_type(tensor), ncclSum,
                             comm_, stream_));
  });
}

std::unique_ptr<Work> NcclCommunicator::all_reduce_sum_async(at::Tensor& tensor) {
  check_tensor(tensor, "all_reduce tensor");
  check_usable();
  c10::cuda::CUDAGuard guard(device_index(device_));
  auto work = std::make_unique<AsyncWork>(*this, Op::all_reduce);
  if (tensor.numel() == 0) return work;  // events never recorded: complete at once
  begin_on_stream(work->start());
  NCCL_CHECK(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), count_of(tensor), nccl_type(tensor), ncclSum, comm_,
                           stream_));
  CUDA_CHECK(cudaEventRecord(work->done(), stream_));
  record_on_stream(tensor);
  return work;
}

void NcclCommunicator::reduce_scatter_sum(const at::Tensor& input, at::Tensor& output) {
  check_tensor(input, "reduce_scatter input");
  check_tensor(output, "reduce_scatter output");
  TRIDENT_CHECK(input.scalar_type() == output.scalar_type(), "reduce_scatter: input and output dtypes differ");
  TRIDENT_CHECK(input.numel() == output.numel() * size_, "reduce_scatter: input must hold size() chunks of output");
  if (output.numel() == 0) return;
  run_blocking(Op::reduce_scatter, [&] {
    NCCL_CHECK(ncclReduceScatter(input.data_ptr(), output.data_ptr(), count_of(output), nccl_type(output), ncclSum,
                                 comm_, stream_));
  });
}

void NcclCommunicator::all_gather(const at::Tensor& input, at::Tensor& output) {
  check_tensor(input, "all_gather input");
  check_tensor(output, "all_gather output");
  TRIDENT_CHECK(input.scalar_type() == output.scalar_type(), "all_gather: input and output dtypes differ");
  TRIDENT_CHECK(output.numel() == input.numel() * size_, "all_gather: output must hold size() chunks of input");
  if (input.numel() == 0) return;
  // In place (input is chunk rank() of output) is allowed by NCCL as it is.
  run_blocking(Op::all_gather, [&] {
    NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(), count_of(input), nccl_type(input), comm_, stream_));
  });
}

void NcclCommunicator::reduce_scatter_sum_v(const at::Tensor& input, at::Tensor& output,
                                            const std::vector<int64_t>& counts) {
  check_tensor(input, "reduce_scatter_v input");
  check_tensor(output, "reduce_scatter_v output");
  TRIDENT_CHECK(input.scalar_type() == output.scalar_type(), "reduce_scatter_v: input and output dtypes differ");
  TRIDENT_CHECK(static_cast<int>(counts.size()) == size_ && input.numel() == total_of(counts) &&
                    output.numel() == counts[static_cast<size_t>(rank_)],
                "reduce_scatter_v: counts do not match the tensors");
  const int64_t largest = *std::max_element(counts.begin(), counts.end());
  if (largest == 0) return;
  if (std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == largest; })) {
    reduce_scatter_sum(input, output);
    return;
  }
  // NCCL has no reduce-scatter-v: one ncclReduce per piece, rooted at its owner, in one group
  // (one launch). Each reduce reads its piece in place: no padded copy of the input. Each rank
  // sends about the input's bytes once (a ring reduce-scatter sends (n - 1) / n of them). The
  // receive buffer is used on the root only; the others pass their own output, untouched.
  run_blocking(Op::reduce_scatter, [&] {
    const auto elem = static_cast<int64_t>(input.element_size());
    const auto* base = static_cast<const char*>(input.data_ptr());
    const ncclDataType_t type = nccl_type(input);
    NCCL_CHECK(ncclGroupStart());
    int64_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      const int64_t c = counts[static_cast<size_t>(r)];
      if (c > 0)
        NCCL_CHECK(ncclReduce(base + offset * elem, output.data_ptr(), static_cast<size_t>(c), type, ncclSum, r, comm_,
                              stream_));
      offset += c;
    }
    NCCL_CHECK(ncclGroupEnd());
  });
}

// One broadcast per piece, rooted at its owner, in one group (one launch). The owner sends from
// `input` into its slice of `output` (NCCL copies unless they are the same memory, the in-place
// case); the others receive in place into their slice. Enqueued on stream_.
void NcclCommunicator::enqueue_all_gather_v(const at::Tensor& input, at::Tensor& output,
                                            const std::vector<int64_t>& counts) {
  const auto elem = static_cast<int64_t>(output.element_size());
  auto* base = static_cast<char*>(output.data_ptr());
  const ncclDataType_t type = nccl_type(output);
  NCCL_CHECK(ncclGroupStart());
  int64_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    const int64_t c = counts[static_cast<size_t>(r)];
    void* slice = base + offset * elem;
    const void* send = r == rank_ ? input.data_ptr() : slice;
    if (c > 0) NCCL_CHECK(ncclBroadcast(send, slice, static_cast<size_t>(c), type, r, comm_, stream_));
    offset += c;
  }
  NCCL_CHECK(ncclGroupEnd());
}

void NcclCommunicator::check_all_gather_v(const at::Tensor& input, const at::Tensor& output,
                                          const std::vector<int64_t>& counts) const {
  check_tensor(input, "all_gather_v input");
  check_tensor(output, "all_gather_v output");
  TRIDENT_CHECK(input.scalar_type() == output.scalar_type(), "all_gather_v: input and output dtypes differ");
  TRIDENT_CHECK(static_cast<int>(counts.size()) == size_ && output.numel() == total_of(counts) &&
                    input.numel() == counts[static_cast<size_t>(rank_)],
                "all_gather_v: counts do not match the tensors");
}

void NcclCommunicator::all_gather_v(const at::Tensor& input, at::Tensor& output, const std::vector<int64_t>& counts) {
  check_all_gather_v(input, output, counts);
  run_blocking(Op::all_gather, [&] { enqueue_all_gather_v(input, output, counts); });
}

std::unique_ptr<Work> NcclCommunicator::all_gather_v_async(const at::Tensor& input, at::Tensor& output,
                                                           const std::vector<int64_t>& counts) {
  check_all_gather_v(input, output, counts);
  check_usable();
  c10::cuda::CUDAGuard guard(device_index(device_));
  auto work = std::make_unique<AsyncWork>(*this, Op::all_gather);
  if (output.numel() == 0) return work;
  begin_on_stream(work->start());
  enqueue_all_gather_v(input, output, counts);
  CUDA_CHECK(cudaEventRecord(work->done(), stream_));
  record_on_stream(input);
  record_on_stream(output);
  return work;
}

void NcclCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast tensor");
  if (tensor.numel() == 0) return;
  run_blocking(Op::broadcast, [&] {
    NCCL_CHECK(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), count_of(tensor), nccl_type(tensor), root, comm_,
                             stream_));
  });
}

void NcclCommunicator::send(const at::Tensor& tensor, int peer, int tag) {
  check_tensor(tensor, "send tensor");
  if (tensor.numel() == 0) return;  // the receiver's tensor is empty too
  run_blocking(Op::send, [&] {
    NCCL_CHECK(ncclSend(tensor.data_ptr(), count_of(tensor), nccl_type(tensor), peer, comm_, stream_));
  });
}

std::unique_ptr<Work> NcclCommunicator::send_async(const at::Tensor& tensor, int peer, int tag) {
  check_tensor(tensor, "send tensor");
  check_usable();
  c10::cuda::CUDAGuard guard(device_index(device_));
  auto work = std::make_unique<AsyncWork>(*this, Op::send);
  if (tensor.numel() == 0) return work;  // events never recorded: complete at once
  begin_on_stream(work->start());
  NCCL_CHECK(ncclSend(tensor.data_ptr(), count_of(tensor), nccl_type(tensor), peer, comm_, stream_));
  CUDA_CHECK(cudaEventRecord(work->done(), stream_));
  record_on_stream(tensor);
  return work;
}

void NcclCommunicator::recv(at::Tensor& tensor, int peer, int tag) {
  check_tensor(tensor, "recv tensor");
  if (tensor.numel() == 0) return;
  run_blocking(Op::recv, [&] {
    NCCL_CHECK(ncclRecv(tensor.data_ptr(), count_of(tensor), nccl_type(tensor), peer, comm_, stream_));
  });
}

void NcclCommunicator::barrier() {
  // An all-reduce of one element: complete on this rank only once every rank has joined it.
  if (!barrier_buffer_.defined())
    barrier_buffer_ = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA, device_index(device_)));
  run_blocking(Op::barrier, [&] {
    NCCL_CHECK(ncclAllReduce(barrier_buffer_.data_ptr(), barrier_buffer_.data_ptr(), 1, ncclInt32, ncclSum, comm_,
                             stream_));
  });
}

void NcclCommunicator::reduce_numbers(std::vector<double>& values, Reduce op) {
  if (values.empty()) return;
  at::Tensor buffer = at::tensor(values, at::kDouble).to(at::Device(at::kCUDA, device_index(device_)));
  const ncclRedOp_t nccl_op = op == Reduce::sum ? ncclSum : op == Reduce::max ? ncclMax : ncclMin;
  run_blocking(Op::all_reduce, [&] {
    NCCL_CHECK(ncclAllReduce(buffer.data_ptr(), buffer.data_ptr(), count_of(buffer), ncclFloat64, nccl_op, comm_,
                             stream_));
  });
  const at::Tensor on_host = buffer.cpu();
  std::copy(on_host.data_ptr<double>(), on_host.data_ptr<double>() + on_host.numel(), values.begin());
}

}  // namespace trident::comm
