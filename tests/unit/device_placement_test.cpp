// run.device -> cpu or cuda:<index>, from the node-local rank, the ranks on the node and the
// devices the CUDA runtime sees (comm/device_placement.hpp).
#include "comm/device_placement.hpp"

#include <gtest/gtest.h>

using trident::comm::choose_backend;
using trident::comm::describe_cuda_visible_devices;
using trident::comm::parse_cuda_visible_devices;
using trident::comm::place_device;
using trident::comm::Placement;
using trident::comm::PlacementQuery;
using trident::comm::ranks_sharing_a_gpu;

namespace {
PlacementQuery query(const std::string& requested, int local_rank, int local_size, int visible,
                     std::optional<std::string> env = std::nullopt) {
  PlacementQuery q;
  q.requested = requested;
  q.local_rank = local_rank;
  q.local_size = local_size;
  q.visible_devices = visible;
  q.host = "gpu07";
  q.cuda_visible_devices = std::move(env);
  return q;
}
}  // namespace

TEST(DevicePlacement, CpuRequestedStaysOnCpuEvenWithGpus) {
  const Placement p = place_device(query("cpu", 1, 4, 4));
  EXPECT_TRUE(p.ok());
  EXPECT_FALSE(p.is_cuda());
  EXPECT_EQ(p.device, "cpu");
  EXPECT_EQ(p.cuda_index, -1);
}

TEST(DevicePlacement, AutoWithoutDevicesFallsBackToCpu) {
  const Placement p = place_device(query("auto", 2, 4, 0));
  EXPECT_TRUE(p.ok()) << p.error;
  EXPECT_EQ(p.device, "cpu");
  EXPECT_FALSE(p.is_cuda());
}

TEST(DevicePlacement, CudaWithoutDevicesIsAnErrorNamingTheNodeAndTheVariable) {
  const Placement p = place_device(query("cuda", 0, 2, 0, std::string("-1")));
  EXPECT_FALSE(p.ok());
  EXPECT_NE(p.error.find("run.device = cuda"), std::string::npos) << p.error;
  EXPECT_NE(p.error.find("gpu07"), std::string::npos) << p.error;
  EXPECT_NE(p.error.find("CUDA_VISIBLE_DEVICES=-1"), std::string::npos) << p.error;
}

TEST(DevicePlacement, OneVisibleDeviceIsUsedWhateverTheLocalRank) {
  // SLURM --gpus-per-task=1: each of the 4 tasks on the node sees only its own GPU as device 0.
  for (int local_rank = 0; local_rank < 4; ++local_rank) {
    for (const char* requested : {"auto", "cuda"}) {
      const Placement p = place_device(query(requested, local_rank, 4, 1, std::to_string(local_rank)));
      EXPECT_TRUE(p.ok()) << p.error;
      EXPECT_EQ(p.device, "cuda:0");
      EXPECT_EQ(p.cuda_index, 0);
    }
  }
}

TEST(DevicePlacement, EnoughDevicesGiveEachRankItsLocalRank) {
  for (int local_rank = 0; local_rank < 4; ++local_rank) {
    const Placement p = place_device(query("auto", local_rank, 4, 4));
    EXPECT_TRUE(p.ok()) << p.error;
    EXPECT_EQ(p.cuda_index, local_rank);
    EXPECT_EQ(p.device, "cuda:" + std::to_string(local_rank));
  }
  // More devices than ranks: the first ones, by local rank.
  const Placement p = place_device(query("cuda", 1, 2, 8));
  EXPECT_EQ(p.device, "cuda:1");
}

TEST(DevicePlacement, FewerDevicesThanRanksIsAnErrorNamingBothNumbers) {
  for (const char* requested : {"auto", "cuda"}) {
    const Placement p = place_device(query(requested, 3, 4, 2, std::string("0,1")));
    EXPECT_FALSE(p.ok());
    EXPECT_FALSE(p.is_cuda());
    EXPECT_NE(p.error.find("4 ranks on node gpu07 share 2 visible GPUs"), std::string::npos) << p.error;
    EXPECT_NE(p.error.find("CUDA_VISIBLE_DEVICES=0,1"), std::string::npos) << p.error;
    EXPECT_NE(p.error.find("run one rank per GPU"), std::string::npos) << p.error;
  }
  const Placement unset = place_device(query("auto", 0, 8, 3));
  EXPECT_NE(unset.error.find("8 ranks on node gpu07 share 3 visible GPUs (CUDA_VISIBLE_DEVICES unset)"),
            std::string::npos)
      << unset.error;
}

