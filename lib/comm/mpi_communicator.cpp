#include "comm/mpi_communicator.hpp"

#include <ATen/ATen.h>

#include "comm/progress.hpp"
#include "core/error.hpp"

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
    default: break;
  }
  fatal_one(std::string("MPI backend: unsupported dtype ") + std::string(c10::toString(t.scalar_type())));
}

int count_of(const at::Tensor& t) {
  TRIDENT_CHECK(t.numel() <= INT32_MAX, "tensor too large for one MPI call");
  return static_cast<int>(t.numel());
}

void check_host_contiguous(const at::Tensor& t) {
  TRIDENT_CHECK(t.device().is_cpu(), "MPI backend needs CPU tensors");
  TRIDENT_CHECK(t.is_contiguous(), "MPI backend needs contiguous tensors");
}

class MpiWork final : public Work {
 public:
  MpiWork(MPI_Request request, Op op) : request_(request), op_(op) {}
  // A non-blocking collective whose count and displacement arrays MPI reads until it completes.
  MpiWork(MPI_Request request, Op op, std::vector<int> counts, std::vector<int> displacements)
      : request_(request), op_(op), counts_(std::move(counts)), displacements_(std::move(displacements)) {}
  ~MpiWork() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  bool test() override {
    int done = 0;
    if (request_ == MPI_REQUEST_NULL) return true;
    MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
    if (done) note_completed(op_);
    return done != 0;
  }
  void wait() override {
    if (request_ == MPI_REQUEST_NULL) return;
    OpScope scope(op_);
    MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE));
  }

 private:
  MPI_Request request_;
  Op op_;
  std::vector<int> counts_, displacements_;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

void MpiCommunicator::all_reduce_sum(at::Tensor& tensor) {
  check_host_contiguous(tensor);
  if (size_ == 1) return;
  OpScope scope(Op::all_reduce);
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, tensor.data_ptr(), count_of(tensor), mpi_type(tensor), MPI_SUM, comm_));
}

std::unique_ptr<Work> MpiCommunicator::all_reduce_sum_async(at::Tensor& tensor) {
  check_host_contiguous(tensor);
  MPI_Request request = MPI_REQUEST_NULL;
  if (size_ > 1)
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, tensor.data_ptr(), count_of(tensor), mpi_type(tensor), MPI_SUM, comm_,
                             &request));
  return std::make_unique<MpiWork>(request, Op::all_reduce);
}

void MpiCommunicator::reduce_scatter_sum(const at::Tensor& input, at::Tensor& output) {
  check_host_contiguous(input);
  check_host_contiguous(output);
  TRIDENT_CHECK(input.numel() == output.numel() * size_, "reduce_scatter: input must hold size() chunks of output");
  OpScope scope(Op::reduce_scatter);
  MPI_CHECK(MPI_Reduce_scatter_block(input.data_ptr(), output.data_ptr(), count_of(output), mpi_type(output),
                                     MPI_SUM, comm_));
}

void MpiCommunicator::all_gather(const at::Tensor& input, at::Tensor& output) {
  check_host_contiguous(input);
  check_host_contiguous(output);
  TRIDENT_CHECK(output.numel() == input.numel() * size_, "all_gather: output must hold size() chunks of input");
  OpScope scope(Op::all_gather);
  MPI_CHECK(MPI_Allgather(input.data_ptr(), count_of(input), mpi_type(input), output.data_ptr(), count_of(input),
                          mpi_type(output), comm_));
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
  check_host_contiguous(input);
  check_host_contiguous(output);
  TRIDENT_CHECK(static_cast<int>(counts.size()) == size_ && input.numel() == total_of(counts) &&
                    output.numel() == counts[static_cast<size_t>(rank_)],
                "reduce_scatter_v: counts do not match the tensors");
  const auto c = int_counts(counts, nullptr);
  if (size_ == 1) {
    output.copy_(input);
    return;
  }
  OpScope scope(Op::reduce_scatter);
  MPI_CHECK(MPI_Reduce_scatter(input.data_ptr(), output.data_ptr(), c.data(), mpi_type(output), MPI_SUM, comm_));
}

// Checks the pieces, puts this rank's in its place in `output`, and returns the MPI counts and
// displacements; the gather itself is MPI_Allgatherv(_IN_PLACE) over them.
std::vector<int> MpiCommunicator::place_own_piece(const at::Tensor& input, at::Tensor& output,
                                                  const std::vector<int64_t>& counts, std::vector<int>& displacements) {
  check_host_contiguous(input);
  check_host_contiguous(output);
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
  std::vector<int> displacements;
  const auto c = place_own_piece(input, output, counts, displacements);
  if (size_ == 1) return;
  OpScope scope(Op::all_gather);
  MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, output.data_ptr(), c.data(), displacements.data(),
                           mpi_type(output), comm_));
}

std::unique_ptr<Work> MpiCommunicator::all_gather_v_async(const at::Tensor& input, at::Tensor& output,
                                                          const std::vector<int64_t>& counts) {
  std::vector<int> displacements;
  auto c = place_own_piece(input, output, counts, displacements);
  MPI_Request request = MPI_REQUEST_NULL;
  if (size_ > 1)
    MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, output.data_ptr(), c.data(), displacements.data(),
                              mpi_type(output), comm_, &request));
  return std::make_unique<MpiWork>(request, Op::all_gather, std::move(c), std::move(displacements));
}

void MpiCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_host_contiguous(tensor);
  OpScope scope(Op::broadcast);
  MPI_CHECK(MPI_Bcast(tensor.data_ptr(), count_of(tensor), mpi_type(tensor), root, comm_));
}

void MpiCommunicator::send(const at::Tensor& tensor, int peer, int tag) {
  check_host_contiguous(tensor);
  OpScope scope(Op::send);
  MPI_CHECK(MPI_Send(tensor.data_ptr(), count_of(tensor), mpi_type(tensor), peer, tag, comm_));
}

std::unique_ptr<Work> MpiCommunicator::send_async(const at::Tensor& tensor, int peer, int tag) {
  check_host_contiguous(tensor);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Isend(tensor.data_ptr(), count_of(tensor), mpi_type(tensor), peer, tag, comm_, &request));
  return std::make_unique<MpiWork>(request, Op::send);
}

void MpiCommunicator::recv(at::Tensor& tensor, int peer, int tag) {
  check_host_contiguous(tensor);
  OpScope scope(Op::recv);
  MPI_CHECK(MPI_Recv(tensor.data_ptr(), count_of(tensor), mpi_type(tensor), peer, tag, comm_, MPI_STATUS_IGNORE));
}

void MpiCommunicator::barrier() {
  OpScope scope(Op::barrier);
  MPI_CHECK(MPI_Barrier(comm_));
}

}  // namespace trident::comm
