#pragma once
// The part of a gtest main under mpiexec that every such binary shares: only ranks with a
// failure print their output (HighFive's parallel tests do the same), so a passing np 4 run
// prints one summary; the exit code is the worst over the ranks, or 77 when every test was
// skipped. MPI must be initialised.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "comm/world.hpp"

namespace trident::test_support {

inline constexpr int kEveryTestSkipped = 77;  // SKIP_RETURN_CODE in cmake/TridentMpiTest.cmake

inline int run_all_tests_over_mpi() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  comm::World::from(MPI_COMM_WORLD);  // sets the rank prefix of messages
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int local = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (local != 0 && rank != 0) std::fprintf(stderr, "rank %d: tests failed\n", rank);
  // Every test skipped (a rank count or a LibTorch the suite does not run at): exit 77, which
  // CTest reports as skipped (SKIP_RETURN_CODE), not as a pass that checked nothing.
  const auto& unit = *::testing::UnitTest::GetInstance();
  if (any == 0 && unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count()) {
    if (rank == 0) std::fprintf(stderr, "every test skipped: reported to CTest as skipped (exit 77)\n");
    return kEveryTestSkipped;
  }
  return any;
}

}  // namespace trident::test_support
