#include "comm/mpi_communicator.hpp"

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>

#include "comm/progress.hpp"
#include "core/error.hpp"
#include "core/tensor_storage.hpp"

namespace trident::comm {

namespace {

MPI_Datatype mpi_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kLong: return MPI_INT64_T;
    case at::kInt: return MPI_INT32_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kChar: return MPI_INT8_T;
    case at::kBFloat16:  // MPI has no 16-bit floats: moved as 16-bit words, summed by sum_op()
    case at::kHalf: return MPI_UINT16_T;
    default: break;
  }
  fatal_one(std::string("MPI backend: unsupported dtype ") + std::string(c10::toString(t.scalar_type())));
}

// Element-wise a + b of 16-bit floats, in fp32 and rounded back (as NCCL sums bf16/fp16).
template <typename T>
void sum_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = static_cast<T>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

// The MPI operator summing T, created on first use (after MPI_Init), once per type.
template <typename T>
MPI_Op sum_16bit_op() {
  static const MPI_Op op = [] {
    MPI_Op created;
    MPI_CHECK(MPI_Op_create(&sum_16bit<T>, /*commute=*/1, &created));
    return created;
  }();
  return op;
}

// MPI_SUM, or for bf16/fp16 an operator of their own.
MPI_Op sum_op(const at::Tensor& t) {
  if (t.scalar_type() == at::kBFloat16) return sum_16bit_op<c10::BFloat16>();
  if (t.scalar_type() == at::kHalf) return sum_16bit_op<c10::Half>();
  return MPI_SUM;
}

int count_of(const at::Tensor& t) {
  TRIDENT_CHECK(t.numel() <= INT32_MAX, "tensor too large for one MPI call");
  return static_cast<int>(t.numel());
}

void check_contiguous(const at::Tensor& t) { TRIDENT_CHECK(t.is_contiguous(), "MPI backend needs contiguous tensors"); }

// Copies a staged result back into the tensor it stands for (nothing when it is the tensor).
void copy_back(const at::Tensor& staged, const at::Tensor& target) {
  if (staged.data_ptr() != target.data_ptr()) target.copy_(staged);
}

// A non-blocking MPI call in flight, with what it needs until it completes: the count and
// displacement arrays MPI reads, the staged host buffer, and the copy of the result back into
// the caller's tensor (`finish`, run once on completion).
class MpiWork final : public Work {
 public:
  MpiWork(MPI_Request request, Op op, std::vector<int> counts = {}, std::vector<int> displacements = {},
          at::Tensor staged = {}, std::function<void()> finish = {})
      : request_(request), op_(op), counts_(std::move(counts)), displacements_(std::move(displacements)),
        staged_(std::move(staged)), finish_(std::move(finish)) {
    if (request_ == MPI_REQUEST_NULL) complete();
  }
  // Dropped unfinished (an unused ZeRO-3 prefetch): completed, but its result is not copied back.
  ~MpiWork() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  bool test() override {
    int done = 0;
    if (request_ == MPI_REQUEST_NULL) return true;
    MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
    if (done) {
      note_completed(op_);
      complete();
    }
    return done != 0;
  }
  void wait() override {
    if (request_ == MPI_REQUEST_NULL) return;
    OpScope scope(op_);
    MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE));
    complete();
  }

 private:
  void complete() {
    if (finish_) std::exchange(finish_, nullptr)();
    staged_ = at::Tensor();  // read or copied back: a completed Work kept for later holds no buffer
  }
  MPI_Request request_;
  Op op_;
  std::vector<int> counts_, displacements_;
  at::Tensor staged_;
  std::function<void()> finish_;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool stage_through_host)
    : comm_(comm), stage_through_host_(stage_through_host) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

at::Tensor MpiCommunicator::host(const at::Tensor& t, bool copy_in) const {
  check_contiguous(t);
  if (t.is_cpu() && !stage_through_host_) return t;
  // Page-locked for a GPU tensor (the device copies run at full speed; LibTorch's host
  // allocator caches the buffers, so a step's calls reuse them).
  at::Tensor staged = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(t.is_cuda()));
  if (copy_in) staged.copy_(t);
  return staged;
}

void MpiCommunicator::all_reduce_sum(at::Tensor& tensor) {
  if (size_ == 1) return;
  at::Tensor h = host(tensor, true);
  {
    OpScope scope(Op::all_reduce);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, h.data_ptr(), count_of(h), mpi_type(h), sum_op(h), comm_));
  }
  copy_back(h, tensor);
}

