#pragma once
// The communicator backends this build has, and one place that makes them: the NCCL backend
// exists only in CUDA builds (TRIDENT_CUDA), and only comm/backend.cpp knows whether it does.
#include <mpi.h>

#include <memory>
#include <string>

#include "comm/communicator.hpp"

namespace trident::comm {

// True when this trident was built with the NCCL backend.
bool nccl_backend_built();

// The NCCL library version ("2.28.9"), or "" without the NCCL backend (report.json "nccl": null).
std::string nccl_version();

// A communicator over the ranks of `comm` (not owned; collective over it): backend "mpi" (CPU
// tensors) or "nccl" (CUDA tensors on the current CUDA device; fail_timeout_s = run.fail_timeout_s).
// "nccl" in a build without it, or another name: BadInput (fatal_all), as every rank sees alike.
std::unique_ptr<Communicator> make_communicator(const std::string& backend, MPI_Comm comm, double fail_timeout_s);

}  // namespace trident::comm
