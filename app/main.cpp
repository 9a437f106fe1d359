// trident: the command line (README.md "Using it"). inspect, report, plan, --help and --version
// run in this executable, which does not load LibTorch (half a second at every start with Debian's
// LibTorch 1.13 on the 2-core VM: benchmarks/command_start.sh); for train, compare and
// prepare-data it becomes trident-torch, the executable beside it (exec: the same process, with
// the same arguments and environment, for mpiexec, srun and their signals).
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "commands.hpp"
#include "core/error.hpp"

namespace {

char** g_argv = nullptr;  // main's, whole: what trident-torch is given

// The executable trident-torch beside this one (both are built into, and installed in, one
// folder); "" when this one's path cannot be read (`error` then says why).
std::string trident_torch_path(int& error) {
  std::string self(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", self.data(), self.size());
  if (n <= 0 || static_cast<size_t>(n) >= self.size()) {
    error = n < 0 ? errno : ENAMETOOLONG;
    return "";
  }
  self.resize(static_cast<size_t>(n));
  return self.substr(0, self.rfind('/') + 1) + "trident-torch";
}

// This process becomes trident-torch with the same arguments; returns only if it cannot (a fault:
// the installation lacks it), having said so: on every rank, since it may be one node's file
// system that lacks it. For train, the stop signals (SIGUSR1, SIGTERM, SIGINT) stay blocked
// across the exec, so that one that comes while trident-torch loads LibTorch (0.5 s and more,
// before its main) waits, pending, until train has its handlers in (train::catch_stop_signals
// unblocks them) and stops the run after its first step: by default it would end the process, and
// a preempted job with it, unsaved and not requeued. (They stay blocked when the exec fails: the
// process says why and exits 1, not killed by a signal that came meanwhile.)
int become_trident_torch(const std::string& command, bool hold_stop_signals) {
  int error = 0;
  const std::string path = trident_torch_path(error);
  if (!path.empty()) {
    if (hold_stop_signals) {
      sigset_t stop_signals;
      sigemptyset(&stop_signals);
      for (const int signal : {SIGUSR1, SIGTERM, SIGINT}) sigaddset(&stop_signals, signal);
      sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
      if (std::getenv("TRIDENT_TEST_SIGNAL_AT_LAUNCH")) std::raise(SIGUSR1);  // tests/cli/signal_resume.sh
    }
    ::execv(path.c_str(), g_argv);
    error = errno;
  }
  std::fprintf(stderr,
               "trident: fault: %s: cannot run %s (%s): %s needs it, installed beside trident (cmake --install puts "
               "both in bin/)\n",
               trident::who().c_str(), path.empty() ? "trident-torch beside /proc/self/exe" : path.c_str(),
               std::strerror(error), command.c_str());
  return trident::kExitFault;
}

int run_subcommand(int argc, char** argv) {
  using namespace trident::app;
  const std::string command = argv[0];
  if (command == "inspect") return inspect_command(argc, argv);
  if (command == "report") return report_command(argc, argv);
  if (command == "plan") return plan_command(argc, argv);
  if (command == "train") return become_trident_torch(command, /*hold_stop_signals=*/true);
  if (command == "compare" || command == "prepare-data")
    return become_trident_torch(command, /*hold_stop_signals=*/false);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  g_argv = argv;
  return trident::app::trident_main(argc, argv, run_subcommand);
}
