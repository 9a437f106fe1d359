// The memory a rank may use (core/memory_limit) read from imitations of /proc and /sys/fs/cgroup
// as SLURM's cgroup plugin (v1 and v2) and a container lay them out, the verdict on ranks that
// share a limit (train/memory_check), and the budget host allocations are checked against while
// the model is built (train/host_memory_budget).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sys/stat.h>

#include <fstream>

#include "core/memory_limit.hpp"
#include "scratch_folder.hpp"
#include "train/host_memory_budget.hpp"
#include "train/memory_check.hpp"

namespace {

using trident::host_memory_limit;
using trident::train::memory_shortfall;
using trident::train::MemoryClaim;

constexpr int64_t kMiB = 1 << 20;

class HostMemoryLimitTest : public ScratchFolderTest {
 protected:
  void write(const std::string& path, const std::string& text) {
    const auto file = dir_ / path.substr(1);
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text;
  }
  std::string root() const { return dir_.string(); }
  // How host_memory_limit names a cgroup folder: its device and inode.
  std::string identity(const std::string& folder) const {
    struct stat st {};
    EXPECT_EQ(::stat((dir_.string() + folder).c_str(), &st), 0) << folder;
    return "cgroup " + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  }
};

TEST_F(HostMemoryLimitTest, SlurmCgroupV1TakesTheTightestAncestorAndIgnoresUnlimited) {
  const std::string step = "/sys/fs/cgroup/memory/slurm/uid_0/job_7/step_0";
  write("/proc/self/cgroup", "9:cpuset:/slurm/uid_0/job_7/step_0\n4:memory:/slurm/uid_0/job_7/step_0/task_1\n0::/\n");
  write("/proc/self/mountinfo",
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n");
  write(step + "/task_1/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "unlimited"
  write(step + "/memory.limit_in_bytes", "1073741824\n");
  write("/sys/fs/cgroup/memory/slurm/uid_0/job_7/memory.limit_in_bytes", "2147483648\n");
  write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  write("/proc/meminfo", "MemTotal:       24567890 kB\nMemFree:        20000000 kB\n");
  const auto limit = host_memory_limit(root());
  EXPECT_EQ(limit.bytes, 1073741824);
  EXPECT_EQ(limit.key, identity(step));
  EXPECT_EQ(limit.source, step + "/memory.limit_in_bytes");
}

TEST_F(HostMemoryLimitTest, CgroupV2MaxIsNoLimitAndAParentsNumberIs) {
  write("/proc/self/cgroup", "0::/system.slice/slurmstepd.scope/job_12/step_0/user/task_0\n");
  write("/proc/self/mountinfo", "30 24 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  const std::string job = "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_12";
  write(job + "/step_0/user/task_0/memory.max", "max\n");
  write(job + "/step_0/memory.max", "max\n");
  write(job + "/memory.max", "536870912\n");
  write("/proc/meminfo", "MemTotal:       24567890 kB\n");
  const auto limit = host_memory_limit(root());
  EXPECT_EQ(limit.bytes, 512 * kMiB);
  EXPECT_EQ(limit.key, identity(job));
  EXPECT_EQ(limit.source, job + "/memory.max");
}

TEST_F(HostMemoryLimitTest, AContainersCgroupMountedAtItsOwnRoot) {
  // Without a cgroup namespace the container sees its full path, mounted from that folder.
  write("/proc/self/cgroup", "0::/docker/abc123\n");
  write("/proc/self/mountinfo", "30 24 0:26 /docker/abc123 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n");
  write("/sys/fs/cgroup/memory.max", "268435456\n");
  write("/proc/meminfo", "MemTotal:       24567890 kB\n");
  const auto limit = host_memory_limit(root());
  EXPECT_EQ(limit.bytes, 256 * kMiB);
  EXPECT_EQ(limit.key, identity("/sys/fs/cgroup"));
}

TEST_F(HostMemoryLimitTest, AV1ParentWithoutUseHierarchyDoesNotLimitItsChildren) {
  write("/proc/self/cgroup", "4:memory:/outer/inner\n");
  write("/proc/self/mountinfo", "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  write("/sys/fs/cgroup/memory/outer/memory.limit_in_bytes", "268435456\n");
  write("/sys/fs/cgroup/memory/outer/memory.use_hierarchy", "0\n");
  write("/sys/fs/cgroup/memory/outer/inner/memory.limit_in_bytes", "1073741824\n");
  write("/proc/meminfo", "MemTotal:       24567890 kB\n");
  EXPECT_EQ(host_memory_limit(root()).bytes, 1073741824);
  write("/sys/fs/cgroup/memory/outer/memory.use_hierarchy", "1\n");
  EXPECT_EQ(host_memory_limit(root()).bytes, 268435456);
}

TEST_F(HostMemoryLimitTest, SwapTheGroupMayUseCountsOnTop) {
  // Past its RAM limit a group with swap swaps rather than dies: RAM 1 GiB, the node 4 GiB of swap.
  write("/proc/meminfo", "MemTotal:       24567890 kB\nSwapTotal:      4194304 kB\n");
  write("/proc/self/mountinfo", "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
                                "30 24 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
  write("/proc/self/cgroup", "4:memory:/v1job\n");
  write("/sys/fs/cgroup/memory/v1job/memory.limit_in_bytes", "1073741824\n");
  EXPECT_EQ(host_memory_limit(root()).bytes, 5LL << 30) << "v1 without swap accounting: all the node's swap";
  write("/sys/fs/cgroup/memory/v1job/memory.memsw.limit_in_bytes", "1610612736\n");
  const auto v1 = host_memory_limit(root());
  EXPECT_EQ(v1.bytes, 1610612736) << "v1 memsw: RAM and swap together";
  EXPECT_EQ(v1.source, "/sys/fs/cgroup/memory/v1job/memory.limit_in_bytes + swap");

  write("/proc/self/cgroup", "0::/v2job\n");
  write("/sys/fs/cgroup/unified/v2job/memory.max", "1073741824\n");
  write("/sys/fs/cgroup/unified/v2job/memory.swap.max", "0\n");
  EXPECT_EQ(host_memory_limit(root()).bytes, 1LL << 30) << "v2 swap.max 0: RAM only";
  write("/sys/fs/cgroup/unified/v2job/memory.swap.max", "268435456\n");
  EXPECT_EQ(host_memory_limit(root()).bytes, (1LL << 30) + (256 << 20)) << "v2: RAM + swap.max";
  write("/sys/fs/cgroup/unified/v2job/memory.swap.max", "max\n");
  EXPECT_EQ(host_memory_limit(root()).bytes, 5LL << 30) << "v2 swap.max max: all the node's swap";

  write("/proc/self/cgroup", "0::/\n");
  const auto node = host_memory_limit(root());
  EXPECT_EQ(node.bytes, 24567890LL * 1024 + (4LL << 30));
  EXPECT_EQ(node.source, "/proc/meminfo MemTotal + SwapTotal");
}

TEST_F(HostMemoryLimitTest, TheNodesMemoryWhenNoCgroupLimitIsLower) {
  write("/proc/self/cgroup", "4:memory:/big\n");
  write("/proc/self/mountinfo", "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  write("/sys/fs/cgroup/memory/big/memory.limit_in_bytes", "107374182400\n");  // 100 GiB
  write("/proc/meminfo", "MemTotal:       1000000 kB\n");
  const auto limit = host_memory_limit(root());
  EXPECT_EQ(limit.bytes, 1000000LL * 1024);
  EXPECT_EQ(limit.key, "MemTotal");
  EXPECT_EQ(limit.source, "/proc/meminfo MemTotal");
}

TEST_F(HostMemoryLimitTest, PrivateResidentMemoryIsRssAnonSharedIsRssFileAndRssShmem) {
  write("/proc/self/status",
        "Name:\ttrident\nVmRSS:\t  501000 kB\nRssAnon:\t  300000 kB\nRssFile:\t 200000 kB\nRssShmem:\t    1000 kB\n");
  EXPECT_EQ(trident::resident_anonymous_bytes(root()), 300000LL * 1024);
  EXPECT_EQ(trident::resident_memory(root()).anonymous, 300000LL * 1024);
  EXPECT_EQ(trident::resident_memory(root()).shared, 201000LL * 1024);
  EXPECT_EQ(trident::resident_anonymous_bytes(root() + "/none"), 0);
  EXPECT_EQ(trident::resident_memory(root() + "/none").anonymous, 0);
}

TEST_F(HostMemoryLimitTest, NothingReadableIsNoLimit) {
  write("/proc/self/cgroup", "garbage\n");
  EXPECT_EQ(host_memory_limit(root()).bytes, 0);
}

TEST(HostMemoryLimit, ThisMachineHasOne) {
  const auto limit = host_memory_limit();
  EXPECT_GT(limit.bytes, 64 * kMiB) << limit.source;
  EXPECT_FALSE(limit.key.empty());
  EXPECT_GT(trident::resident_anonymous_bytes(), 0);
}

MemoryClaim claim(int rank, uint64_t limit_id, int64_t limit_mib, std::array<int64_t, 4> need_mib) {
  MemoryClaim c;
  c.rank = rank;
  c.limit_id = limit_id;
  c.limit_bytes = limit_mib * kMiB;
  for (size_t z = 0; z < 4; ++z) c.need_bytes[z] = need_mib[z] * kMiB;
  return c;
}

TEST(MemoryShortfall, RanksSharingOneLimitAddUpAndTheStagesThatFitAreNamed) {
  // Two ranks of one cgroup; zero 1 (1200 MiB together) overdraws it too, zero 2 meets it exactly.
  const std::vector<MemoryClaim> claims{claim(0, 7, 1000, {800, 600, 500, 400}),
                                        claim(1, 7, 1000, {800, 600, 500, 400})};
  const std::string message = memory_shortfall(claims, 1, 0, "node9", "the 1000 MiB its cgroup allows (x)", "NEEDS");
  EXPECT_NE(message.find("ranks 0, 1 on node9 need at least 1.56 GiB together for NEEDS at parallel.zero = 0, "
                         "more than the 1000 MiB its cgroup allows (x)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("At parallel.zero = 2 / 3 it would be at least 1000.00 MiB / 800.00 MiB together"),
            std::string::npos)
      << message;
  EXPECT_EQ(memory_shortfall(claims, 0, 2, "node9", "L", "N"), "") << "zero 2 needs exactly the limit";
}

TEST(MemoryShortfall, RanksUnderLimitsOfTheirOwnDoNotAddUp) {
  const std::vector<MemoryClaim> claims{claim(0, 1, 1000, {800, 600, 500, 400}),
                                        claim(1, 2, 1000, {800, 600, 500, 400})};
  EXPECT_EQ(memory_shortfall(claims, 0, 0, "h", "L", "N"), "");
  EXPECT_EQ(memory_shortfall(claims, 1, 0, "h", "L", "N"), "");
}

TEST(MemoryShortfall, AStageThatOverdrawsAnotherLimitOfTheNodeIsNotOffered) {
  // Rank 0 alone would fit at zero 1; ranks 1 and 2 share a smaller limit that only zero 3 meets.
  const std::vector<MemoryClaim> claims{claim(0, 1, 700, {800, 600, 500, 400}),
                                        claim(1, 2, 900, {800, 600, 500, 400}), claim(2, 2, 900, {800, 600, 500, 400})};
  const std::string message = memory_shortfall(claims, 0, 0, "h", "L", "N");
  EXPECT_NE(message.find("rank 0 on h needs at least 800.00 MiB for N at parallel.zero = 0, more than L"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("At parallel.zero = 3 it would be at least 400.00 MiB (trident plan"), std::string::npos)
      << message;
}

TEST(MemoryShortfall, AStageWithoutRoomForWhatTheRankHoldsIsNotOffered) {
  // The figures of tests/cli/memory_cap.sh's GPT at dp 8 under 640 MiB: zero 1's 437 MiB of model
  // state leaves no room for the 300 MiB the rank holds (it was OOM-killed there), zero 2's does.
  std::vector<MemoryClaim> claims{claim(0, 1, 640, {778, 437, 267, 97})};
  claims[0].held_bytes = 300 * kMiB;
  const std::string message = memory_shortfall(claims, 0, 0, "h", "L", "N");
  EXPECT_NE(message.find("At parallel.zero = 2 / 3 it would be at least 267.00 MiB / 97.00 MiB, room left for the "
                         "300.00 MiB it holds already"),
            std::string::npos)
      << message;
}

TEST(MemoryShortfall, NoStageFitsWithoutMoreRanks) {
  // dp 1: ZeRO partitions nothing, every stage needs the same.
  const std::vector<MemoryClaim> claims{claim(3, 1, 500, {800, 800, 800, 800})};
  const std::string message = memory_shortfall(claims, 0, 0, "h", "L", "N");
  EXPECT_NE(message.find("rank 3 on h needs at least 800.00 MiB"), std::string::npos) << message;
  EXPECT_NE(message.find("No ZeRO stage fits it on these ranks"), std::string::npos) << message;
}

TEST(MemoryShortfall, ActivationsThatMakeTheDifferenceAreNamedWithWhatShrinksThem) {
  // 300 MiB of model state and 900 MiB of activations under 1000 MiB: without them it would fit.
  // What shrinks them depends on the deck (the caller's text: under gpipe not the micro-batch).
  std::vector<MemoryClaim> claims{claim(0, 1, 1000, {1200, 1200, 1200, 1200})};
  claims[0].activation_bytes = 900 * kMiB;
  std::string message = memory_shortfall(claims, 0, 0, "h", "L", "N", "SHRINK");
  EXPECT_NE(message.find("needs at least 1.17 GiB for N at parallel.zero = 0, more than L (a lower bound: the "
                         "backward's gradients and the libraries' own memory come on top). 900.00 MiB of it is what "
                         "the layers keep for the backward, which no ZeRO stage shrinks: SHRINK would."),
            std::string::npos)
      << message;
  // 200 MiB over with 200 MiB of activations: the state alone fits exactly.
  claims[0].activation_bytes = 200 * kMiB;
  EXPECT_NE(memory_shortfall(claims, 0, 0, "h", "L", "N", "SHRINK").find("SHRINK"), std::string::npos);
  // 1050 MiB of state alone overdraws it: the activations are not what to shrink first.
  claims[0].activation_bytes = 50 * kMiB;
  claims[0].need_bytes = {1100 * kMiB, 1100 * kMiB, 1100 * kMiB, 1100 * kMiB};
  message = memory_shortfall(claims, 0, 0, "h", "L", "N", "SHRINK");
  EXPECT_NE(message.find("(a lower bound: the backward's gradients and the libraries' own memory come on top)."),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("what the layers keep"), std::string::npos) << message;
  // Not counted (a GPU, a 16-bit run on the host): they are said to come on top.
  claims[0].activation_bytes = 0;
  message = memory_shortfall(claims, 0, 0, "h", "L", "N", "SHRINK");
  EXPECT_NE(message.find("(a lower bound: activations and the libraries' own memory come on top)."), std::string::npos)
      << message;
  EXPECT_EQ(message.find("SHRINK"), std::string::npos) << message;
}

TEST(MemoryShortfall, AnUnknownLimitIsNotChecked) {
  const std::vector<MemoryClaim> claims{claim(0, 1, 0, {800, 800, 800, 800})};
  EXPECT_EQ(memory_shortfall(claims, 0, 0, "h", "L", "N"), "");
}

TEST(MemoryShortfall, RankRunsAreShortened) {
  std::vector<MemoryClaim> claims;
  for (int r : {0, 1, 2, 3, 5, 7, 8}) claims.push_back(claim(r, 1, 100, {100, 100, 100, 100}));
  const std::string message = memory_shortfall(claims, 0, 0, "h", "L", "N");
  EXPECT_NE(message.find("ranks 0-3, 5, 7, 8 on h need at least 700.00 MiB together"), std::string::npos) << message;
}

}  // namespace

// A host allocation that would take the process past its budget is refused with the sizes; one
// within it, smaller ones, and any allocation once the budget is gone are granted.
TEST(HostMemoryBudget, AnAllocationPastTheBudgetThrowsAndTheAllocatorIsGivenBack) {
  using trident::train::HostMemoryBudget;
  using trident::train::HostMemoryExceeded;
  const trident::ResidentMemory resident = trident::resident_memory();
  const int64_t held = resident.anonymous + resident.shared;
  ASSERT_GT(held, 0);
  at::Tensor made_under_budget;
  {
    const HostMemoryBudget budget(held + 64 * kMiB, 1, "BUDGET");
    EXPECT_NO_THROW(made_under_budget = torch::ones({8 * kMiB / 4}));  // 8 MiB, touched: within the budget
    try {
      (void)torch::empty({256 * kMiB / 4});
      ADD_FAILURE() << "256 MiB past a budget 64 MiB above what the process held was granted";
    } catch (const HostMemoryExceeded& e) {
      EXPECT_EQ(std::string(e.what()).rfind("256.00 MiB more would take the ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(" this process holds past BUDGET"), std::string::npos) << e.what();
    }
    // What the model's build reports as an allocation failure: a std::bad_alloc.
    EXPECT_THROW((void)torch::empty({256 * kMiB / 4}), std::bad_alloc);
    {
      const HostMemoryBudget none(0, 1, "");  // no budget: nothing checked, and the outer one is kept
    }
    EXPECT_THROW((void)torch::empty({256 * kMiB / 4}), HostMemoryExceeded);
  }
  EXPECT_NO_THROW((void)torch::empty({256 * kMiB / 4}));  // untouched: no resident memory
  // A storage made under the budget keeps its allocator for a resize: still there, and disarmed.
  EXPECT_NO_THROW(made_under_budget.resize_({256 * kMiB / 4}));
}
