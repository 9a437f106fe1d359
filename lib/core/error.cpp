#include "core/error.hpp"
#include "core/host.hpp"

#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace trident {

namespace {
// Set once MPI is up, read by every thread's messages (the watchdog's among them).
std::mutex g_who_mutex;
std::string g_who;  // empty until MPI is up (and in the commands that run without it)

// The rank the launcher gave this process, as its variable says it; null when started alone.
const char* launcher_rank_variable() {
  for (const char* name : {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
    if (const char* value = std::getenv(name)) return value;
  return nullptr;
}

}  // namespace

void set_identity(int rank, const std::string& host) {
  std::lock_guard<std::mutex> lock(g_who_mutex);
  g_who = "rank " + std::to_string(rank) + " on " + host;
}

bool identity_known() {
  std::lock_guard<std::mutex> lock(g_who_mutex);
  return !g_who.empty();
}

std::string who() {
  std::lock_guard<std::mutex> lock(g_who_mutex);
  if (!g_who.empty()) return g_who;
  // Before MPI is up the launcher's rank; a command run alone (prepare-data, inspect) is a process.
  if (launcher_rank_variable()) return "rank " + std::to_string(launcher_rank()) + " on " + host_name();
  return "pid " + std::to_string(static_cast<long>(::getpid())) + " on " + host_name();
}

int launcher_rank() {
  const char* value = launcher_rank_variable();
  return value ? std::atoi(value) : 0;
}

bool is_own_fault(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const AgreedFault&) {
    return false;
  } catch (...) {
    return exit_code_for(std::current_exception()) == kExitFault;
  }
}

namespace {
const char* (*g_exception_message)(const std::exception&) = nullptr;
}  // namespace

void set_exception_message(const char* (*message)(const std::exception&)) { g_exception_message = message; }

std::string fault_text(const std::exception_ptr& error, const char* (*message)(const std::exception&)) {
  if (!message) message = g_exception_message;
  try {
    std::rethrow_exception(error);
  } catch (const Fault& e) {
    return e.what();
  } catch (const std::exception& e) {  // c10::Error, std::filesystem_error, std::bad_alloc, ...
    return who() + ": " + (message ? message(e) : e.what());
  } catch (...) {
    return who() + ": an exception that is not a std::exception";
  }
}

void abort_job_for_fault(const std::string& text) {
  std::fprintf(stderr, "trident: fault: %s\n", text.c_str());
  abort_all_ranks(kExitFault);
}

void fatal_all(const std::string& message) { throw BadInput(message); }

void fatal_one(const std::string& message) { throw Fault(who() + ": " + message); }

namespace {
std::mutex g_abort_hook_mutex;  // held while the hook runs: removing it waits for a call under way
std::function<void(int)> g_abort_hook;
}  // namespace

void set_abort_hook(std::function<void(int)> hook) {
  std::lock_guard<std::mutex> lock(g_abort_hook_mutex);
  g_abort_hook = std::move(hook);
}

void abort_all_ranks(int code) {
  // The hook writes a file: on a hung file system it would hold the abort forever. It runs on a
  // thread of its own, given 5 s; whatever it throws is dropped (the abort comes first).
  try {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> finished = done->get_future();
    std::thread([code, done] {
      try {
        std::lock_guard<std::mutex> lock(g_abort_hook_mutex);
        if (g_abort_hook) g_abort_hook(code);
      } catch (...) {
      }
      done->set_value();
    }).detach();
    finished.wait_for(std::chrono::seconds(5));
  } catch (...) {  // no thread to be had: the abort without the hook
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // The launcher reads a rank's output and its abort on separate channels; 200 ms lets the output
  // through first (a test of 100 aborts lost none at 100 ms).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; in case it does
}

void fail_mpi(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(code, text, &len);
  fatal_one(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
            std::string(text, static_cast<size_t>(len)));
}

namespace {
// Walks HDF5's error stack; the innermost entry is the most specific ("unable to open file").
herr_t collect_hdf5_error(unsigned n, const H5E_error2_t* err, void* out) {
  auto* text = static_cast<std::string*>(out);
  if (!text->empty()) *text += "; ";
  *text += err->desc ? err->desc : "?";
  if (err->func_name) *text += std::string(" (") + err->func_name + ")";
  (void)n;
  return 0;
}
}  // namespace

std::string hdf5_error_text() {
  std::string stack;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_hdf5_error, &stack);
  H5Eclear2(H5E_DEFAULT);
  return stack.empty() ? "no HDF5 error message" : stack;
}

void fail_hdf5(const char* call, const char* file, int line) {
  fatal_one(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + hdf5_error_text());
}

std::string innermost(const std::string& hdf5_stack) {
  std::string text = hdf5_stack.substr(0, hdf5_stack.find(" (H5"));
  std::replace(text.begin(), text.end(), '\n', ' ');  // MPI-IO's error strings span lines
  return text;
}

}  // namespace trident
