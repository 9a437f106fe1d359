// abort_after_message: rank 1 of 2 prints a fault line and ends the job with abort_all_ranks, as
// a rank's fault does (app/commands.cpp); rank 0 waits for it in a barrier. tests/cli/
// abort_message.sh runs it many times: every run's log must hold the line.
#include <mpi.h>

#include <cstdio>

#include "core/error.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 1) {
    std::fprintf(stderr, "trident: fault: rank 1: the line this rank wrote before the abort\n");
    trident::abort_all_ranks(trident::kExitFault);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
