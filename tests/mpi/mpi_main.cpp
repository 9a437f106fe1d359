// gtest main for tests run under mpiexec: MPI is initialised around the tests, and only ranks
// with a failure print their output (HighFive's parallel tests do the same), so a passing
// np 4 run prints one summary.
#include <gtest/gtest.h>
#include <mpi.h>

#include "comm/world.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  trident::comm::MpiSession mpi(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  trident::comm::World::from(MPI_COMM_WORLD);  // sets the rank prefix of messages
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int local = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (local != 0 && rank != 0) std::fprintf(stderr, "rank %d: tests failed\n", rank);
  return any;
}