TEST(DevicePlacement, BadRequestsAndNumbersAreErrors) {
  EXPECT_NE(place_device(query("gpu", 0, 1, 1)).error.find("'gpu' is not one of auto | cpu | cuda"), std::string::npos);
  EXPECT_FALSE(place_device(query("auto", 4, 4, 4)).ok());  // local rank out of range
  EXPECT_FALSE(place_device(query("auto", 0, 0, 1)).ok());
  EXPECT_FALSE(place_device(query("auto", 0, 1, -1)).ok());
}

TEST(CudaVisibleDevices, ParsesIndicesAndUuidsUpToTheFirstHidingEntry) {
  EXPECT_EQ(parse_cuda_visible_devices("0,1,3"), (std::vector<std::string>{"0", "1", "3"}));
  EXPECT_EQ(parse_cuda_visible_devices(" 2 , 5 "), (std::vector<std::string>{"2", "5"}));
  EXPECT_EQ(parse_cuda_visible_devices("GPU-8f6e2c1a,MIG-1b2c"), (std::vector<std::string>{"GPU-8f6e2c1a", "MIG-1b2c"}));
  EXPECT_EQ(parse_cuda_visible_devices("0,-1,1"), (std::vector<std::string>{"0"}));
  EXPECT_EQ(parse_cuda_visible_devices("1,,2"), (std::vector<std::string>{"1"}));
  EXPECT_TRUE(parse_cuda_visible_devices("").empty());
  EXPECT_TRUE(parse_cuda_visible_devices("-1").empty());
  EXPECT_EQ(parse_cuda_visible_devices("3,").size(), 1u);
}

TEST(CudaVisibleDevices, DescribesSetAndUnset) {
  EXPECT_EQ(describe_cuda_visible_devices(std::string("0,1")), "CUDA_VISIBLE_DEVICES=0,1");
  EXPECT_EQ(describe_cuda_visible_devices(std::string("")), "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(describe_cuda_visible_devices(std::nullopt), "CUDA_VISIBLE_DEVICES unset");
}

TEST(SharedGpu, FoundByIdentifierNamingBothRanksAndTheHost) {
  EXPECT_EQ(ranks_sharing_a_gpu({"GPU-a", "GPU-b"}, {4, 5}, "n1"), "");
  EXPECT_EQ(ranks_sharing_a_gpu({"", ""}, {0, 1}, "n1"), "");  // on the CPU nothing is shared
  EXPECT_EQ(ranks_sharing_a_gpu({"GPU-a", "GPU-b", "GPU-a"}, {4, 5, 6}, "n1"),
            "ranks 4 and 6 on n1 share one GPU (GPU-a)");
  EXPECT_EQ(ranks_sharing_a_gpu({"GPU-a"}, {0}, ""), "");
}

TEST(SharedGpu, AutoTakesMpiAndSaysWhyNcclRequestedIsAnError) {
  const std::string sharing = "ranks 0 and 1 on n1 share one GPU (GPU-a)";
  EXPECT_EQ(choose_backend("auto", false, "").backend, "mpi");
  const auto gpus = choose_backend("auto", true, "");
  EXPECT_EQ(gpus.backend, "nccl");
  EXPECT_TRUE(gpus.note.empty() && gpus.error.empty());
  const auto shared = choose_backend("auto", true, sharing);
  EXPECT_EQ(shared.backend, "mpi");
  EXPECT_TRUE(shared.error.empty());
  EXPECT_NE(shared.note.find(sharing), std::string::npos) << shared.note;
  const auto refused = choose_backend("nccl", true, sharing);
  EXPECT_NE(refused.error.find("parallel.backend = nccl: " + sharing), std::string::npos) << refused.error;
  EXPECT_NE(refused.error.find("parallel.backend = mpi"), std::string::npos) << refused.error;
  EXPECT_TRUE(choose_backend("nccl", true, "").error.empty());
  EXPECT_TRUE(choose_backend("mpi", true, sharing).error.empty());
  EXPECT_EQ(choose_backend("mpi", true, sharing).backend, "mpi");
}
