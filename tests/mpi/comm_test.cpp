// The MPI backend of Communicator, the World and agree_or_throw, at every rank count.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "comm/backend.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/world.hpp"
#include "core/error.hpp"
#include "parallel/topology.hpp"

using namespace trident;

namespace {
struct Ranks {
  comm::MpiCommunicator comm{MPI_COMM_WORLD};
  int r = comm.rank(), n = comm.size();
};
}  // namespace

TEST(Communicator, AllReduceSum) {
  Ranks w;
  auto t = torch::arange(10, torch::kFloat) * (w.r + 1);
  w.comm.all_reduce_sum(t);
  const double factor = w.n * (w.n + 1) / 2.0;
  EXPECT_TRUE(torch::equal(t, torch::arange(10, torch::kFloat) * factor));
  auto a = torch::full({1000}, static_cast<double>(w.r), torch::kDouble);
  auto work = w.comm.all_reduce_sum_async(a);
  work->wait();
  EXPECT_DOUBLE_EQ(a[999].item<double>(), w.n * (w.n - 1) / 2.0);
}

// Host numbers (the flags, timings and totals a run agrees on): sum, max and min over the ranks,
// every rank getting the result; one number or several at once.
TEST(Communicator, ReduceNumbers) {
  Ranks w;
  std::vector<double> values{static_cast<double>(w.r), 1.0, -static_cast<double>(w.r)};
  w.comm.reduce_numbers(values, comm::Reduce::sum);
  EXPECT_EQ(values, (std::vector<double>{w.n * (w.n - 1) / 2.0, static_cast<double>(w.n), -w.n * (w.n - 1) / 2.0}));
  EXPECT_EQ(w.comm.reduce_number(static_cast<double>(w.r), comm::Reduce::max), w.n - 1.0);
  EXPECT_EQ(w.comm.reduce_number(static_cast<double>(w.r) + 0.5, comm::Reduce::min), 0.5);
}

TEST(Communicator, ReduceScatterAndAllGather) {
  Ranks w;
  // Rank r contributes input[i] = i + r; chunk k of the sum is sum_r (i + r) over chunk k.
  const int64_t chunk = 3;
  auto input = torch::arange(chunk * w.n, torch::kFloat) + w.r;
  auto out = torch::empty({chunk}, torch::kFloat);
  w.comm.reduce_scatter_sum(input, out);
  auto expected = (torch::arange(chunk * w.n, torch::kFloat) * w.n + w.n * (w.n - 1) / 2.0).narrow(0, w.r * chunk, chunk);
  EXPECT_TRUE(torch::equal(out, expected));

  auto mine = torch::full({2}, static_cast<float>(w.r), torch::kFloat);
  auto gathered = torch::empty({2 * w.n}, torch::kFloat);
  w.comm.all_gather(mine, gathered);
  for (int k = 0; k < w.n; ++k) EXPECT_EQ(gathered[2 * k + 1].item<float>(), static_cast<float>(k));
}

TEST(Communicator, BroadcastAndSendRecv) {
  Ranks w;
  auto t = w.r == 0 ? torch::arange(5, torch::kLong) : torch::zeros({5}, torch::kLong);
  w.comm.broadcast(t, 0);
  EXPECT_TRUE(torch::equal(t, torch::arange(5, torch::kLong)));
  if (w.n < 2) return;
  // A ring: send to the right, receive from the left.
  auto send = torch::full({4}, static_cast<float>(w.r), torch::kFloat);
  auto recv = torch::empty({4}, torch::kFloat);
  if (w.r % 2 == 0) {
    w.comm.send(send, (w.r + 1) % w.n, 7);
    w.comm.recv(recv, (w.r + w.n - 1) % w.n, 7);
  } else {
    w.comm.recv(recv, (w.r + w.n - 1) % w.n, 7);
    w.comm.send(send, (w.r + 1) % w.n, 7);
  }
  EXPECT_EQ(recv[0].item<float>(), static_cast<float>((w.r + w.n - 1) % w.n));
}

