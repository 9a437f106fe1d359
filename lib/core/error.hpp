#pragma once
// Errors, the two ways a run ends badly (LAMMPS' error->all / error->one), and check macros
// that say who and where: rank, host, file:line and the library's own message.
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>

namespace trident {

// Exit codes of the executable (README.md "Exit codes").
enum ExitCode : int { kExitOk = 0, kExitFault = 1, kExitBadInput = 2, kExitStoppedBySignal = 3, kExitDiverged = 4 };

// Bad input that every rank detects alike (deck, layout, dataset): rank 0 prints the message
// once and every rank exits 2. Thrown by fatal_all.
class BadInput : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A fault of this rank (I/O, a library call failing): the job is aborted (MPI_Abort), the
// message carries rank, host and file:line. Thrown by fatal_one and the check macros.
class Fault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Training stopped by SIGUSR1/SIGTERM after a checkpoint was committed: exit code 3, so the job
// script requeues.
class StoppedBySignal : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Training produced a non-finite loss or gradient (fp32/bf16: nothing to skip): every rank sees
// the same global gradient norm, so all stop together, rank 0 names the step, exit code 4.
class Diverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A fault every rank knows about (the ranks agreed on it, e.g. a checkpoint write that failed on
// one of them): rank 0 prints it once, every rank exits 1; no MPI_Abort needed.
class AgreedFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The exit code the executable ends with when `error` escapes a subcommand (app/commands.cpp):
// what a run records as its exit before the exception leaves it.
inline int exit_code_for(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const BadInput&) {
    return kExitBadInput;
  } catch (const StoppedBySignal&) {
    return kExitStoppedBySignal;
  } catch (const Diverged&) {
    return kExitDiverged;
  } catch (...) {
    return kExitFault;
  }
}

// Whether `error` is a fault of this rank alone: not bad input, a stop, a divergence or a fault
// the ranks agreed on. Such a fault ends the job (abort_job_for_fault).
bool is_own_fault(const std::exception_ptr& error);
// What a fault that reaches the top says: a Fault's message names rank and host already; any
// other exception is said with who() and its message: `message`'s, when given, else the one
// set_exception_message set, else what().
std::string fault_text(const std::exception_ptr& error, const char* (*message)(const std::exception&) = nullptr);
// The process's way of wording an exception for fault_text (trident-torch sets LibTorch's message
// without its C++ stack trace, core/torch_error.hpp's message_of).
void set_exception_message(const char* (*message)(const std::exception&));
// Says this rank's fault on stderr ("trident: fault: TEXT"; TEXT names rank and host) and ends
// every rank of the job (abort_all_ranks).
[[noreturn]] void abort_job_for_fault(const std::string& text);

[[noreturn]] void fatal_all(const std::string& message);
// Ends every rank of the job (MPI_Abort) with `code`, once what this rank wrote to stderr had time
// to reach the launcher: MPICH's mpiexec dropped a rank's last lines, its fault message included,
// in about 4 of 100 aborts that followed them at once.
[[noreturn]] void abort_all_ranks(int code);
// What the aborting rank records before abort_all_ranks ends it, given the exit code: rank 0's
// goodput record while it trains (the watchdog's abort would leave it without one). One at a
// time; an empty function removes it (waiting for a call under way). It runs on a thread of its
// own, and the abort goes on after 5 s whether it returned or not.
void set_abort_hook(std::function<void(int)> hook);
[[noreturn]] void fatal_one(const std::string& message);

// "rank 3 on node17" once MPI is up; before, the launcher's rank ("rank 3 on node17" too, and
// "rank 0" in an sbatch script, which has SLURM_PROCID), or "pid 4711 on node17" in a process
// started alone (prepare-data, inspect, report run by hand).
std::string who();
bool identity_known();  // MPI is up: who() is the rank in the world
// The rank the launcher gave this process (mpiexec's PMI_RANK, srun's SLURM_PROCID, Open MPI's,
// PMIx's), 0 when started alone: before MPI_Init, only rank 0 prints a command-line error.
int launcher_rank();
void set_identity(int rank, const std::string& host);

[[noreturn]] void fail_mpi(int code, const char* call, const char* file, int line);
[[noreturn]] void fail_hdf5(const char* call, const char* file, int line);
// HDF5's error stack as one line (innermost first), then cleared.
std::string hdf5_error_text();
// The innermost entry of such a stack: the system's or the filter's reason ("No space left on
// device", "inflate() failed").
std::string innermost(const std::string& hdf5_stack);


}  // namespace trident

#define MPI_CHECK(call)                                                     \
  do {                                                                      \
    int trident_rc_ = (call);                                               \
    if (trident_rc_ != 0) ::trident::fail_mpi(trident_rc_, #call, __FILE__, __LINE__); \
  } while (0)

// HDF5 calls return a negative herr_t / hid_t on failure. (Not H5CHECK: HDF5 owns that name.)
#define HDF5_CHECK(call)                                                     \
  ([&]() {                                                                   \
    auto trident_h5_ = (call);                                               \
    if (trident_h5_ < 0) ::trident::fail_hdf5(#call, __FILE__, __LINE__);    \
    return trident_h5_;                                                      \
  }())

#define TRIDENT_CHECK(cond, message)                                                   \
  do {                                                                                 \
    if (!(cond))                                                                       \
      ::trident::fatal_one(std::string(__FILE__) + ":" + std::to_string(__LINE__) +   \
                           ": check '" #cond "' failed: " + (message));               \
  } while (0)
