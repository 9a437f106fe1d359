#pragma once
// What every subcommand shares: its options parsed, and what it throws turned into an exit code.
// No LibTorch: `trident` (app/main.cpp) and trident-torch (app/torch_main.cpp) both use it.
#include <mpi.h>

#include <boost/program_options.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace trident::app {

namespace po = boost::program_options;

// Who says an error: each process of a serial subcommand its own (as tasks of srun, each may
// stage its own file); the ranks of `train` once, by rank 0 -- before MPI_Init (the command line)
// the launcher's rank 0, since every task parses the same arguments.
enum class Ranks { serial, train_before_mpi, train };

// Runs a subcommand body and turns what it throws into the exit codes of README.md ("Exit codes"): bad input
// is printed once (rank 0) and exits 2 on every rank; a fault of one rank aborts the job.
template <typename Body>
int guarded(Ranks ranks, Body body) {
  const bool mpi = ranks == Ranks::train;
  int rank = ranks == Ranks::train_before_mpi ? launcher_rank() : 0, size = 1;
  if (mpi) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  // One rank's fault: said by that rank, and the job aborted so that no other rank waits on it.
  const auto fault = [&](const std::string& text) {
    if (mpi && size > 1) abort_job_for_fault(text);
    std::fprintf(stderr, "trident: fault: %s\n", text.c_str());
    return static_cast<int>(kExitFault);
  };
  try {
    return body();
  } catch (const BadInput& e) {
    if (rank == 0) std::fprintf(stderr, "trident: error: %s\n", e.what());
    return kExitBadInput;
  } catch (const StoppedBySignal& e) {
    if (rank == 0) std::fprintf(stderr, "trident: %s\n", e.what());
    return kExitStoppedBySignal;
  } catch (const Diverged& e) {
    if (rank == 0) std::fprintf(stderr, "trident: error: training diverged at %s\n", e.what());
    return kExitDiverged;
  } catch (const AgreedFault& e) {
    if (rank == 0) std::fprintf(stderr, "trident: error: %s\n", e.what());
    return kExitFault;
  } catch (const po::error& e) {
    if (rank == 0) std::fprintf(stderr, "trident: error: %s (see --help)\n", e.what());
    return kExitBadInput;
  } catch (const std::exception&) {  // Fault, c10::Error, std::filesystem_error, std::bad_alloc, ...
    return fault(fault_text(std::current_exception()));
  }
}

inline std::vector<std::string> overrides_of(const po::variables_map& vm) {
  return vm.count("set") ? vm["set"].as<std::vector<std::string>>() : std::vector<std::string>{};
}

inline po::variables_map parse(int argc, char** argv, const po::options_description& options,
                               const po::positional_options_description& positional) {
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(options).positional(positional).run(), vm);
  po::notify(vm);
  return vm;
}

}  // namespace trident::app