std::unique_ptr<Work> MpiCommunicator::all_reduce_sum_async(at::Tensor& tensor) {
  if (size_ == 1) return std::make_unique<MpiWork>(MPI_REQUEST_NULL, Op::all_reduce);
  at::Tensor h = host(tensor, true);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, h.data_ptr(), count_of(h), mpi_type(h), sum_op(h), comm_, &request));
  return std::make_unique<MpiWork>(request, Op::all_reduce, std::vector<int>{}, std::vector<int>{}, h,
                                   [h, tensor] { copy_back(h, tensor); });
}

void MpiCommunicator::reduce_scatter_sum(const at::Tensor& input, at::Tensor& output) {
  TRIDENT_CHECK(input.numel() == output.numel() * size_, "reduce_scatter: input must hold size() chunks of output");
  const at::Tensor in = host(input, true);
  at::Tensor out = host(output, false);
  {
    OpScope scope(Op::reduce_scatter);
    MPI_CHECK(MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), count_of(out), mpi_type(out), sum_op(out),
                                       comm_));
  }
  copy_back(out, output);
}

void MpiCommunicator::all_gather(const at::Tensor& input, at::Tensor& output) {
  TRIDENT_CHECK(output.numel() == input.numel() * size_, "all_gather: output must hold size() chunks of input");
  const at::Tensor in = host(input, true);
  at::Tensor out = host(output, false);
  {
    OpScope scope(Op::all_gather);
    MPI_CHECK(MPI_Allgather(in.data_ptr(), count_of(in), mpi_type(in), out.data_ptr(), count_of(in), mpi_type(out),
                            comm_));
  }
  copy_back(out, output);
}

namespace {
std::vector<int> int_counts(const std::vector<int64_t>& counts, std::vector<int>* displacements) {
  std::vector<int> out;
  int64_t offset = 0;
  for (auto c : counts) {
    TRIDENT_CHECK(offset + c <= INT32_MAX, "piece too large for one MPI call");
    out.push_back(static_cast<int>(c));
    if (displacements) displacements->push_back(static_cast<int>(offset));
    offset += c;
  }
  return out;
}
int64_t total_of(const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (auto c : counts) total += c;
  return total;
}
}  // namespace

void MpiCommunicator::reduce_scatter_sum_v(const at::Tensor& input, at::Tensor& output,
                                           const std::vector<int64_t>& counts) {
  check_contiguous(input);
  check_contiguous(output);
  TRIDENT_CHECK(static_cast<int>(counts.size()) == size_ && input.numel() == total_of(counts) &&
                    output.numel() == counts[static_cast<size_t>(rank_)],
                "reduce_scatter_v: counts do not match the tensors");
  const auto c = int_counts(counts, nullptr);
  if (size_ == 1) {
    output.copy_(input);
    return;
  }
  const at::Tensor in = host(input, true);
  at::Tensor out = host(output, false);
  {
    OpScope scope(Op::reduce_scatter);
    MPI_CHECK(MPI_Reduce_scatter(in.data_ptr(), out.data_ptr(), c.data(), mpi_type(out), sum_op(out), comm_));
  }
  copy_back(out, output);
}

// Checks the pieces, puts this rank's in its place in `output`, and returns the MPI counts and
// displacements; the gather itself is MPI_Allgatherv(_IN_PLACE) over them. `output` is the host
// tensor MPI gathers into.
std::vector<int> MpiCommunicator::place_own_piece(const at::Tensor& input, at::Tensor& output,
                                                  const std::vector<int64_t>& counts, std::vector<int>& displacements) {
  check_contiguous(input);
  check_contiguous(output);
  TRIDENT_CHECK(static_cast<int>(counts.size()) == size_ && output.numel() == total_of(counts) &&
                    input.numel() == counts[static_cast<size_t>(rank_)],
                "all_gather_v: counts do not match the tensors");
  const auto c = int_counts(counts, &displacements);
  const auto* own = static_cast<const char*>(output.data_ptr()) +
                    static_cast<int64_t>(displacements[static_cast<size_t>(rank_)]) * output.element_size();
  if (input.data_ptr() != own) output.narrow(0, displacements[static_cast<size_t>(rank_)], input.numel()).copy_(input);
  return c;
}