// Replicas built from one seed are compared, not broadcast; a rank whose values differ gets
// rank 0's, in every tensor, and every rank learns that it happened.
TEST(Communicator, MakeIdenticalBroadcastsOnlyWhenARankDiffers) {
  Ranks w;
  std::vector<at::Tensor> same{torch::arange(5, torch::kFloat), torch::ones({2, 3}, torch::kLong)};
  EXPECT_FALSE(comm::make_identical(w.comm, same));
  EXPECT_TRUE(torch::equal(same[0], torch::arange(5, torch::kFloat)));
  std::vector<at::Tensor> differ{torch::arange(5, torch::kFloat), torch::ones({2, 3}, torch::kLong)};
  if (w.n > 1 && w.r == w.n - 1) differ[0][3] = std::nextafter(3.0f, 4.0f);  // one ulp more on the last rank
  EXPECT_EQ(comm::make_identical(w.comm, differ), w.n > 1);
  EXPECT_TRUE(torch::equal(differ[0], torch::arange(5, torch::kFloat)));
  EXPECT_TRUE(torch::equal(differ[1], torch::ones({2, 3}, torch::kLong)));
}

// What ZeRO-3's partitioned build compares (the hash of what each rank drew): any one rank's
// value differing, in either 32-bit half, is seen by every rank.
TEST(Communicator, SameOnEveryRankSeesAnyRankDiffer) {
  Ranks w;
  EXPECT_TRUE(comm::same_on_every_rank(w.comm, 0xfedcba9876543210ULL));
  for (const uint64_t flip : {uint64_t{1}, uint64_t{1} << 40}) {
    const uint64_t mine = 0xfedcba9876543210ULL ^ (w.n > 1 && w.r == w.n - 1 ? flip : 0);
    EXPECT_EQ(comm::same_on_every_rank(w.comm, mine), w.n == 1) << "flip " << flip;
  }
}

TEST(Backend, FactoryMakesTheBackendsThisBuildHas) {
  Ranks w;
  const auto mpi = comm::make_communicator("mpi", MPI_COMM_WORLD, 30.0);
  EXPECT_EQ(mpi->backend(), "mpi");
  EXPECT_EQ(mpi->rank(), w.r);
  EXPECT_EQ(mpi->size(), w.n);
  EXPECT_THROW(comm::make_communicator("gloo", MPI_COMM_WORLD, 30.0), BadInput);
  if (comm::nccl_backend_built()) return;  // creating one needs a GPU per rank: tests/gpu
  EXPECT_EQ(comm::nccl_version(), "");
  try {
    comm::make_communicator("nccl", MPI_COMM_WORLD, 30.0);
    ADD_FAILURE() << "the NCCL backend was made in a build without it";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("built without the NCCL backend"), std::string::npos) << e.what();
  }
}

