#include "train/goodput_log.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "core/files.hpp"
#include "core/host.hpp"
#include "core/log.hpp"
#include "train/safe_stop.hpp"

namespace trident::train {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {
const double g_process_start = unix_now();

// The wall clock, never before the process started: a clock stepped back (NTP) would make a
// record whose end is before its start, which the report skips as impossible.
double unix_now_since_start() { return std::max(unix_now(), g_process_start); }

std::string job_name() {
  if (const char* id = std::getenv("SLURM_JOB_ID"); id && *id) {
    std::string job = id;
    if (const char* restarts = std::getenv("SLURM_RESTART_COUNT"); restarts && std::atoi(restarts) > 0)
      job += "+" + std::string(restarts);  // the Nth requeue of the same job id
    return job;
  }
  return "pid " + std::to_string(getpid());
}

// Appends one line. A file that does not end with a newline (a process killed in mid-append)
// gets one first, so the torn line stays alone and the new record whole.
bool append_line(const std::string& path, const std::string& line) {
  std::FILE* f = std::fopen(path.c_str(), "a+");
  if (!f) return false;
  bool torn = false;
  if (std::fseek(f, -1, SEEK_END) == 0) torn = std::fgetc(f) != '\n';
  std::fseek(f, 0, SEEK_END);
  const bool ok = std::fprintf(f, "%s%s\n", torn ? "\n" : "", line.c_str()) > 0 && std::fflush(f) == 0 &&
                  sync_file(fileno(f));
  return std::fclose(f) == 0 && ok;
}
}  // namespace

double process_start_unix() { return g_process_start; }

GoodputLog::GoodputLog(const std::string& output_dir, int64_t start_step, bool new_run)
    : jsonl_(output_dir + "/goodput.jsonl"), open_(output_dir + "/" + report::kOpenGoodputRecord) {
  if (new_run) {
    std::remove(open_.c_str());
    std::remove(jsonl_.c_str());
  }
  // A lifetime left open ended without a word: it joins the file as last written.
  try {
    if (const auto orphan = report::read_open_lifetime(open_)) {
      if (append_line(jsonl_, report::lifetime_json(*orphan)))
        std::remove(open_.c_str());  // appended once: never again, whatever happens next
      else
        warn_once("cannot append to " + jsonl_);
    }
  } catch (const BadInput& e) {
    warn_once(std::string("an unreadable record left by an earlier process is dropped: ") + e.what());
  }
  // The lifetimes before this one: what they trained past `start_step` is trained again now.
  std::vector<report::Lifetime> chain;
  try {
    chain = report::read_goodput(jsonl_);  // a torn line is skipped
  } catch (const BadInput&) {             // none yet
  }
  life_.job = job_name();
  life_.host = host_name();
  life_.start = g_process_start;
  life_.launch_s = launch_seconds(job_start_time(), g_process_start, job_time_limit_seconds());
  life_.end = unix_now_since_start();
  life_.first_step = life_.last_step = start_step;
  if (start_step > 0) life_.resumed_from_step = start_step;
  chain.push_back(life_);
  const report::LostWork lost = report::lost_work(chain);
  life_.work_lost_steps = lost.by_steps.back();
  life_.work_lost_s = lost.by_s.back();
  write_open();
}

void GoodputLog::startup_ends() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (started_) return;
  started_ = true;
  life_.startup_s = unix_now_since_start() - life_.start;
}

void GoodputLog::set(const GoodputProgress& p) {
  life_.last_step = std::max(p.last_step, life_.first_step);
  life_.step_s = p.step_s;
  life_.data_wait_s = p.data_wait_s;
  life_.evaluation_s = p.evaluation_s;
  life_.checkpoint_s = p.checkpoint_s;
  stamp_end();
}

void GoodputLog::stamp_end() {
  life_.end = unix_now_since_start();
  if (!started_) life_.startup_s = life_.end - life_.start;  // no step ran: all of it was start-up
}

void GoodputLog::update(const GoodputProgress& p) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return;
  set(p);
  write_open();
}

void GoodputLog::close(int exit_code, const GoodputProgress& p) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return;
  set(p);
  append_closed(exit_code);
}

void GoodputLog::close_at_abort(int exit_code) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return;
  stamp_end();
  append_closed(exit_code);
}

void GoodputLog::append_closed(int exit_code) {
  closed_ = true;
  life_.exit_code = exit_code;
  if (!append_line(jsonl_, report::lifetime_json(life_))) {
    warn_once("cannot append to " + jsonl_ + ": " + std::strerror(errno));
    return;  // the open record stays: the next lifetime closes it
  }
  std::remove(open_.c_str());
}

void GoodputLog::write_open() {
  const std::string tmp = open_ + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  bool ok = f && std::fprintf(f, "%s\n", report::lifetime_json(life_).c_str()) > 0;
  if (f) ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), open_.c_str()) != 0) warn_once("cannot write " + open_ + ": " + std::strerror(errno));
}

void GoodputLog::warn_once(const std::string& what) {
  if (warned_) return;
  warned_ = true;
  log::warn("goodput record: {} (training goes on; `trident report --goodput` will miss this lifetime's figures)", what);
}

}  // namespace trident::train
