#include "train/trainer.hpp"

#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <exception>
#include <filesystem>
#include <thread>

#include "checkpoint/checkpoint.hpp"
#include "comm/cuda_runtime.hpp"
#include "comm/progress.hpp"
#include "comm/watchdog.hpp"
#include "comm/world.hpp"
#include "parallel/element_partition.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/malloc_tuning.hpp"
#include "core/timer.hpp"
#include "core/torch_error.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "data/sampler.hpp"
#include "model/model.hpp"
#include "optim/device_step.hpp"
#include "optim/flat_params.hpp"
#include "optim/optimizer.hpp"
#include "optim/precision.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/pipeline.hpp"
#include "parallel/topology.hpp"
#include "report/report.hpp"
#include "train/evaluation_schedule.hpp"
#include "train/save_schedule.hpp"
#include "train/run_folder.hpp"
#include "train/run_summary.hpp"
#include "train/safe_stop.hpp"
#include "train/step.hpp"
#include "train/step_profiler.hpp"
#include "train/trainer_state.hpp"

namespace trident::train {

double sum_over_ranks(Trainer::State& s, double local) { return s.conn.world_comm->reduce_number(local, comm::Reduce::sum); }
double max_over_ranks(Trainer::State& s, double local) { return s.conn.world_comm->reduce_number(local, comm::Reduce::max); }

// The mean over replicas of a value only the last stage has (0 on other stages).
double replica_mean(Trainer::State& s, double last_stage_value) {
  return sum_over_ranks(s, s.stage.pipeline->last() ? last_stage_value : 0.0) / s.conn.topology->dp();
}

namespace {
// Set by SIGUSR1 / SIGTERM (SLURM's --signal=B:USR1@N, preemption) and SIGINT (Ctrl-C); acted on
// at a step boundary. The handler may run on any thread (the loader's, the save writer's, MPI's),
// so these are lock-free atomics, not volatile sig_atomic_t (which only a handler on the reading
// thread may write).
std::atomic<int> g_stop_signal{0};
// Tenths of a second on CLOCK_MONOTONIC (clock_gettime is async-signal-safe), counted from when
// the handlers were installed.
std::atomic<int64_t> g_first_interrupt_ds{-1};  // of the first SIGINT
int64_t g_installed_ds = 0;
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free,
              "a signal handler may only use lock-free atomics");

int64_t monotonic_deciseconds() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 10 + now.tv_nsec / 100000000;
}

void handle(int signal, void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a read or write under way goes on after the handler
  sigaction(signal, &action, nullptr);
}

extern "C" void on_stop_signal(int signal) {
  if (signal == SIGINT) {
    // Ctrl-C again, a second or more after the first, does not wait for the save: the process
    // ends as by default. (mpiexec passes a terminal's Ctrl-C on to ranks that got it already,
    // within milliseconds: whole seconds would take that copy for a second Ctrl-C when the two
    // fall either side of a second's boundary.) A second SIGTERM or SIGUSR1 changes nothing: the
    // stop's save is under way, and SLURM's SIGKILL follows its SIGTERM anyway.
    const int64_t now = monotonic_deciseconds() - g_installed_ds;
    const int64_t first = g_first_interrupt_ds.load();
    if (first >= 0 && now - first >= 10) {
      handle(SIGINT, SIG_DFL);
      std::raise(SIGINT);
      return;
    }
    if (first < 0) g_first_interrupt_ds.store(now);
  }
  g_stop_signal.store(signal);
}
}  // namespace

void catch_stop_signals() {
  if (g_installed_ds == 0) g_installed_ds = monotonic_deciseconds();  // (installed again after MPI_Init)
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (const int signal : {SIGUSR1, SIGTERM, SIGINT}) {
    handle(signal, on_stop_signal);
    sigaddset(&stop_signals, signal);
  }
  // `trident` blocks them before it becomes trident-torch (app/main.cpp): one that came while
  // LibTorch loaded is taken here, now that the handler is in.
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
}

namespace {


struct Evaluation {
  double loss = 0, accuracy = 0;
  bool stopped = false;  // a stop signal came during it: left unfinished, no figures
  double longest_unchecked_s = 0;  // the longest stretch between its checks for a signal
  int64_t samples = 0;  // of the test split, evaluated
};

// Fault injection for the tests: when `variable` is set to N, `what` takes N ms more, and says so
// (for the test to act once it is under way rather than after a guessed delay).
//   TRIDENT_TEST_SLOW_EVALUATION_MS: each chunk of an evaluation (one long enough for a signal to
//     come during it);
//   TRIDENT_TEST_SLOW_RECORDS_MS: each metrics.jsonl record (rank 0 stalled in its records' I/O,
//     as on an NFS server failover).
void slow_down_if_asked(const char* variable, const char* what) {
  const char* slow = std::getenv(variable);
  if (!slow) return;
  std::fprintf(stderr, "trident: test: %s slowed by %s ms (%s)\n", what, slow, variable);
  std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(slow)));
}

// The test split is evaluated in chunks of the training micro-batch, a size the rank is known to
// fit: on a GPU a forward holds a chunk's activations in device memory (1000 GPT-2 samples of
// logits are ~200 GB in fp32). On the CPU larger chunks are slower too: chunks of 1000 fall out
// of the caches and evaluated Fashion-MNIST's test split 3-6x slower than chunks of 64 (np 2),
// and under a pipeline smaller chunks overlap across the stages.
int64_t evaluation_chunk(const Trainer::State& s) { return s.stage.plan->micro_batch(); }

// How many of the test split's samples an evaluation asked for `samples` takes: that many
// (run.eval_samples), at most the split; 0: all of it.
int64_t samples_to_evaluate(const Trainer::State& s, int64_t samples) {
  const int64_t split = s.stage.test_split->size();
  return samples > 0 ? std::min(samples, split) : split;
}

