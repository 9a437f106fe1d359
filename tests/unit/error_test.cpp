// Who a message names before MPI is up: the launcher's rank, or the process of a command run
// alone (prepare-data, inspect, report said "rank ? on host").
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "core/host.hpp"

namespace trident {
namespace {

TEST(Identity, BeforeMPIAProcessIsItsLauncherRankOrItsPid) {
  if (identity_known()) GTEST_SKIP() << "MPI is up in this process: who() is its rank";
  for (const char* name : {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) ::unsetenv(name);
  EXPECT_EQ(who(), "pid " + std::to_string(static_cast<long>(::getpid())) + " on " + host_name());
  ::setenv("SLURM_PROCID", "3", 1);
  EXPECT_EQ(who(), "rank 3 on " + host_name());
  ::unsetenv("SLURM_PROCID");
  set_identity(5, "node17");
  EXPECT_TRUE(identity_known());
  EXPECT_EQ(who(), "rank 5 on node17");
}

}  // namespace
}  // namespace trident