TEST(World, RanksNodesAndLocalRanks) {
  const auto world = comm::World::from(MPI_COMM_WORLD);
  EXPECT_GE(world.node_count, 1);
  EXPECT_EQ(static_cast<int>(world.node_names.size()), world.node_count);
  EXPECT_LT(world.local_rank, world.local_size);
  int total_local = 0;
  const int one = world.local_rank == 0 ? world.local_size : 0;
  MPI_Allreduce(&one, &total_local, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(total_local, world.size);  // node sizes add up to the world
}

// Every rank gets the lowest failing rank's message; met by some ranks only (a node's own copy of
// a file), it names that rank; met by all, or by rank 0 alone (most often a check only rank 0
// makes), it is as given.
TEST(World, AgreeOrThrowGivesEveryRankTheLowestFailingRanksMessage) {
  Ranks w;
  EXPECT_NO_THROW(comm::agree_or_throw(MPI_COMM_WORLD, ""));
  const auto agreed = [](const std::string& mine) {
    try {
      comm::agree_or_throw(MPI_COMM_WORLD, mine);
    } catch (const BadInput& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "expected BadInput";
    return std::string();
  };
  const std::string last = agreed(w.r == w.n - 1 ? "last rank saw a problem" : "");
  if (w.n == 1) {
    EXPECT_EQ(last, "last rank saw a problem");
  } else {
    EXPECT_EQ(last.rfind("last rank saw a problem (met by rank " + std::to_string(w.n - 1) + " on ", 0), 0u) << last;
  }
  EXPECT_EQ(agreed(w.r == 0 ? "rank 0 saw a problem" : ""), "rank 0 saw a problem");
  EXPECT_EQ(agreed("every rank saw it"), "every rank saw it");
  if (w.n > 2) {
    const std::string some = agreed(w.r >= 1 ? "ranks from 1 saw it" : "");
    EXPECT_EQ(some.rfind("ranks from 1 saw it (met by rank 1 on ", 0), 0u) << some;
    EXPECT_NE(some.find(" and others)"), std::string::npos) << some;
    const std::string with_rank0 = agreed(w.r != 1 ? "all but rank 1 saw it" : "");
    EXPECT_EQ(with_rank0.rfind("all but rank 1 saw it (met by rank 0 on ", 0), 0u) << with_rank0;
  }
}

// Ranks that must read the same file compare with what most of them read: the odd one out is
// named, rank 0 included; a tie goes to rank 0's; a rank that read nothing ("") does not count.
TEST(World, DiffersFromMostNamesTheOddOneOut) {
  Ranks w;
  EXPECT_EQ(comm::differs_from_most(MPI_COMM_WORLD, "A", "file"), "");
  EXPECT_EQ(comm::differs_from_most(MPI_COMM_WORLD, w.r == 0 ? "" : "A", "file"), "");
  if (w.n == 1) return;
  // The last rank alone differs: named against rank 0 and the others.
  const std::string last = comm::differs_from_most(MPI_COMM_WORLD, w.r == w.n - 1 ? "B" : "A", "file");
  if (w.r == w.n - 1) {
    const std::string others = w.n == 2 ? "" : " and " + std::to_string(w.n - 2) + " more rank" + (w.n > 3 ? "s" : "");
    EXPECT_EQ(last.rfind("rank " + std::to_string(w.r) + " on ", 0), 0u) << last;
    EXPECT_NE(last.find(" reads a different file than rank 0" + others + " (rank 0: A; here: B)"), std::string::npos)
        << last;
  } else {
    EXPECT_EQ(last, "");
  }
  if (w.n < 3) return;
  // Rank 0 alone differs: it is the one named, against rank 1 and the rest.
  const std::string first = comm::differs_from_most(MPI_COMM_WORLD, w.r == 0 ? "B" : "A", "file");
  if (w.r == 0) {
    EXPECT_NE(first.find(" reads a different file than rank 1 and " + std::to_string(w.n - 2) + " more rank"),
              std::string::npos)
        << first;
    EXPECT_NE(first.find("(rank 1: A; here: B)"), std::string::npos) << first;
  } else {
    EXPECT_EQ(first, "");
  }
  if (w.n != 4) return;
  // Two against two: rank 0's half is the reference.
  const std::string tie = comm::differs_from_most(MPI_COMM_WORLD, w.r < 2 ? "A" : "B", "file");
  if (w.r < 2)
    EXPECT_EQ(tie, "");
  else
    EXPECT_NE(tie.find("than rank 0 and 1 more rank (rank 0: A; here: B)"), std::string::npos) << tie;
}

TEST(Topology, StageMajorMapping) {
  Ranks w;
  for (int pp : {1, 2}) {
    if (w.n % pp != 0) continue;
    parallel::Topology topo(MPI_COMM_WORLD, parallel::RankGrid{w.n / pp, pp});
    EXPECT_EQ(topo.grid().rank_of(topo.stage(), topo.dp_rank()), w.r);
    EXPECT_EQ(topo.stage(), w.r / (w.n / pp));
    int dp_size = 0, pp_size = 0;
    MPI_Comm_size(topo.dp_group(), &dp_size);
    MPI_Comm_size(topo.pp_group(), &pp_size);
    EXPECT_EQ(dp_size, w.n / pp);
    EXPECT_EQ(pp_size, pp);
  }
}

TEST(Communicator, UnevenReduceScatterAndAllGather) {
  Ranks w;
  // Rank r owns r + 1 elements (rank 0 one, ...); some ranks may own none.
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (int k = 0; k < w.n; ++k) {
    counts.push_back(k == 1 ? 0 : k + 1);
    total += counts.back();
  }
  auto input = torch::arange(total, torch::kFloat) * (w.r + 1);
  auto out = torch::empty({counts[static_cast<size_t>(w.r)]}, torch::kFloat);
  w.comm.reduce_scatter_sum_v(input, out, counts);
  int64_t offset = 0;
  for (int k = 0; k < w.r; ++k) offset += counts[static_cast<size_t>(k)];
  const double factor = w.n * (w.n + 1) / 2.0;
  EXPECT_TRUE(torch::equal(out, torch::arange(total, torch::kFloat).narrow(0, offset, out.numel()) * factor));

  // In place: each rank's piece already sits in the output.
  auto full = torch::full({total}, -1.0f);
  full.narrow(0, offset, out.numel()).fill_(static_cast<float>(w.r));
  w.comm.all_gather_v(full.narrow(0, offset, out.numel()), full, counts);
  int64_t at = 0;
  for (int k = 0; k < w.n; ++k)
    for (int64_t i = 0; i < counts[static_cast<size_t>(k)]; ++i) EXPECT_EQ(full[at++].item<float>(), static_cast<float>(k));

  // Left in flight while the caller computes (ZeRO-3's prefetch), from a separate input, then
  // completed: the same result as the blocking gather.
  auto gathered = torch::full({total}, -1.0f);
  const auto mine = torch::full({counts[static_cast<size_t>(w.r)]}, static_cast<float>(w.r));
  auto work = w.comm.all_gather_v_async(mine, gathered, counts);
  const auto busy = torch::mm(torch::ones({64, 64}), torch::ones({64, 64}));
  work->wait();
  EXPECT_TRUE(torch::equal(gathered, full));
  EXPECT_EQ(busy[0][0].item<float>(), 64.0f);
}

// What a GPU rank's tensors take through the MPI backend (several ranks sharing one GPU): a
// host copy in, the MPI call, the result copied back. Forced on CPU tensors here, every call's
// result must equal the direct one's, bit for bit, with uneven pieces and the in-place gather.
TEST(Communicator, HostStagingGivesTheDirectResults) {
  Ranks w;
  comm::MpiCommunicator staged(MPI_COMM_WORLD, /*stage_through_host=*/true);
  torch::manual_seed(100 + w.r);
  auto same = [](const torch::Tensor& a, const torch::Tensor& b, const char* what) {
    EXPECT_TRUE(torch::equal(a, b)) << what << " differs when staged";
  };
  {
    auto direct = torch::randn({1001});
    auto through = direct.clone();
    w.comm.all_reduce_sum(direct);
    staged.all_reduce_sum(through);
    same(direct, through, "all_reduce_sum");
    auto direct_async = torch::randn({333}, torch::kDouble), through_async = direct_async.clone();
    w.comm.all_reduce_sum_async(direct_async)->wait();
    auto work = staged.all_reduce_sum_async(through_async);
    work->wait();
    same(direct_async, through_async, "all_reduce_sum_async");
  }
  {
    auto input = torch::randn({5 * w.n});
    auto direct = torch::empty({5}), through = torch::full({5}, -7.0f);
    w.comm.reduce_scatter_sum(input, direct);
    staged.reduce_scatter_sum(input, through);
    same(direct, through, "reduce_scatter_sum");
    auto gathered_direct = torch::empty({5 * w.n}), gathered_through = torch::empty({5 * w.n});
    w.comm.all_gather(direct, gathered_direct);
    staged.all_gather(through, gathered_through);
    same(gathered_direct, gathered_through, "all_gather");
  }
  {
    std::vector<int64_t> counts;
    int64_t total = 0;
    for (int k = 0; k < w.n; ++k) total += counts.emplace_back(k == 1 ? 0 : 2 * k + 3);
    int64_t offset = 0;
    for (int k = 0; k < w.r; ++k) offset += counts[static_cast<size_t>(k)];
    const int64_t own = counts[static_cast<size_t>(w.r)];
    auto input = torch::randn({total});
    auto direct = torch::empty({own}), through = torch::empty({own});
    w.comm.reduce_scatter_sum_v(input, direct, counts);
    staged.reduce_scatter_sum_v(input, through, counts);
    same(direct, through, "reduce_scatter_sum_v");
    auto full_direct = torch::full({total}, -1.0f), full_through = torch::full({total}, -1.0f);
    full_direct.narrow(0, offset, own).copy_(direct);
    full_through.narrow(0, offset, own).copy_(through);
    w.comm.all_gather_v(full_direct.narrow(0, offset, own), full_direct, counts);  // in place
    staged.all_gather_v(full_through.narrow(0, offset, own), full_through, counts);
    same(full_direct, full_through, "all_gather_v in place");
    auto async_through = torch::full({total}, -2.0f);
    auto work = staged.all_gather_v_async(through, async_through, counts);
    work->wait();
    same(full_direct, async_through, "all_gather_v_async");
  }
  {
    auto direct = w.r == 0 ? torch::randn({17}) : torch::zeros({17});
    auto through = w.r == 0 ? direct.clone() : torch::ones({17});
    w.comm.broadcast(direct, 0);
    staged.broadcast(through, 0);
    same(direct, through, "broadcast");
  }
  if (w.n >= 2) {  // a ring, as the pipeline uses send_async + recv
    const auto payload = torch::full({9}, static_cast<float>(w.r));
    auto received = torch::empty({9});
    auto work = staged.send_async(payload, (w.r + 1) % w.n, 3);
    staged.recv(received, (w.r + w.n - 1) % w.n, 3);
    work->wait();
    same(received, torch::full({9}, static_cast<float>((w.r + w.n - 1) % w.n)), "send_async/recv");
  }
}

// bf16 and fp16 tensors through the MPI backend: moved as 16-bit words, summed by trident's own
// MPI operators (in fp32, rounded back). Small integers keep every partial sum exact in both
// formats, so the result must equal the fp32 sum of the same values, in any reduction order.
TEST(Communicator, Bf16AndFp16SumAndMove) {
  for (const auto type : {torch::kBFloat16, torch::kHalf}) {
    Ranks w;
    comm::MpiCommunicator staged(MPI_COMM_WORLD, true);
    const auto values = (torch::arange(64) % 5 + w.r).to(torch::kFloat);
    auto expected = values.clone();
    w.comm.all_reduce_sum(expected);
    for (auto* c : {&w.comm, &staged}) {
      auto t = values.to(type);
      c->all_reduce_sum(t);
      EXPECT_EQ(t.scalar_type(), type);
      EXPECT_TRUE(torch::equal(t.to(torch::kFloat), expected)) << c10::toString(type) << " all_reduce_sum";
      auto piece = torch::empty({64 / w.n}, type);
      if (64 % w.n == 0) {
        c->reduce_scatter_sum(values.to(type), piece);
        EXPECT_TRUE(torch::equal(piece.to(torch::kFloat), expected.narrow(0, w.r * (64 / w.n), 64 / w.n)))
            << c10::toString(type) << " reduce_scatter_sum";
      }
      auto b = w.r == 0 ? torch::tensor({1.5f, -2.25f, 1e-3f}).to(type) : torch::zeros({3}, type);
      c->broadcast(b, 0);
      EXPECT_TRUE(torch::equal(b, torch::tensor({1.5f, -2.25f, 1e-3f}).to(type))) << c10::toString(type) << " broadcast";
    }
  }
}