// `stop_on_signal`: a stop signal ends the evaluation early (Evaluation::stopped), so that a
// job's signal lead need not cover a whole evaluation. The ranks agree on it every so many chunks
// (a small all-reduce: under a pipeline each one drains the stages, so 32 at most).
// `samples` > 0: the split's first that many (run.eval_samples), else all of it.
Evaluation evaluate_test_split(Trainer::State& s, int64_t chunk_samples = 0, bool stop_on_signal = false,
                               int64_t samples = 0) {
  // ZeRO-3 gathers every layer for the evaluation's forwards too: that communication is the
  // evaluation's time, not training's (report.json comm_exposed, zero3_gathers).
  const auto& sync = *s.stage.grad_sync;
  const double comm_before = sync.exposed_comm_seconds();
  const int64_t gathers_before = sync.gathers(), prefetched_before = sync.gathers_prefetched();
  torch::NoGradGuard no_grad;
  s.stage.model->eval();
  // Each replica evaluates its share of the test split, in chunks every stage agrees on. The
  // shares differ by one sample where the split does not divide by dp; every replica still runs
  // the same number of chunks (ZeRO-3 gathers each layer over the dp group in every forward), as
  // many as the smallest share needs: a chunk of a larger share holds at most one sample more.
  const int64_t total = samples_to_evaluate(s, samples);
  const int dp = s.conn.topology->dp();
  const auto share = data::even_share(total, s.conn.topology->dp_rank(), dp);
  const int64_t chunk = chunk_samples > 0 ? chunk_samples : evaluation_chunk(s);
  const int64_t chunks = std::max<int64_t>(1, (total / dp + chunk - 1) / chunk);
  const int64_t size = share.end - share.begin;
  double loss_sum = 0, correct = 0;
  auto& pipe = *s.stage.pipeline;
  const int64_t check_every = std::max<int64_t>(1, (chunks + 31) / 32);
  bool stopped = false;
  Stopwatch since_check;
  double longest_unchecked_s = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    if (stop_on_signal && c % check_every == 0) {
      longest_unchecked_s = std::max(longest_unchecked_s, since_check.seconds());
      stopped = s.conn.world_comm->reduce_number(g_stop_signal.load() != 0 ? 1.0 : 0.0, comm::Reduce::max) != 0;
      since_check.reset();
      if (stopped) break;
    }
    slow_down_if_asked("TRIDENT_TEST_SLOW_EVALUATION_MS", "an evaluation chunk");
    const int64_t begin = share.begin + size * c / chunks, end = share.begin + size * (c + 1) / chunks;
    if (begin == end) continue;  // a replica with no sample at all (a test split smaller than dp)
    const auto [loss, right] = pipe.evaluate(end - begin, [&] {
      data::MicroBatch b;
      comm::FileIoScope io;
      s.stage.test_split->read_range(begin, end, pipe.first() ? &b.inputs : nullptr, pipe.last() ? &b.labels : nullptr);
      return b;
    });
    loss_sum += loss;
    correct += right;
  }
  s.stage.model->train();
  s.evaluation_comm_s += sync.exposed_comm_seconds() - comm_before;
  s.evaluation_gathers += sync.gathers() - gathers_before;
  s.evaluation_gathers_prefetched += sync.gathers_prefetched() - prefetched_before;
  longest_unchecked_s = std::max(longest_unchecked_s, since_check.seconds());
  if (stopped) return {0.0, 0.0, true, longest_unchecked_s};
  // Only last stages hold results: the sum over the world is the sum over replicas.
  auto totals = torch::tensor({loss_sum, correct}, torch::kDouble);
  s.conn.world_comm->all_reduce_sum(totals);
  const double n = static_cast<double>(total * s.stage.test_split->targets_per_sample());
  return {totals[0].item<double>() / n, totals[1].item<double>() / n, false, longest_unchecked_s, total};
}

// Whether the fault-injection variable `name` (RANK:STEP) names this rank and step boundary.
bool injection_asked(const char* name, int rank, int64_t step) {
  const char* spec = std::getenv(name);
  int asked_rank = -1;
  long long asked_step = -1;
  return spec && std::sscanf(spec, "%d:%lld", &asked_rank, &asked_step) == 2 && asked_rank == rank &&
         asked_step == step;
}

