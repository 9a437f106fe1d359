#include "comm/mpi_communicator.hpp"

#include <ATen/ATen.h>

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
  explicit MpiWork(MPI_Request request) : request_(request) {}
  ~MpiWork() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  bool test() override {
    int done = 0;
    MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }
  void wait() override { MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE)); }

 private:
  MPI_Request request_;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

void MpiCommunicator::all_reduce_sum(at::Tensor& tensor) {
  check_host_contiguous(tensor);
  if (size_ == 1) return;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, tensor.data_ptr(), count_of(tensor), mpi_type(tensor), MPI_SUM, comm_));
}

std::unique_ptr<Work> MpiCommunicator::all_reduce_sum_async(at::Tensor& tensor) {
  check_host_contiguous(tensor);
  MPI_Request request = MPI_REQUEST_NULL;
  if (size_ > 1)
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, tensor.data_ptr(), count_of(tensor), mpi_type(tensor), MPI_SUM, comm_,
                             &request));
  return std::make_unique<MpiWork>(request);
}

void MpiCommunicator::reduce_scatter_sum(const at::Tensor& input, at::Tensor& output) {
  check_host_contiguous(input);
  check_host_contiguous(output);
  TRIDENT_CHECK(input.numel() == output.numel() * size_, "reduce_scatter: input must hold size() chunks of output");
  MPI_CHECK(MPI_Reduce_scatter_block(input.data_ptr(), output.data_ptr(), count_of(output), mpi_type(output),
                                     MPI_SUM, comm_));
}

void MpiCommunicator::all_gather(const at::Tensor& input, at::Tensor& output) {
  check_host_contiguous(input);
  check_host_contiguous(output);
  TRIDENT_CHECK(output.numel() == input.numel() * size_, "all_gather: output must hold size() chunks of input");
  MPI_CHECK(MPI_Allgather(input.data_ptr(), count_of(input), mpi_type(input), output.data_ptr(), count_of(input),
                          mpi_type(output), comm_));
}

void MpiCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_host_contiguous(tensor);
  MPI_CHECK(MPI_Bcast(tensor.data_ptr(), count_of(tensor), mpi_type(tensor), root, comm_));
}

void MpiCommunicator::send(const at::Tensor& tensor, int peer, int tag) {
  check_host_contiguous(tensor);
  MPI_CHECK(MPI_Send(tensor.data_ptr(), count_of(tensor), mpi_type(tensor), peer, tag, comm_));
}

void MpiCommunicator::recv(at::Tensor& tensor, int peer, int tag) {
  check_host_contiguous(tensor);
  MPI_CHECK(MPI_Recv(tensor.data_ptr(), count_of(tensor), mpi_type(tensor), peer, tag, comm_, MPI_STATUS_IGNORE));
}

void MpiCommunicator::barrier() { MPI_CHECK(MPI_Barrier(comm_)); }

}  // namespace trident::comm
