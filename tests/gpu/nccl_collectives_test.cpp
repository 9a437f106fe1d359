// Probe of the NCCL backend (label gpu), run under mpiexec: every collective of NcclCommunicator
// on CUDA tensors must give exactly what MpiCommunicator gives on the same data on the CPU
// (integer-valued data, so sums are exact in every dtype and any order).
// Exit codes: 0 all equal; 1 a difference or a fault; 77 skipped (CTest SKIP_RETURN_CODE): no
// GPU visible, or this node's ranks cannot each have their own GPU.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "comm/cuda_check.hpp"
#include "comm/device_placement.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/nccl_communicator.hpp"
#include "comm/world.hpp"
#include "core/error.hpp"

using namespace trident;

namespace {

constexpr int kSkip = 77;

struct Probe {
  Probe(comm::MpiCommunicator& mpi_comm, comm::NcclCommunicator& nccl_comm, int cuda_device)
      : mpi(mpi_comm), nccl(nccl_comm), device(cuda_device) {}

  comm::MpiCommunicator& mpi;
  comm::NcclCommunicator& nccl;
  int device;
  int checks = 0;
  int failures = 0;

  int r() const { return mpi.rank(); }
  int n() const { return mpi.size(); }
  at::Tensor gpu(const at::Tensor& cpu) const { return cpu.to(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device))); }

  // Integer values that differ per rank and per element.
  at::Tensor data(int64_t count, torch::ScalarType dtype) const {
    return (torch::arange(count, torch::kLong) % 7 * (r() + 1) + r()).to(dtype);
  }

  void expect_same(const std::string& what, const at::Tensor& from_nccl, const at::Tensor& from_mpi) {
    ++checks;
    const auto got = from_nccl.to(torch::kCPU).to(from_mpi.scalar_type());
    if (got.sizes() == from_mpi.sizes() && torch::equal(got, from_mpi)) return;
    ++failures;
    std::fprintf(stderr, "%s: FAIL %s: the NCCL result differs from the MPI one\n", who().c_str(), what.c_str());
  }

  // MPI has no half/bfloat16: the reference sum is taken in float (exact for these values).
  void all_reduce(torch::ScalarType dtype, torch::ScalarType reference_dtype) {
    auto host = data(1000, reference_dtype);
    auto device_tensor = gpu(data(1000, dtype));
    nccl.all_reduce_sum(device_tensor);
    mpi.all_reduce_sum(host);
    expect_same(std::string("all_reduce ") + c10::toString(dtype), device_tensor, host);
  }

  void all_reduce_async() {
    auto host = data(1 << 20, torch::kFloat);
    auto device_tensor = gpu(host);
    auto work = nccl.all_reduce_sum_async(device_tensor);
    while (!work->test()) {
    }
    work->wait();  // also after test(): orders the compute stream
    mpi.all_reduce_sum(host);
    expect_same("all_reduce_async", device_tensor, host);
  }

  void reduce_scatter_and_all_gather() {
    const int64_t chunk = 333;
    auto input = data(chunk * n(), torch::kFloat);
    auto host_out = torch::empty({chunk}, torch::kFloat);
    auto device_out = gpu(torch::zeros({chunk}, torch::kFloat));
    nccl.reduce_scatter_sum(gpu(input), device_out);
    mpi.reduce_scatter_sum(input, host_out);
    expect_same("reduce_scatter", device_out, host_out);

    auto mine = data(chunk, torch::kDouble);
    auto host_all = torch::empty({chunk * n()}, torch::kDouble);
    auto device_all = gpu(torch::zeros({chunk * n()}, torch::kDouble));
    nccl.all_gather(gpu(mine), device_all);
    mpi.all_gather(mine, host_all);
    expect_same("all_gather", device_all, host_all);

    // In place: this rank's input is its chunk of the output.
    auto in_place = gpu(torch::zeros({chunk * n()}, torch::kDouble));
    in_place.narrow(0, r() * chunk, chunk).copy_(gpu(mine));
    nccl.all_gather(in_place.narrow(0, r() * chunk, chunk), in_place);
    expect_same("all_gather in place", in_place, host_all);
  }

  void uneven() {
    // Rank 0's piece is empty; the others differ in size.
    std::vector<int64_t> counts;
    int64_t total = 0;
    for (int k = 0; k < n(); ++k) {
      counts.push_back(3 * k + k % 2);
      total += counts.back();
    }
    const int64_t own = counts[static_cast<size_t>(r())];
    auto input = data(total, torch::kLong);
    auto host_out = torch::empty({own}, torch::kLong);
    auto device_out = gpu(torch::zeros({own}, torch::kLong));
    nccl.reduce_scatter_sum_v(gpu(input), device_out, counts);
    mpi.reduce_scatter_sum_v(input, host_out, counts);
    expect_same("reduce_scatter_v", device_out, host_out);

    auto mine = data(own, torch::kInt);
    auto host_all = torch::zeros({total}, torch::kInt);
    auto device_all = gpu(torch::zeros({total}, torch::kInt));
    nccl.all_gather_v(gpu(mine), device_all, counts);
    mpi.all_gather_v(mine, host_all, counts);
    expect_same("all_gather_v", device_all, host_all);

    int64_t offset = 0;
    for (int k = 0; k < r(); ++k) offset += counts[static_cast<size_t>(k)];
    auto in_place = gpu(torch::zeros({total}, torch::kInt));
    in_place.narrow(0, offset, own).copy_(gpu(mine));
    nccl.all_gather_v(in_place.narrow(0, offset, own), in_place, counts);
    expect_same("all_gather_v in place", in_place, host_all);
  }

  void broadcast_send_recv_barrier() {
    const int root = n() - 1;
    auto host = data(77, torch::kByte);
    auto device_tensor = gpu(host);
    nccl.broadcast(device_tensor, root);
    mpi.broadcast(host, root);
    expect_same("broadcast", device_tensor, host);

    if (n() > 1) {
      // A ring, even ranks sending first (blocking sends on both backends).
      const int right = (r() + 1) % n(), left = (r() + n() - 1) % n();
      auto out = data(4096, torch::kFloat);
      auto host_in = torch::empty({4096}, torch::kFloat);
      auto device_in = gpu(torch::zeros({4096}, torch::kFloat));
      if (r() % 2 == 0) {
        nccl.send(gpu(out), right, 0);
        nccl.recv(device_in, left, 0);
        mpi.send(out, right, 0);
        mpi.recv(host_in, left, 0);
      } else {
        nccl.recv(device_in, left, 0);
        nccl.send(gpu(out), right, 0);
        mpi.recv(host_in, left, 0);
        mpi.send(out, right, 0);
      }
      expect_same("send/recv", device_in, host_in);
    }
    nccl.barrier();
    {
      for (const auto op : {comm::Reduce::sum, comm::Reduce::max, comm::Reduce::min}) {
        std::vector<double> from_nccl{r() + 0.25, -1.0 * r(), 3.0}, from_mpi = from_nccl;
        nccl.reduce_numbers(from_nccl, op);
        mpi.reduce_numbers(from_mpi, op);
        expect_same("reduce_numbers", torch::tensor(from_nccl, torch::kDouble), torch::tensor(from_mpi, torch::kDouble));
      }
    }
    ++checks;
  }
};

