// gtest main for tests run under mpiexec: MPI is initialised around the tests.
#include "comm/world.hpp"
#include "run_over_mpi.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  trident::comm::MpiSession mpi(&argc, &argv);
  return trident::test_support::run_all_tests_over_mpi();
}