void MpiCommunicator::all_gather_v(const at::Tensor& input, at::Tensor& output, const std::vector<int64_t>& counts) {
  // Staged: the whole output goes to the host and back (the other pieces are overwritten; the
  // copy in keeps the call's contract that `input` may already be its slice of `output`).
  at::Tensor out = host(output, true);
  const at::Tensor in = out.data_ptr() == output.data_ptr() ? input : host(input, true);
  std::vector<int> displacements;
  const auto c = place_own_piece(in, out, counts, displacements);
  if (size_ > 1) {
    OpScope scope(Op::all_gather);
    MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out.data_ptr(), c.data(), displacements.data(),
                             mpi_type(out), comm_));
  }
  copy_back(out, output);
}

std::unique_ptr<Work> MpiCommunicator::all_gather_v_async(const at::Tensor& input, at::Tensor& output,
                                                          const std::vector<int64_t>& counts) {
  at::Tensor out = host(output, true);
  const at::Tensor in = out.data_ptr() == output.data_ptr() ? input : host(input, true);
  std::vector<int> displacements;
  auto c = place_own_piece(in, out, counts, displacements);
  MPI_Request request = MPI_REQUEST_NULL;
  if (size_ > 1)
    MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out.data_ptr(), c.data(), displacements.data(),
                              mpi_type(out), comm_, &request));
  return std::make_unique<MpiWork>(request, Op::all_gather, std::move(c), std::move(displacements), out,
                                   [out, output] { copy_back(out, output); });
}

void MpiCommunicator::broadcast(at::Tensor& tensor, int root) {
  at::Tensor h = host(tensor, rank_ == root);
  {
    OpScope scope(Op::broadcast);
    MPI_CHECK(MPI_Bcast(h.data_ptr(), count_of(h), mpi_type(h), root, comm_));
  }
  copy_back(h, tensor);
}

void MpiCommunicator::send(const at::Tensor& tensor, int peer, int tag) {
  const at::Tensor h = host(tensor, true);
  OpScope scope(Op::send);
  MPI_CHECK(MPI_Send(h.data_ptr(), count_of(h), mpi_type(h), peer, tag, comm_));
}

std::unique_ptr<Work> MpiCommunicator::send_async(const at::Tensor& tensor, int peer, int tag) {
  const at::Tensor h = host(tensor, true);  // a staged copy lives in the Work until the send completes
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Isend(h.data_ptr(), count_of(h), mpi_type(h), peer, tag, comm_, &request));
  return std::make_unique<MpiWork>(request, Op::send, std::vector<int>{}, std::vector<int>{}, h);
}

void MpiCommunicator::recv(at::Tensor& tensor, int peer, int tag) {
  at::Tensor h = host(tensor, false);
  {
    OpScope scope(Op::recv);
    MPI_CHECK(MPI_Recv(h.data_ptr(), count_of(h), mpi_type(h), peer, tag, comm_, MPI_STATUS_IGNORE));
  }
  copy_back(h, tensor);
}

void MpiCommunicator::barrier() {
  OpScope scope(Op::barrier);
  MPI_CHECK(MPI_Barrier(comm_));
}

void MpiCommunicator::reduce_numbers(std::vector<double>& values, Reduce op) {
  if (values.empty()) return;
  OpScope scope(Op::all_reduce);
  const MPI_Op mpi_op = op == Reduce::sum ? MPI_SUM : op == Reduce::max ? MPI_MAX : MPI_MIN;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, mpi_op, comm_));
}

bool same_on_every_rank(MpiCommunicator& group, uint64_t value) {
  if (group.size() == 1) return true;
  // Each 32-bit half is exact as a double: the same everywhere iff min == max.
  std::vector<double> low{static_cast<double>(value >> 32), static_cast<double>(value & 0xffffffffu)}, high = low;
  group.reduce_numbers(low, Reduce::min);
  group.reduce_numbers(high, Reduce::max);
  return low == high;
}

bool make_identical(MpiCommunicator& group, std::vector<at::Tensor>& tensors) {
  if (group.size() == 1) return false;
  uint64_t hash = 0;
  for (const auto& t : tensors) {
    TRIDENT_CHECK(t.device().is_cpu() && t.is_contiguous(), "make_identical: the tensors must be contiguous, in host memory");
    hash = hash_with(hash, t);
  }
  if (same_on_every_rank(group, hash)) return false;
  constexpr int64_t kPiece = int64_t{1} << 30;  // elements per broadcast: MPI counts are ints
  for (auto& t : tensors) {
    at::Tensor flat = t.view({-1});  // pieces of it are filled in place
    for (int64_t first = 0; first < flat.numel(); first += kPiece) {
      at::Tensor piece = flat.narrow(0, first, std::min(kPiece, flat.numel() - first));
      group.broadcast(piece, 0);
    }
  }
  return true;
}

}  // namespace trident::comm