// Fault injection for the watchdog tests: TRIDENT_TEST_STALL=RANK:STEP makes that rank's main
// thread stop at that step boundary for good (a stuck process whose heartbeat thread lives on).
void stall_if_asked(int rank, int64_t step) {
  if (!injection_asked("TRIDENT_TEST_STALL", rank, step)) return;
  std::fprintf(stderr, "trident: test: rank %d stalls after step %lld (TRIDENT_TEST_STALL)\n", rank,
               static_cast<long long>(step));
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// Fault injection for the job-end tests: TRIDENT_TEST_SLOW_STEPS=STEP:MS makes each step after
// step boundary STEP take MS ms more, on every rank (a node that throttles, a file system that
// stalls the loader: a run that falls behind its ETA); said once.
void slow_steps_if_asked(int64_t step) {
  static const char* spec = std::getenv("TRIDENT_TEST_SLOW_STEPS");
  long long from = -1, ms = 0;
  if (!spec || std::sscanf(spec, "%lld:%lld", &from, &ms) != 2 || step <= from) return;
  if (step == from + 1)
    std::fprintf(stderr, "trident: test: the steps after step %lld slowed by %lld ms (TRIDENT_TEST_SLOW_STEPS)\n", from, ms);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// Fault injection for the fail-fast tests: TRIDENT_TEST_FAULT=RANK:STEP makes that rank fail alone
// (a Fault, as an I/O error would) at that step boundary, after the boundary's save has started.
void fault_if_asked(int rank, int64_t step) {
  if (injection_asked("TRIDENT_TEST_FAULT", rank, step)) fatal_one(fmt::format("a fault at step {} (TRIDENT_TEST_FAULT)", step));
}

// Fault injection for the watchdog tests, during start-up: TRIDENT_TEST_STARTUP=RANK:stop makes
// that rank SIGSTOP itself (the others wait for it in the next agreement), RANK:busy=SECONDS keeps
// it busy that long without communicating (as a long dataset scan does).
void startup_fault_if_asked(int rank) {
  static const char* spec = std::getenv("TRIDENT_TEST_STARTUP");
  if (!spec) return;
  int target = -1;
  char what[32] = {0};
  if (std::sscanf(spec, "%d:%31s", &target, what) != 2 || target != rank) return;
  double seconds = 0;
  if (std::string(what) == "stop") {
    std::fprintf(stderr, "trident: test: rank %d stops itself during start-up (TRIDENT_TEST_STARTUP)\n", rank);
    std::raise(SIGSTOP);
  } else if (std::sscanf(what, "busy=%lf", &seconds) == 1) {
    std::fprintf(stderr, "trident: test: rank %d busy for %.1f s during start-up (TRIDENT_TEST_STARTUP)\n", rank, seconds);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
}

// A fresh start in a folder an earlier run wrote replaces that run's results: said, not done
// silently (its checkpoints stay; see checkpoint::Retention).
// (goodput.jsonl too after --resume never; a fresh start of a chain that had no checkpoint yet
// adds to it, its earlier lifetimes' steps counted as lost.)
void say_what_a_fresh_start_replaces(const std::string& dir, bool new_run) {
  std::vector<std::string> replaced;
  for (const char* name : {"metrics.jsonl", "evaluations.jsonl", "goodput.jsonl"})
    if (std::filesystem::exists(dir + "/" + name) && (new_run || name != std::string("goodput.jsonl")))
      replaced.push_back(name);
  if (!replaced.empty())
    log::info("starting fresh in {}: {} of an earlier run there {} replaced", dir, fmt::join(replaced, ", "),
              replaced.size() == 1 ? "is" : "are");
}

// report.json but for the last evaluation (report::write_pending_report).
std::string pending_report_path(const Trainer::State& s) { return s.deck.run.output_dir + "/report.pending.json"; }

// report.json describes a run as it finished. One that trains again in its folder (a fresh start,
// or a resume past that end with run.max_steps or run.epochs raised) writes its own only when it
// finishes: a stop or a fault before that left the earlier one there, which `trident report` and
// a scaling study took for this run's. Moved aside, not removed: report.previous.json.
void set_aside_earlier_report(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path report = fs::path(dir) / "report.json", previous = fs::path(dir) / "report.previous.json";
  std::error_code ec;
  if (!fs::is_regular_file(report, ec)) return;
  fs::rename(report, previous, ec);
  if (ec)
    log::warn("{} of an earlier end of this run could not be moved to {} ({}): it describes that end until this run "
              "finishes",
              report.string(), previous.string(), ec.message());
  else
    log::info("{} (the run as it ended before) moved to {}: this run writes its own when it finishes", report.string(),
              previous.filename().string());
}

}  // namespace

// Everything a run needs before its first step, in three steps that each return what they own
// (trainer_state.hpp); --resume is settled between the first two, so a bad one is reported
// before the dataset is opened, as before.
Trainer::Trainer(const config::Deck& deck, MPI_Comm comm, const std::string& resume) : s_(std::make_unique<State>()) {
  auto& s = *s_;
  s.deck = deck;
  // A stop signal during start-up is acted on at the first step boundary, like one during training.
  catch_stop_signals();
  // Heartbeats from here on: a rank that dies or is stopped during start-up ends the job too.
  s.watchdog = std::make_unique<comm::Watchdog>(comm, deck.run.fail_timeout_s);
  try {
    // The folder is this run's before anything in it is read or written; a second run into it
    // stops here (bad input, naming the owner; claim leaves nothing behind itself).
    s.run_folder = RunFolder::claim(deck.run.output_dir, comm, deck.run.requeue_lock_wait_s, g_stop_signal);
    s.conn = connect(s.deck, comm, s.watchdog->enabled());
    startup_fault_if_asked(s.conn.world.rank);
    const ResumeFrom from = resolve_resume(s.deck, s.conn, resume);
    s.stage = build_stage(s.deck, s.conn, /*weights_from_checkpoint=*/!from.path.empty());
    s.startup_peak_bytes = report::peak_rss_bytes();
    s.restored = restore(s.deck, s.conn, s.stage, from);
    s.restored.new_run = resume == "never";
    // (It can refuse the run: the other run's checkpoints that it cannot set aside.)
    s.retention = retention_of(s.deck, s.conn, s.restored.start_step, s.run_folder && s.run_folder->locked(),
                               s.restored.resumed_from);
    if (s.conn.world.rank == 0) {  // said once nothing more can refuse the run: bad input is its one message
      if (!from.note.empty()) log::info("{}", from.note);
      if (!s.restored.deck_changes.empty()) log::info("{}", s.restored.deck_changes);
      if (s.restored.start_step == 0) say_what_a_fresh_start_replaces(s.deck.run.output_dir, s.restored.new_run);
      if (s.restored.start_step < s.stage.total_steps) {
        set_aside_earlier_report(s.deck.run.output_dir);
        std::error_code ec;  // an earlier end's, whose last evaluation this run's training makes moot
        std::filesystem::remove(pending_report_path(s), ec);
      }
    }
  } catch (const BadInput&) {
    if (s.run_folder) s.run_folder->abandon();  // bad input writes nothing: not even the folder
    // Bad input is agreed, so every rank is here: the watchdog stops collectively (no heartbeat
    // left in flight for a later communicator), watching progress so a rank that is not gets
    // reported instead of waited for.
    s.watchdog->watch_progress();
    s.watchdog->stop();
    throw;
  }
  choose_step_decisions(s);  // after the load: an fp16 run continues from the saved scale
  s.watchdog->watch_progress();
}

// A Trainer dropped without run() (or after one that threw on every rank) still has its
// watchdog running. When no exception is on its way, every rank is here at the same point:
// stop it collectively, so no heartbeat is left in flight on its communicator (MPI reuses a freed
// communicator's context, and a stale beat would then match a later receive). On an error path
// the non-collective destructor ends the thread, as before.
Trainer::~Trainer() {
  if (s_->watchdog && std::uncaught_exceptions() == 0) s_->watchdog->stop();
}

std::pair<double, double> Trainer::evaluate(int64_t chunk) {
  const Evaluation e = evaluate_test_split(*s_, chunk);
  return {e.loss, e.accuracy};
}

std::vector<std::pair<std::string, at::Tensor>> Trainer::full_parameters() {
  const at::Tensor full = s_->stage.grad_sync->full_params();
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& slot : s_->stage.flat->slots)
    out.emplace_back(slot.name, full.narrow(0, slot.offset, slot.numel).view(slot.shape).clone());
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> Trainer::full_optimizer_state() {
  auto& s = *s_;
  const int64_t n = s.stage.flat->numel();
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& [state_name, state] : s.stage.optimizer->state()) {
    if (!state.defined()) continue;  // the same on every rank: no step taken, nothing loaded
    at::Tensor full = state;
    if (s.stage.grad_sync->sharded()) {  // this rank's partition: owned_range(s), as ZeRO cuts it
      full = at::empty({n}, state.options());
      s.conn.dp_comm->all_gather_v(state, full, parallel::ElementPartition(n, s.conn.topology->dp()).counts(0, n));
    }
    for (const auto& slot : s.stage.flat->slots)
      out.emplace_back(state_name + "/" + slot.name, full.narrow(0, slot.offset, slot.numel).view(slot.shape).clone());
  }
  return out;
}

namespace {

void log_layout(const Trainer::State& s) {
  const auto& deck = s.deck;
  const auto& topo = *s.conn.topology;
  log::info("trident {} | LibTorch {} | {} | {}", TRIDENT_VERSION, TORCH_VERSION,
            topo.grid().shape_text() + "; " + topo.grid().rank_map_text(), malloc_setting());
  std::string nodes;
  for (const auto& n : s.conn.world.node_names) nodes += (nodes.empty() ? "" : ",") + n;
  log::info("layout: world {} on {} node(s) [{}] | dp {} x pp {} | zero {} | backend {} | device {} | "
            "gradients {} | {} thread(s)/rank | global batch {} = micro {} x dp {} x accumulation {}",
            s.conn.world.size, s.conn.world.node_count, nodes, topo.dp(), topo.pp(), deck.parallel.zero, s.conn.dp_comm->backend(),
            s.conn.device, s.stage.grad_sync->name(), s.conn.threads, deck.optim.global_batch, s.stage.plan->micro_batch(), topo.dp(), s.stage.plan->accumulation());
  std::string layer_runs;  // [first, end) of each chunk
  for (int c = 0; c < s.stage.plan->virtual_stages(); ++c) {
    const auto [begin, end] = s.stage.plan->chunk_layers(topo.stage(), c);
    layer_runs += fmt::format("{}[{}, {})", c ? " + " : "", begin, end);
  }
  log::info("model {}: stage {} runs layers {} with {} parameters | data {}: {} train / {} test samples, "
            "{} steps/epoch, {} steps",
            deck.model.kind, topo.stage(), layer_runs, s.stage.flat->numel(), deck.data.path,
            s.stage.train_split->size(), s.stage.test_split->size(), s.stage.sampler->steps_per_epoch(), s.stage.total_steps);
  // Settings this layout makes no-ops: accepted (one deck runs at any rank count), but said.
  if (deck.parallel.zero > 0 && topo.dp() == 1)
    log::info("note: parallel.zero = {} at dp 1 shards nothing (each rank holds its whole stage, as at zero 0)",
              deck.parallel.zero);
  // A deck's warmup kept while max_steps was cut for a short test run: legal, but not what it reads as.
  // The cosine decay needs two steps after the warmup to fall from lr to min_lr.
  const bool cosine = deck.optim.lr_schedule == "cosine";
  const int64_t warmup = deck.optim.warmup_steps, steps = s.stage.total_steps;
  const double last_lr = s.stage.schedule.at(steps - 1);
  if (warmup > steps)
    log::info("note: optim.warmup_steps = {} is longer than this run's {} steps: the learning rate ends at {:.3e}, "
              "below optim.lr = {:.3e}{}",
              warmup, steps, last_lr, deck.optim.lr, cosine ? ", and its cosine decay never starts" : "");
  else if (cosine && warmup > 0 && warmup >= steps - 1 && deck.optim.min_lr < deck.optim.lr)
    log::info("note: optim.warmup_steps = {} leaves {} of this run's {} steps after it: the learning rate ends at "
              "{:.3e}, not optim.min_lr = {:.3e} (the cosine decay needs 2)",
              warmup, steps - warmup, steps, last_lr, deck.optim.min_lr);
  if (deck.parallel.schedule == "zb-h1" && topo.pp() == 1)
    log::info("note: parallel.schedule = zb-h1 at pp 1 has no pipeline bubble for its split backward to fill");
  if (deck.run.eval_samples > 0 && deck.run.eval_every_steps == 0)
    log::info("note: run.eval_samples = {} is for run.eval_every_steps' evaluations, and there are none (0): the "
              "evaluations after each epoch take the whole test split",
              deck.run.eval_samples);
  log::info("resolved deck:\n{}", config::deck_to_ini(deck));
  for (const auto& note : deck.notes) log::info("note: {}", note);
}

// A requeued job whose run had already finished: the checkpoint holds the trained model and
// report.json, metrics.jsonl and evaluations.jsonl describe that run. Rewriting them from zero
// steps would put zero throughput and no losses where the real figures are; evaluate and leave
// them be. A finished checkpoint resumed into another folder (to evaluate it at another layout,
// or by mistake) writes no report.json, metrics.jsonl or evaluations.jsonl there either: a
// scaling study would read a zero-step run.
// One killed during its last evaluation (after the final save) left report.pending.json: that
// evaluation, done here, completes it into report.json.
Result already_trained(Trainer::State& s) {
  if (s.goodput) s.goodput->startup_ends();  // (the evaluation is its own phase in goodput.jsonl too)
  Stopwatch evaluating;
  const Evaluation done = evaluate_test_split(s);
  const double evaluation_s = evaluating.seconds();
  s.times.evaluation += evaluation_s;
  const std::string& dir = s.deck.run.output_dir;
  // Its own folder's checkpoint as report.json's resumed_from judges it.
  const bool own_checkpoint = report::run_relative(s.restored.resumed_from, dir).rfind("checkpoints/", 0) == 0;
  const std::string pending = pending_report_path(s), report = dir + "/report.json";
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool has_report = fs::exists(report, ec);
  // A pending report newer than report.json is a later end's (report.json of an earlier end stays
  // when it could not be moved aside): that is the one to complete. An older one is a kill's
  // between writing report.json and removing it.
  const bool pending_is_current = s.conn.world.rank == 0 && fs::exists(pending, ec) &&
                                  (!has_report || fs::last_write_time(pending, ec) > fs::last_write_time(report, ec));
  std::string files;
  if (!own_checkpoint) {
    files = fmt::format("nothing written to report.json, metrics.jsonl or evaluations.jsonl in {} (raise run.max_steps "
                        "or run.epochs to train on from it)",
                        dir);
  } else if (pending_is_current) {
    comm::FileIoScope io;
    const std::string why_not =
        report::complete_pending_report(pending, report, s.restored.resumed_from, done.loss, done.accuracy, evaluation_s);
    if (why_not.empty()) {
      files = fmt::format("the run ended during its last evaluation: {} written from report.pending.json with this "
                          "evaluation's test figures, and evaluations.jsonl its record",
                          report);
      // The record the killed job did not write (kept up to the step before: a kill between that
      // record and report.json leaves one to replace).
      const int64_t last = s.stage.total_steps;
      report::EvaluationLog(dir + "/evaluations.jsonl", last - 1)
          .write({last, s.stage.sampler->epoch_of(last - 1), done.loss, done.accuracy, done.samples, evaluation_s, true});
    } else if (has_report) {
      files = fmt::format("report.json, metrics.jsonl and evaluations.jsonl left as they are ({})", why_not);
    } else {
      files = fmt::format("metrics.jsonl and evaluations.jsonl left as they are; {} has no report.json: the run ended "
                          "before writing it ({})",
                          dir, why_not);
    }
  } else if (has_report) {
    files = "report.json, metrics.jsonl and evaluations.jsonl left as they are";
    if (s.conn.world.rank == 0) fs::remove(pending, ec);
  } else {  // stopped after its last save and before its report (a kill, a node failure)
    files = fmt::format("metrics.jsonl and evaluations.jsonl left as they are; {} has no report.json: the run ended "
                        "before writing it",
                        dir);
  }
  log::info("nothing to train: {} is at step {} of {}; {} | test loss {:.4f} | test accuracy {:.2f}%",
            s.restored.resumed_from, s.restored.start_step, s.stage.total_steps, files, done.loss, 100.0 * done.accuracy);
  s.watchdog->stop();
  Result result;
  result.steps = s.stage.total_steps;
  result.first_step = s.restored.start_step;
  result.resumed_from = s.restored.resumed_from;
  result.train_loss = s.restored.epoch_loss.mean();
  result.test_loss = done.loss;
  result.test_accuracy = done.accuracy;
  return result;
}

// What happens at a step boundary, agreed by every rank: log (every run.log_every steps and the
// last), save (checkpoint.every_steps, checkpoint.every_minutes by rank 0's clock, a stop
// signal; never the last step, which the end of the run saves), stop (SIGUSR1/SIGTERM/SIGINT on any
// rank), commit (checkpoint.async: every rank's writer has finished the save in flight). One
// small all-reduce per step, on the host.
struct StepBoundary {
  bool log = false, save = false, stop = false, commit = false;
};

StepBoundary agree_at_step_end(Trainer::State& s, int64_t steps_done, const Stopwatch& since_save) {
  const auto& deck = s.deck;
  std::vector<double> flags{g_stop_signal.load() != 0 ? 1.0 : 0.0,
                            s.conn.world.rank == 0 && deck.checkpoint.every_minutes > 0 &&
                                    since_save.seconds() >= 60.0 * deck.checkpoint.every_minutes
                                ? 1.0
                                : 0.0,
                            s.background_save && !s.background_save->written() ? 1.0 : 0.0};
  s.conn.world_comm->reduce_numbers(flags, comm::Reduce::max);
  const bool by_steps = deck.checkpoint.every_steps > 0 && steps_done % deck.checkpoint.every_steps == 0;
  StepBoundary due;
  // A signal on the last step lets the run finish: its final save is the stop's save.
  due.stop = flags[0] != 0 && steps_done < s.stage.total_steps;
  due.save = (due.stop || flags[1] != 0 || by_steps) && steps_done < s.stage.total_steps;
  due.log = steps_done % deck.run.log_every == 0 || steps_done == s.stage.total_steps;
  due.commit = s.background_save && flags[2] == 0;  // every rank has one in flight, or none
  return due;
}

// When this run evaluates its test split: after each epoch and every run.eval_every_steps steps.
EvaluationSchedule evaluation_schedule(const Trainer::State& s) {
  return {s.deck.run.eval_every_steps, s.stage.sampler->steps_per_epoch(), s.stage.total_steps};
}

// When this run saves by itself: checkpoint.every_steps, checkpoint.every_minutes.
SaveSchedule save_schedule(const Trainer::State& s) {
  return {s.deck.checkpoint.every_steps, 60.0 * s.deck.checkpoint.every_minutes, s.stage.total_steps};
}

std::string eta_text(double seconds) {
  const auto total = static_cast<int64_t>(seconds + 0.5);
  if (total >= 3600) return fmt::format("{}h{:02}m", total / 3600, (total / 60) % 60);
  return fmt::format("{}m{:02}s", total / 60, total % 60);
}

// The progress a run shows: the log line and metrics.jsonl (rank 0) every run.log_every steps,
// with the samples/s of the steps since the last one, and the Result's loss series.
class ProgressLog {
 public:
  ProgressLog(const Trainer::State& s, Result& result)
      : s_(s), result_(result), checkpoint_s_at_start_(s.times.checkpoint), window_checkpoint_s_(s.times.checkpoint) {
    // A run resumed at its last step trains nothing and writes no records (already_trained).
    if (s.conn.world.rank == 0 && s.restored.start_step < s.stage.total_steps) {
      metrics_ = std::make_unique<report::MetricsLog>(s.deck.run.output_dir + "/metrics.jsonl", s.restored.start_step);
      evaluations_ =
          std::make_unique<report::EvaluationLog>(s.deck.run.output_dir + "/evaluations.jsonl", s.restored.start_step);
    }
  }
  void step_done() { ++window_steps_; }
  // After an evaluation: its time is not the next window's.
  void restart_window() {
    window_.reset();
    window_steps_ = 0;
    window_checkpoint_s_ = s_.times.checkpoint;
  }
  // A periodic save started at a step boundary (the training it blocks: s.times.checkpoint).
  void save_started() { ++saves_started_; }
  void close() {
    metrics_.reset();
    evaluations_.reset();
  }
  // An evaluation's record in evaluations.jsonl (rank 0); its time per sample, for the ETA.
  void evaluated(const report::EvaluationRecord& record) {
    if (record.samples > 0) evaluation_s_per_sample_ = record.seconds / static_cast<double>(record.samples);
    if (!evaluations_) return;
    comm::FileIoScope io;
    evaluations_->write(record);
  }

  // `since_save_s`: the clock of checkpoint.every_minutes at this boundary.
  void log(Trainer::State& s, int64_t steps_done, int64_t epoch, double lr, const StepTally& tally, double since_save_s) {
    const auto& deck = s.deck;
    const double loss = replica_mean(s, tally.last_loss);
    const double rate = static_cast<double>(window_steps_ * deck.optim.global_batch) / window_.seconds();
    // The ETA's steps are timed without the saves in this window, which it counts on their own.
    const double step_s =
        std::max(0.0, window_.seconds() - (s.times.checkpoint - window_checkpoint_s_)) / static_cast<double>(window_steps_);
    const double eta = static_cast<double>(s.stage.total_steps - steps_done) * step_s +
                       saves_ahead_seconds(s, steps_done, step_s, since_save_s) +
                       evaluations_ahead_seconds(s, steps_done, step_s / static_cast<double>(deck.optim.global_batch));
    log::info("epoch {}/{} | step {}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} samples/s | ETA {}",
              epoch + 1, s.stage.epochs, steps_done, s.stage.total_steps, loss, lr, tally.last_norm, rate, eta_text(eta));
    warn_if_past_the_job_end(s, steps_done, eta);
    if (metrics_) {
      report::MetricsRecord record{steps_done, epoch, loss, lr, rate, tally.last_norm, {}, {}};
      if (s.stage.scaler) {
        record.loss_scale = s.stage.scaler->scale();
        record.skipped_steps = s.stage.scaler->skipped_steps();
      }
      comm::FileIoScope io;  // the watchdog's long limit: a file system may stall it
      slow_down_if_asked("TRIDENT_TEST_SLOW_RECORDS_MS", "a metrics.jsonl record");
      metrics_->write(record);
    }
    result_.logged_losses.emplace_back(steps_done, loss);
    result_.logged_grad_norms.push_back(tally.last_norm);
    restart_window();
  }

 private:
  // The evaluations still ahead at step boundary `steps_done` (its own included), timed as the
  // last one per sample. Before the run's first, a sample's evaluation is taken as 0.4 of its
  // training (`train_s_per_sample`): a forward alone, without the backward's twice as much work,
  // measured 0.37 (gpt_fortunes.ini) and 0.40 (fashion_mnist_ddp.ini) on the 2-core VM.
  double evaluations_ahead_seconds(const Trainer::State& s, int64_t steps_done, double train_s_per_sample) const {
    const auto ahead = evaluations_ahead(evaluation_schedule(s), steps_done);
    const int64_t split = samples_to_evaluate(s, 0), within = samples_to_evaluate(s, s.deck.run.eval_samples);
    const double per_sample = evaluation_s_per_sample_ > 0 ? evaluation_s_per_sample_ : 0.4 * train_s_per_sample;
    return per_sample * static_cast<double>(ahead.within_epochs * within + ahead.epoch_ends * split);
  }

  // From the second progress line on (the first window holds the run's warm-up): a run that will
  // not finish in its job (the job scripts pass its end, TRIDENT_JOB_END_TIME) is said early, with
  // where the job's stop signal will save it and how much longer a job would need; and said again
  // when it has fallen further behind (train/safe_stop's JobEndTelling).
  void warn_if_past_the_job_end(const Trainer::State& s, int64_t steps_done, double eta) {
    if (++lines_ < 2) return;
    const double lead = signal_lead_seconds();
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const auto stop = stop_before_the_end(job_end_time(), lead, now, eta, steps_done, s.stage.total_steps);
    if (!stop) return job_end_telling_.on_time();
    const JobEndTelling last_told = job_end_telling_;
    if (!job_end_telling_.tell(steps_done, stop->rest_s)) return;
    const std::string behind =
        last_told.told_before()
            ? fmt::format("this run has fallen further behind since step {} (past the stop signal it needed {} "
                          "then, {} now); ",
                          last_told.told_step(), eta_text(last_told.told_rest_s()), eta_text(stop->rest_s))
            : "";
    const ChainLinks chain = chain_links();
    const double limit = job_time_limit_seconds();
    if (chain.links > 0 && limit > 0) return tell_the_chain(s, chain, limit, lead, eta, *stop, behind);
    log::warn("{}this run will not finish in this job: {}. The run saves there and exits 3; a requeue or the next job "
              "of a chain (jobs/restart_chain.sh) continues from that checkpoint. To finish in one job, ask for about "
              "{} more (sbatch --time)",
              behind, past_the_stop_signal("the job's", eta, lead, *stop), eta_text(stop->rest_s));
  }

  // Where the ETA goes past `whose` stop signal: when it comes and at about which step.
  std::string past_the_stop_signal(const char* whose, double eta, double lead, const StopBeforeTheEnd& stop) const {
    return fmt::format("its ETA, {}, goes past {} stop signal, which comes in {} (TRIDENT_JOB_END_TIME less "
                       "TRIDENT_SIGNAL_LEAD_S {:g} s), at about step {} of {}",
                       eta_text(eta), whose, eta_text(stop.stop_in_s), lead, stop.step, s_.stage.total_steps);
  }

  // A link of a restart chain stops at its time limit by design: the chain is what must finish the
  // run. Said as a line when the links after this one are enough at this rate (which of them
  // finishes it), as a warning with the links missing when they are not; `behind` leads it when it
  // is said again.
  void tell_the_chain(const Trainer::State& s, const ChainLinks& chain, double limit, double lead, double eta,
                      const StopBeforeTheEnd& stop, const std::string& behind) {
    // A link starts up as this job did: the job script and srun's launch, then trident's own.
    const report::Lifetime none;
    const report::Lifetime& life = s.goodput ? s.goodput->record() : none;
    const double launch = life.launch_s, trident_startup = life.startup_s;
    const double startup = launch + trident_startup;
    const double rest = stop.rest_s;  // > 0: at least one link needed
    const ChainOutlook outlook = chain_outlook(rest, limit, lead, startup);
    const std::string where = past_the_stop_signal("this job's", eta, lead, stop);
    const std::string startup_parts =
        launch > 0 ? fmt::format(" (the job's launch {}, trident's {})", eta_text(launch), eta_text(trident_startup))
                   : "";
    const std::string per_link = fmt::format("the job's --time {} less its start-up {}{} and the signal's lead {:g} s",
                                             eta_text(limit), eta_text(startup), startup_parts, lead);
    if (outlook.links_needed < 0) {
      log::warn("{}this restart chain (link {} of {}) will not finish the run: {}, and a link after it trains nothing "
                "({}). Ask for a longer --time",
                behind, chain.link, chain.links, where, per_link);
    } else if (outlook.links_needed <= chain.after()) {
      log::info("{}link {} of {} of a restart chain: {}. The next link continues from that checkpoint; at this rate "
                "link {} finishes the run (each link trains about {}: {}) and cancels the links left",
                behind, chain.link, chain.links, where, chain.link + outlook.links_needed,
                eta_text(outlook.per_link_s), per_link);
    } else {
      const int64_t missing = outlook.links_needed - chain.after();
      const std::string after =
          chain.after() == 0
              ? fmt::format("and this is its last link; a link trains about {} ({}), and the run needs {} after this job",
                            eta_text(outlook.per_link_s), per_link, eta_text(rest))
              : fmt::format("and its {} link(s) after this one train about {} each ({}), {} in all, for the {} the run "
                            "needs after this job",
                            chain.after(), eta_text(outlook.per_link_s), per_link,
                            eta_text(outlook.per_link_s * static_cast<double>(chain.after())), eta_text(rest));
      log::warn("{}this restart chain will not finish the run: {}, {}. About {} more link(s) are needed: when this chain "
                "has ended, submit jobs/restart_chain.sh -n {} with the same arguments (it continues from the "
                "checkpoints), or ask for a longer --time",
                behind, where, after, missing, missing);
    }
  }

  // The saves still ahead at step boundary `steps_done`: each periodic one blocking training as
  // long as this run's have on average (a background save: its start, its copies and its
  // commit), and the final one as long as the last save took from its start to its commit (none
  // before the run's first).
  double saves_ahead_seconds(const Trainer::State& s, int64_t steps_done, double step_s, double since_save_s) const {
    const double per_save =
        saves_started_ > 0 ? (s.times.checkpoint - checkpoint_s_at_start_) / static_cast<double>(saves_started_) : 0.0;
    return per_save * static_cast<double>(periodic_saves_ahead(save_schedule(s), steps_done, step_s, since_save_s)) +
           s.last_save_s;
  }

  const Trainer::State& s_;
  Result& result_;
  std::unique_ptr<report::MetricsLog> metrics_;
  std::unique_ptr<report::EvaluationLog> evaluations_;
  const double checkpoint_s_at_start_;  // s.times.checkpoint when this run's training began
  Stopwatch window_;
  int64_t window_steps_ = 0;
  double window_checkpoint_s_;  // s.times.checkpoint when the window began
  int64_t saves_started_ = 0;   // this run's periodic saves
  int64_t lines_ = 0;           // progress lines this run
  JobEndTelling job_end_telling_;
  double evaluation_s_per_sample_ = 0;  // the last evaluation's
};

// The epoch's training micro-batches for this rank: only the first stage reads inputs and only
// the last reads labels; middle stages read nothing (null).
std::unique_ptr<data::Prefetcher> open_train_loader(Trainer::State& s, int64_t first, int64_t end) {
  const auto& pipe = *s.stage.pipeline;
  const auto& topo = *s.conn.topology;
  if (!pipe.first() && !pipe.last()) return nullptr;
  return data::make_train_loader(s.stage.train_split, *s.stage.sampler, first, end, s.stage.plan->micro_batch(), topo.dp_rank(), topo.dp(),
                                 static_cast<int>(s.deck.data.prefetch), pipe.first(), pipe.last(),
                                 /*pin_memory=*/s.conn.torch_device.is_cuda());
}

// What the run carries from step to step and epoch to epoch.
struct RunTotals {
  RunTotals(const Trainer::State& s, Result& result)
      : progress(s, result), profiler(s.deck.run.output_dir, s.conn.world.rank, s.conn.cuda_index) {
    if (s.stage.scaler) tally.skipped_steps = s.stage.scaler->skipped_steps();
  }
  ProgressLog progress;
  StepProfiler profiler;  // TRIDENT_PROFILE_STEPS
  StepTally tally;
  EpochLoss carried;  // the epoch's steps before this run's first, from the checkpoint resumed
  Evaluation last_eval;
  double train_seconds = 0;  // in training steps, this rank
  int64_t epoch_steps = 0;
  Stopwatch since_save;
  double step_seconds = 0;  // in train_step alone, this run
  int64_t steps_trained = 0;
  int64_t steps_done = 0;  // the step the run has reached
  int64_t saved_step = -1;  // the step of this run's last save (started, when in the background)
  double last_eval_s = 0;  // the longest stretch of the last evaluation between its checks for a signal
  bool signal_lead_warned = false;
  // What a stop takes on this rank: a mean step of this run (or, if longer, the stretch of an
  // evaluation between its checks for a signal) and a save as long as the last one; with
  // background saves (checkpoint.async with periodic saves), also the one it may find in flight
  // (as long as the last one).
  SafeStop safe_stop(const Trainer::State& s) const {
    const bool background_saves =
        s.deck.checkpoint.async && (s.deck.checkpoint.every_steps > 0 || s.deck.checkpoint.every_minutes > 0);
    return {steps_trained > 0 ? step_seconds / static_cast<double>(steps_trained) : 0.0, s.last_save_s, last_eval_s,
            background_saves ? s.last_save_s : 0.0};
  }
};

// The epoch's training loss so far (collective): what the checkpoint carried and this run's steps.
EpochLoss epoch_loss(Trainer::State& s, const RunTotals& run) {
  return {run.carried.sum + replica_mean(s, run.tally.epoch_loss_sum), run.carried.steps + run.epoch_steps};
}

// This lifetime's figures so far, for goodput.jsonl (rank 0's own). `loader`: the epoch's, whose
// waits are not yet in s.times. The steps' time leaves out their waits for a background save's
// copies, which are checkpoint time (counted twice, goodput's "other" went negative).
GoodputProgress goodput_progress(const Trainer::State& s, const RunTotals& run, const data::Prefetcher* loader = nullptr) {
  return {run.steps_done, run.step_seconds - s.copy_wait_in_steps_s, s.times.data_wait + (loader ? loader->wait_seconds() : 0.0), s.times.evaluation,
          s.times.checkpoint};
}

void update_goodput(const Trainer::State& s, const RunTotals& run, const data::Prefetcher* loader = nullptr) {
  if (!s.goodput) return;
  comm::FileIoScope io;
  s.goodput->update(goodput_progress(s, run, loader));
}

// An epoch's data waits join the run's as its loader goes, however the epoch ends.
struct DataWaitTally {
  const data::Prefetcher* loader;
  double& total;
  ~DataWaitTally() {
    if (loader) total += loader->wait_seconds();
  }
};

// After each save and evaluation: does the job's signal (TRIDENT_SIGNAL_LEAD_S) leave time for an
// evaluation, a step and a save? Rank 0 warns once, when it first does not.
void check_signal_lead(const Trainer::State& s, RunTotals& run) {
  if (run.signal_lead_warned) return;
  if (const std::string warning = signal_lead_warning(signal_lead_seconds(), run.safe_stop(s)); !warning.empty()) {
    log::warn("{}", warning);
    run.signal_lead_warned = true;
  }
}

// A stop signal's end of the run, after its step's save: exit 3, which the job scripts requeue.
[[noreturn]] void stop_by_signal(Trainer::State& s, RunTotals& run) {
  run.progress.close();
  s.watchdog->stop();
  throw StoppedBySignal(fmt::format("stopped by a signal after step {}; checkpoint committed in {}", run.steps_done,
                                    checkpoint_dir(s.deck)));
}

// The test split at a step boundary: after an epoch (`end_of_epoch`; the epoch's line) or every
// run.eval_every_steps steps within one (the step's line), each a record in evaluations.jsonl.
// A stop signal during it ends the run at that step, saved, without the evaluation (it is not in
// the checkpoint: the resumed run goes on with the next step). The last epoch's evaluation is the
// run's result, after the final save, so a signal lets that one finish. It changes nothing the
// training uses: a run trains the same with or without the evaluations within its epochs.
// Returns the evaluation's seconds (s.times.evaluation's share of it).
double evaluate_at_boundary(Trainer::State& s, int64_t epoch, RunTotals& run, bool end_of_epoch,
                            const data::Prefetcher* loader = nullptr) {
  const bool stoppable = run.steps_done < s.stage.total_steps;
  Evaluation evaluation;
  double seconds = 0;
  {
    ScopedTimer t(s.times.evaluation);  // (a fault during it counts too)
    evaluation = evaluate_test_split(s, 0, stoppable, end_of_epoch ? 0 : s.deck.run.eval_samples);
    seconds = t.seconds();
  }
  const int64_t split = s.stage.test_split->size();
  // (one of run.eval_samples' parts of the split must not stand for the whole split's)
  if (stoppable)
    run.last_eval_s = evaluation.samples == split ? evaluation.longest_unchecked_s
                                                  : std::max(run.last_eval_s, evaluation.longest_unchecked_s);
  if (evaluation.stopped) {
    log::info("{}: its evaluation of the test split is left unfinished for a stop signal",
              end_of_epoch ? fmt::format("epoch {}/{}", epoch + 1, s.stage.epochs)
                           : fmt::format("step {}/{}", run.steps_done, s.stage.total_steps));
    if (run.saved_step == run.steps_done)
      commit_background_save(s);
    else
      save_checkpoint(s, run.steps_done, epoch_loss(s, run));
    update_goodput(s, run, loader);
    stop_by_signal(s, run);
  }
  run.last_eval = evaluation;
  check_signal_lead(s, run);
  if (end_of_epoch)
    log::info("epoch {}/{} done | train loss {:.4f} | test loss {:.4f} | test accuracy {:.2f}%", epoch + 1,
              s.stage.epochs, epoch_loss(s, run).mean(), evaluation.loss, 100.0 * evaluation.accuracy);
  else
    log::info("epoch {}/{} | step {}/{} | test loss {:.4f} | test accuracy {:.2f}% | {} evaluated in {:.2f} s",
              epoch + 1, s.stage.epochs, run.steps_done, s.stage.total_steps, evaluation.loss,
              100.0 * evaluation.accuracy,
              evaluation.samples == split ? fmt::format("{} samples", split)
                                          : fmt::format("{} of {} samples", evaluation.samples, split),
              seconds);
  run.progress.evaluated(
      {run.steps_done, epoch, evaluation.loss, evaluation.accuracy, evaluation.samples, seconds, end_of_epoch});
  run.progress.restart_window();  // the evaluation's time is not the next window's
  update_goodput(s, run, loader);
  return seconds;
}

// Steps [first, end) of epoch `epoch`: each trained, then the boundary's agreed log, save or stop.
void train_epoch(Trainer::State& s, int64_t epoch, int64_t first, int64_t end, RunTotals& run) {
  const auto loader = open_train_loader(s, first, end);
  const DataWaitTally waits{loader.get(), s.times.data_wait};
  Stopwatch epoch_watch;
  double evaluation_s = 0;  // in the epoch's own evaluations (run.eval_every_steps)
  if (s.goodput) s.goodput->startup_ends();
  run.tally.epoch_loss_sum = 0;
  if (s.device_step) s.device_step->reset_loss_sum();
  run.epoch_steps = 0;
  // Resumed inside this epoch: its earlier steps' losses come from the checkpoint.
  const int64_t earlier_steps = first - epoch * s.stage.sampler->steps_per_epoch();
  const bool resumed_here = first == s.restored.start_step && earlier_steps > 0;
  run.carried = resumed_here && s.restored.epoch_loss.steps == earlier_steps ? s.restored.epoch_loss : EpochLoss{};
  for (int64_t step = first; step < end; ++step) {
    run.profiler.before_step(step);
    const bool writing = s.background_save && !s.background_save->written();
    Stopwatch step_watch;
    train_step(s, step, loader.get(), run.tally);
    slow_steps_if_asked(step + 1);
    const double step_s = step_watch.seconds();
    run.step_seconds += step_s;
    if (writing) {
      s.step_s_while_writing += step_s;
      ++s.steps_while_writing;
    }
    ++run.steps_trained;
    run.steps_done = step + 1;
    run.profiler.after_step(step);
    ++run.epoch_steps;
    run.progress.step_done();
    comm::progress().step.store(step + 1, std::memory_order_relaxed);
    stall_if_asked(s.conn.world.rank, step + 1);
    const StepBoundary due = agree_at_step_end(s, step + 1, run.since_save);
    // The device's decisions reach the host where the host needs them (a divergence stops here),
    // also before an evaluation, which a stop signal may end with a save of this step.
    const bool evaluation_due = evaluation_schedule(s).within_epoch_due(step + 1);
    if (s.device_step && (due.log || due.save || due.stop || evaluation_due || step + 1 == end))
      read_device_step(s, run.tally);
    if (due.log) run.progress.log(s, step + 1, epoch, s.stage.schedule.at(step), run.tally, run.since_save.seconds());
    if (due.commit) {
      commit_background_save(s);
      check_signal_lead(s, run);
    }
    if (due.save) {
      // A stop's save is whole before the run exits 3 (save_checkpoint commits one in flight first).
      if (s.deck.checkpoint.async && !due.stop)
        start_background_save(s, step + 1, epoch_loss(s, run));
      else
        save_checkpoint(s, step + 1, epoch_loss(s, run));
      run.since_save.reset();
      run.saved_step = step + 1;
      run.progress.save_started();
      if (!s.background_save) check_signal_lead(s, run);
    }
    fault_if_asked(s.conn.world.rank, step + 1);
    if (due.log || due.save) update_goodput(s, run, loader.get());
    if (due.stop) stop_by_signal(s, run);
    if (evaluation_due) evaluation_s += evaluate_at_boundary(s, epoch, run, /*end_of_epoch=*/false, loader.get());
  }
  run.train_seconds += epoch_watch.seconds() - evaluation_s;  // (samples/s is the training steps')
}

// report.json's figures of the trained run (collective; s.times become the maxima over ranks),
// with run.last_eval's test figures, but the watchdog's CPU time: the rest of `result` too.
report::Summary summarize_trained_run(Trainer::State& s, RunTotals& run, Result& result, const Stopwatch& wall) {
  result.steps = s.stage.total_steps;
  result.train_loss = epoch_loss(s, run).mean();  // (the final save is train_all's, before the last evaluation)
  result.test_loss = run.last_eval.loss;
  result.test_accuracy = run.last_eval.accuracy;
  result.micro_steps_replayed = s.stage.pipeline->micro_steps_replayed();
  const double train_seconds = max_over_ranks(s, run.train_seconds);
  result.samples_per_s = static_cast<double>((s.stage.total_steps - s.restored.start_step) * s.deck.optim.global_batch) /
                         std::max(train_seconds, 1e-9);
  s.times.comm_exposed = s.stage.grad_sync->exposed_comm_seconds() - s.evaluation_comm_s;
  s.times.total = wall.seconds();
  report::Summary summary = summarize_run(s, result, train_seconds);
  // What a stop takes: the slowest rank's mean step and last save.
  summary.time_to_safe_stop_s = max_over_ranks(s, run.safe_stop(s).needed_s());
  // The mean step while a background save was written and otherwise, the slowest rank's.
  const auto mean = [](double seconds, int64_t steps) { return steps > 0 ? seconds / static_cast<double>(steps) : 0.0; };
  summary.steps_while_writing = s.steps_while_writing;
  summary.step_time_while_writing_s = max_over_ranks(s, mean(s.step_s_while_writing, s.steps_while_writing));
  summary.step_time_otherwise_s = max_over_ranks(
      s, mean(run.step_seconds - s.step_s_while_writing, run.steps_trained - s.steps_while_writing));
  summary.watchdog_timeout_s = s.watchdog->enabled() ? s.deck.run.fail_timeout_s : 0.0;
  return summary;
}

// After the final save, before the last evaluation: report.pending.json (rank 0), which a job
// killed during that evaluation leaves for its requeue to complete (already_trained).
void write_pending_report(Trainer::State& s, RunTotals& run, const std::string& checkpoint, const Stopwatch& wall) {
  const report::PhaseTimes own = s.times;  // this rank's, which the evaluation goes on adding to
  Result figures;
  report::Summary summary = summarize_trained_run(s, run, figures, wall);
  summary.watchdog_cpu_s = max_over_ranks(s, s.watchdog->thread_cpu_seconds());  // so far
  s.times = own;
  if (s.conn.world.rank != 0) return;
  comm::FileIoScope io;
  if (const std::string why = report::write_pending_report(pending_report_path(s), summary, checkpoint); !why.empty())
    log::warn("{} not written ({}): a job killed during the last evaluation would leave no report.json",
              pending_report_path(s), why);
}

// The end of the run (the trained model is saved already, before the last evaluation): the rest
// of `result`, report.json (rank 0).
void finish_run(Trainer::State& s, RunTotals& run, Result& result, const Stopwatch& wall) {
  check_signal_lead(s, run);  // for the next job of a chain, when no save came earlier
  run.progress.close();
  report::Summary summary = summarize_trained_run(s, run, result, wall);
  s.watchdog->stop();
  summary.watchdog_cpu_s = max_over_ranks(s, s.watchdog->thread_cpu_seconds());
  if (s.conn.world.rank == 0) {
    report::write_report_json(s.deck.run.output_dir + "/report.json", summary);
    std::error_code ec;
    std::filesystem::remove(pending_report_path(s), ec);
  }
  const int64_t first = s.restored.start_step;  // a resumed run trained only the steps after it
  log::info("done: {} in {:.1f} s | {:.0f} samples/s in training steps | test accuracy {:.2f}% | report {}/report.json",
            first > 0 ? fmt::format("steps {}..{} ({} trained after resuming)", first, s.stage.total_steps,
                                    s.stage.total_steps - first)
                      : fmt::format("{} steps", s.stage.total_steps),
            s.times.total, result.samples_per_s, 100.0 * result.test_accuracy, s.deck.run.output_dir);
}

// The run's training: each epoch's steps and an evaluation after each (the last one after the
// final save), then report.json; a resumed run starts inside the epoch of its checkpoint's step,
// and one resumed at its last step trains nothing.
void train_all(Trainer::State& s, RunTotals& run, Result& result, const Stopwatch& wall) {
  if (s.restored.start_step >= s.stage.total_steps) {
    result = already_trained(s);
    return;
  }
  const int64_t per_epoch = s.stage.sampler->steps_per_epoch();
  const int64_t first_epoch = s.stage.sampler->epoch_of(std::min(s.restored.start_step, s.stage.total_steps - 1));
  for (int64_t epoch = first_epoch; epoch < s.stage.epochs; ++epoch) {
    const int64_t first = std::max(epoch * per_epoch, s.restored.start_step);
    const int64_t end = std::min(s.stage.total_steps, (epoch + 1) * per_epoch);
    if (first >= end) continue;
    train_epoch(s, epoch, first, end, run);
    // The trained model is saved before the last evaluation, which a stop signal lets finish (it
    // is the run's result): a job killed during it (SIGKILL after Slurm's KillWait) loses that
    // evaluation, not the training since the last checkpoint.
    if (end == s.stage.total_steps) {
      write_pending_report(s, run, save_checkpoint(s, s.stage.total_steps, epoch_loss(s, run)), wall);
      update_goodput(s, run);  // (a kill during the evaluation keeps the final save's time)
    }
    evaluate_at_boundary(s, epoch, run, /*end_of_epoch=*/true);
  }
  finish_run(s, run, result, wall);
}

}  // namespace

// Every lifetime of a run leaves its goodput record (rank 0), with the exit code it ends with.
Result Trainer::run() {
  auto& s = *s_;
  Stopwatch wall;
  log_layout(s);
  if (s.conn.world.rank == 0)
    s.goodput = std::make_unique<GoodputLog>(s.deck.run.output_dir, s.restored.start_step, s.restored.new_run);
  // The fail-fast watchdog aborts the job from its own thread: rank 0's record still gets its exit code.
  struct AbortHook {
    explicit AbortHook(GoodputLog* log) {
      if (log) set_abort_hook([log](int code) { log->close_at_abort(code); });
    }
    ~AbortHook() { set_abort_hook({}); }
  } abort_hook(s.goodput.get());
  Result result;
  result.first_step = s.restored.start_step;
  result.resumed_from = s.restored.resumed_from;
  RunTotals run(s, result);
  run.steps_done = s.restored.start_step;
  try {
    try {
      train_all(s, run, result, wall);
    } catch (const Diverged&) {
      // Every rank stops at the same step, so they can still commit together the save in flight:
      // it holds a step before the divergence (saves start only after the step's checks passed).
      // A failed commit is reported and the divergence stays the run's error; one rank's fault
      // goes on to abort the job.
      try {
        commit_background_save(s);
      } catch (const AgreedFault& e) {
        log::warn("{}", e.what());
      }
      throw;
    }
  } catch (...) {
    if (s.goodput) s.goodput->close(exit_code_for(std::current_exception()), goodput_progress(s, run));
    // A fault of this rank alone ends the job here, before the state is torn down: its destructors
    // wait for a background save's writer, a pending collective and the data loader, and the other
    // ranks' watchdog would otherwise blame this rank for a hang before it said what went wrong.
    // (Rank 0's goodput record is closed above with its figures now; the abort hook would write
    // the last update's.)
    if (s.conn.world.size > 1 && is_own_fault(std::current_exception()))
      abort_job_for_fault(fault_text(std::current_exception(), &message_of));
    throw;
  }
  if (s.goodput) s.goodput->close(kExitOk, goodput_progress(s, run));
  return result;
}

}  // namespace trident::train
