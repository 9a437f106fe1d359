#pragma once
// The part of a gtest main under mpiexec that every such binary shares: only ranks with a
// failure print their output (HighFive's parallel tests do the same), so a passing np 4 run
// prints one summary; the exit code is the worst over the ranks, or 77 when every test was
// skipped. MPI must be initialised.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "../every_test_skipped.hpp"
#include "comm/world.hpp"

namespace trident::test_support {

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
  return exit_code_unless_every_test_skipped(any == 0, any, rank == 0);
}

}  // namespace trident::test_support