// Whether this rank should skip, with the reason; every rank then skips if any does.
std::string skip_reason(const comm::World& world, int* device) {
  if (!torch::cuda::is_available()) return "no CUDA device visible";
  const int visible = static_cast<int>(torch::cuda::device_count());
  comm::PlacementQuery query;
  query.requested = "cuda";
  query.local_rank = world.local_rank;
  query.local_size = world.local_size;
  query.visible_devices = visible;
  query.host = world.host;
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES")) query.cuda_visible_devices = std::string(env);
  const comm::Placement placement = comm::place_device(query);
  if (!placement.ok()) return placement.error;
  *device = placement.cuda_index;
  // One visible device per rank is fine only if it is not the same one (NCCL refuses that).
  char bus_id[64] = {0};
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), *device));
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(world.comm, MPI_COMM_TYPE_SHARED, world.rank, MPI_INFO_NULL, &node));
  std::vector<char> all(static_cast<size_t>(world.local_size) * sizeof(bus_id));
  MPI_CHECK(MPI_Allgather(bus_id, sizeof(bus_id), MPI_CHAR, all.data(), sizeof(bus_id), MPI_CHAR, node));
  MPI_CHECK(MPI_Comm_free(&node));
  for (int k = 0; k < world.local_size; ++k)
    if (k != world.local_rank && std::string(&all[static_cast<size_t>(k) * sizeof(bus_id)]) == bus_id)
      return "local ranks " + std::to_string(k) + " and " + std::to_string(world.local_rank) + " share GPU " + bus_id;
  return "";
}

int run() {
  const auto world = comm::World::from(MPI_COMM_WORLD);
  int device = -1;
  const std::string why = skip_reason(world, &device);
  const int mine = why.empty() ? 0 : 1;
  int any = 0;
  MPI_CHECK(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, world.comm));
  if (any) {
    if (mine) std::printf("%s: skipped: %s\n", who().c_str(), why.c_str());
    return kSkip;
  }
  CUDA_CHECK(cudaSetDevice(device));

  comm::MpiCommunicator mpi(world.comm);
  comm::NcclCommunicator nccl(world.comm, 60.0);
  Probe probe(mpi, nccl, device);
  probe.all_reduce(torch::kFloat, torch::kFloat);
  probe.all_reduce(torch::kDouble, torch::kDouble);
  probe.all_reduce(torch::kInt, torch::kInt);
  probe.all_reduce(torch::kLong, torch::kLong);
  probe.all_reduce(torch::kHalf, torch::kFloat);
  probe.all_reduce(torch::kBFloat16, torch::kFloat);
  probe.all_reduce_async();
  probe.reduce_scatter_and_all_gather();
  probe.uneven();
  probe.broadcast_send_recv_barrier();

  int failures = 0;
  MPI_CHECK(MPI_Allreduce(&probe.failures, &failures, 1, MPI_INT, MPI_SUM, world.comm));
  if (world.rank == 0)
    std::printf("nccl_collectives: %d checks on %d rank(s), NCCL %s: %s\n", probe.checks, world.size,
                comm::NcclCommunicator::library_version().c_str(),
                failures == 0 ? "NCCL and MPI agree" : "FAILED");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiSession mpi(&argc, &argv);
  try {
    return run();
  } catch (const std::exception& e) {
    // A fault on one rank: the others may be inside a collective, so end them all.
    std::fprintf(stderr, "nccl_collectives: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}
