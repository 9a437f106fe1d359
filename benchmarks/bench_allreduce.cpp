// Gradient all-reduce of trident's DDP (GradSync over the model's flat gradient buckets)
// against a raw MPI_Allreduce of the same bytes, in the same run, interleaved.
//   mpiexec -n 2 trident_bench_allreduce [--iters N] [--json FILE]
// Bandwidth as nccl-tests defines it: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n.
#include <mpi.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "comm/world.hpp"
#include "config/deck.hpp"
#include "model/model.hpp"
#include "optim/flat_params.hpp"
#include "parallel/grad_sync.hpp"

using namespace trident;

namespace {

struct Case {
  std::string label, kind, hidden;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds of `op` on the slowest rank, after a barrier (so all ranks start together).
template <typename Op>
double timed(Op op) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  op();
  double local = MPI_Wtime() - start, slowest = 0;
  MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiSession mpi(&argc, &argv);
  const auto world = comm::World::from(MPI_COMM_WORLD);
  int iters = 100;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
  }
  torch::set_num_threads(1);
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  const std::vector<Case> cases{{"cnn (Fashion-MNIST)", "cnn", ""},
                                {"mlp 1024x1024", "mlp", "1024,1024"},
                                {"mlp 4096x4096", "mlp", "4096,4096"}};
  const double bus_factor = 2.0 * (world.size - 1) / world.size;

  if (world.rank == 0) {
    std::printf("gradient all-reduce, %d ranks on %d node(s); median of %d, interleaved\n", world.size,
                world.node_count, iters);
    std::printf("%-20s %12s %8s %12s %12s %12s %12s %8s\n", "model", "bytes", "buckets", "raw_ms", "trident_ms",
                "raw_busbw", "trident_busbw", "ratio");
  }
  std::string json = "{\"ranks\": " + std::to_string(world.size) + ", \"results\": [";
  for (size_t c = 0; c < cases.size(); ++c) {
    config::Deck deck;
    deck.model.kind = cases[c].kind;
    deck.model.hidden = cases[c].hidden.empty() ? deck.model.hidden : cases[c].hidden;
    auto model = model::build(deck, {{1, 28, 28}, 10});
    optim::FlatParams flat(*model, torch::kCPU);
    auto ddp = parallel::make_ddp(flat, comm, deck.parallel.bucket_mb);
    at::Tensor raw = torch::ones_like(flat.grads);
    const double bytes = static_cast<double>(flat.grads.numel() * 4);

    std::vector<double> raw_times, ddp_times;
    for (int i = 0; i < iters + 3; ++i) {
      const double r = timed([&] {
        MPI_Allreduce(MPI_IN_PLACE, raw.data_ptr(), static_cast<int>(raw.numel()), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      });
      const int64_t before = ddp->buckets_launched();
      const double d = timed([&] {
        ddp->before_backward(true);
        ddp->finish();
      });
      const int64_t buckets = ddp->buckets_launched() - before;
      if (i >= 3) {  // warm-up excluded
        raw_times.push_back(r);
        ddp_times.push_back(d);
      }
      if (i == 0 && world.size > 1 && buckets < 1) std::fprintf(stderr, "no bucket was reduced\n");
    }
    const int64_t bucket_count = ddp->buckets_launched() / (iters + 3);
    const double raw_s = median(raw_times), ddp_s = median(ddp_times);
    const double raw_bw = bytes / raw_s * bus_factor / 1e9, ddp_bw = bytes / ddp_s * bus_factor / 1e9;
    if (world.rank == 0)
      std::printf("%-20s %12.0f %8ld %12.3f %12.3f %10.2f GB/s %10.2f GB/s %7.1f%%\n", cases[c].label.c_str(), bytes,
                  static_cast<long>(bucket_count), raw_s * 1e3, ddp_s * 1e3, raw_bw, ddp_bw, 100.0 * raw_s / ddp_s);
    json += std::string(c ? ", " : "") + "{\"model\": \"" + cases[c].label + "\", \"bytes\": " +
            std::to_string(static_cast<int64_t>(bytes)) + ", \"buckets\": " + std::to_string(bucket_count) +
            ", \"raw_s\": " + std::to_string(raw_s) + ", \"trident_s\": " + std::to_string(ddp_s) +
            ", \"raw_busbw_gbs\": " + std::to_string(raw_bw) + ", \"trident_busbw_gbs\": " + std::to_string(ddp_bw) +
            ", \"trident_over_raw\": " + std::to_string(raw_s / ddp_s) + "}";
  }
  json += "]}\n";
  if (world.rank == 0 && !json_path.empty()) std::ofstream(json_path) << json;
  return 0;
}
