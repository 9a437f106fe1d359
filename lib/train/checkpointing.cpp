// A Trainer's checkpoints: save_checkpoint at step boundaries, and restore(), the last of its
// three construction steps (trainer_state.hpp).
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <optional>

#include "checkpoint/checkpoint.hpp"
#include "comm/progress.hpp"
#include "comm/world.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "parallel/element_partition.hpp"
#include "train/trainer_state.hpp"

namespace trident::train {

namespace {

// This rank's CUDA generator (its device's default one).
at::Generator cuda_generator(const Connection& conn) { return at::globalContext().defaultGenerator(conn.torch_device); }

// This rank's part of the stage's flat buffers: the same partition ZeRO uses, so under
// zero 0 the dp replicas split the writing and under ZeRO each writes what it owns.
data::Range owned_range(const Connection& conn, const StageParts& st) {
  return parallel::ElementPartition(st.flat->numel(), conn.topology->dp()).range(conn.topology->dp_rank());
}

// The deck the checkpoint was written with (its resolved deck), against this run's: the changed
// keys for the log (a changed run.seed changes the data order from here on), and what refuses the
// resume though every tensor's shape matches. A deck this trident cannot read is left to the
// tensor checks.
struct DeckComparison {
  std::string changes;  // "" for none
  // Set when SGD gains momentum (written with optim.momentum = 0, which keeps no buffer): the
  // buffer starts at zero, as a fresh run's does (its first step is PyTorch's).
  bool momentum_started = false;
  // Another model of the same shapes (model.heads), or another optimizer (AdamW's moments mean
  // nothing to SGD and the reverse). Said after the shape checks: a model whose shapes changed too
  // is refused by them, with every changed key, not by its heads alone.
  std::string refusal;
};

DeckComparison compare_decks(const config::Deck& deck, const checkpoint::Meta& meta, const std::string& path) {
  DeckComparison out;
  config::Deck written;
  try {
    written = config::parse_written_deck(meta.deck, path);
  } catch (const BadInput&) {
    return out;
  }
  if (written.model.kind == "gpt" && deck.model.kind == "gpt" && written.model.heads != deck.model.heads)
    out.refusal = fmt::format("checkpoint {}: written with model.heads = {}, this run's is {}: the same weights split "
                              "into other heads are another model; resume with model.heads = {}, or start fresh with "
                              "--resume never",
                              path, written.model.heads, deck.model.heads, written.model.heads);
  else if (written.optim.name != deck.optim.name)
    out.refusal = fmt::format("checkpoint {}: written with optim.name = {}, this run's is {}: its optimizer state does "
                              "not carry over; resume with optim.name = {}, or start fresh with --resume never",
                              path, written.optim.name, deck.optim.name, written.optim.name);
  out.momentum_started = written.optim.name == "sgd" && written.optim.momentum == 0 && deck.optim.momentum != 0;
  const std::vector<std::string> changed = config::changed_keys(written, deck);
  if (changed.empty()) return out;
  out.changes = fmt::format("deck keys changed since the checkpoint was written: {}{}{}", fmt::join(changed, ", "),
                            written.run.seed != deck.run.seed
                                ? " (run.seed sets the data order: from here on it is not the uninterrupted run's)"
                                : "",
                            out.momentum_started ? ". SGD's momentum buffer, which the file does not hold, starts at zero"
                                                 : "");
  return out;
}

// What ranks compare to know they read the same checkpoint file.
std::string checkpoint_fingerprint(const std::string& path, const checkpoint::Meta& meta) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  return fmt::format("step {}, written by {} ranks, optimizer step {}, epoch loss sum {:.17g}, {} bytes", meta.step,
                     meta.world, meta.optimizer_steps, meta.epoch_loss_sum, ec ? 0 : bytes);
}

// Restores parameters, optimizer state, buffers and the step from `path`, whatever layout wrote it.
// `verified`: the blocks of `path` this rank checksummed while verifying it (not checked again).
Restored load_checkpoint(const config::Deck& deck, const Connection& conn, StageParts& st, const std::string& path,
                         const checkpoint::VerifiedBlocks* verified) {
  Restored restored;
  Stopwatch watch;
  std::string error;
  std::optional<checkpoint::Reader> opened;
  try {
    opened.emplace(path, verified);
  } catch (const BadInput& e) {
    error = e.what();
  }
  // Every rank must read the same file: a node's stale copy of the path would train a mix of two
  // steps' models and fault, if at all, far from the cause.
  const std::string my_file = error.empty() ? checkpoint_fingerprint(path, opened->meta()) : "";
  const std::string differs = comm::differs_from_most(conn.world.comm, my_file, "file");
  if (error.empty() && !differs.empty())
    error = fmt::format("checkpoint {}: {}. Every rank must read the same checkpoint: is a node's copy out of date?",
                        path, differs);
  comm::agree_or_throw(conn.world.comm, error);
  try {
    const checkpoint::Reader& reader = *opened;
    const auto& meta = reader.meta();
    // Another model first: its batch and step count would only mislead.
    const DeckComparison decks = compare_decks(deck, meta, path);
    restored.deck_changes = decks.changes;
    try {
      reader.check_shapes("params", st.plan->placed_parameters());
      reader.check_shapes("buffers", st.plan->placed_buffers());
    } catch (const BadInput& e) {  // another model: what the deck changed says how
      if (restored.deck_changes.empty()) throw;
      fatal_all(fmt::format("{} ({})", e.what(), restored.deck_changes));
    }
    if (!decks.refusal.empty()) fatal_all(decks.refusal);
    if (meta.global_batch != deck.optim.global_batch)
      fatal_all(fmt::format("checkpoint {}: written with optim.global_batch = {}; resuming needs the same global "
                            "batch (its data cursor is sample {}): resume with optim.global_batch = {}, or start "
                            "fresh with --resume never",
                            path, meta.global_batch, meta.cursor, meta.global_batch));
    if (meta.step > st.total_steps)
      fatal_all(fmt::format("checkpoint {}: it is at step {}, beyond this run's {} steps (run.max_steps / "
                            "run.epochs); raise them or start fresh with --resume never", path, meta.step,
                            st.total_steps));
    const auto mine = st.plan->stage_parameters_placed(conn.topology->stage());
    const int64_t n = st.flat->numel();
    const auto range = owned_range(conn, st);
    torch::NoGradGuard no_grad;
    // Straight into place on the host (a fresh buffer and a copy touched every byte of the state
    // twice, and held the largest tensor twice); to a device a chunk at a time.
    if (st.grad_sync->params_partitioned())
      reader.read_flat_into("params", mine, range.begin, range.end, st.grad_sync->optimizer_params());
    else
      reader.read_flat_into("params", mine, 0, n, st.grad_sync->full_params());
    st.optimizer->allocate_state(st.grad_sync->optimizer_params());
    for (auto& [name, state] : st.optimizer->state()) {
      if (decks.momentum_started && name == "momentum_buffer") continue;  // zero, as allocated
      try {
        reader.check_shapes("optim/" + name, st.plan->placed_parameters());
      } catch (const BadInput& e) {  // the optimizer state this run needs: what the deck changed says why
        if (restored.deck_changes.empty()) throw;
        fatal_all(fmt::format("{} ({})", e.what(), restored.deck_changes));
      }
      const bool part = st.grad_sync->sharded();
      reader.read_flat_into("optim/" + name, mine, part ? range.begin : 0, part ? range.end : n, state);
    }
    st.optimizer->set_steps(meta.optimizer_steps);
    // fp16 continues with the saved loss scale (a checkpoint of an fp32/bf16 run has none: the
    // scaler starts afresh).
    if (st.scaler && meta.loss_scale > 0)
      st.scaler->restore(meta.loss_scale, meta.loss_scale_good_steps, meta.skipped_steps);
    for (auto& b : st.model->named_buffers())
      if (b.value().is_floating_point()) b.value().copy_(reader.read_tensor("/buffers/" + b.key()).view(b.value().sizes()));
    // Every rank continues its own random stream when the world size is the one that wrote the
    // file; under another world size the streams cannot map one to one and stay as seeded.
    // (Training itself draws no random numbers after initialisation: the data order comes
    // from run.seed and the step, so resuming is exact either way.)
    if (meta.world == conn.world.size) {
      if (const at::Tensor rng = reader.read_rng_state(conn.world.rank); rng.defined()) {
        at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle on the default one
        std::lock_guard<std::mutex> lock(generator.mutex());
        generator.set_state(rng);
      }
      // The CUDA generator likewise, when this run and the writer both trained on GPUs (a file
      // written on CPUs has none; a GPU file read on CPUs has one nobody needs).
      if (conn.torch_device.is_cuda())
        if (const at::Tensor rng = reader.read_rng_state(conn.world.rank, "cuda"); rng.defined()) {
          at::Generator generator = cuda_generator(conn);
          std::lock_guard<std::mutex> lock(generator.mutex());
          generator.set_state(rng);
        }
    }
    restored.start_step = meta.step;
    restored.epoch_loss = {meta.epoch_loss_sum, meta.epoch_loss_steps};
    restored.bytes_read += 4.0 * static_cast<double>(n * (1 + static_cast<int64_t>(st.optimizer->state().size())));
  } catch (const BadInput& e) {
    error = e.what();
  }
  comm::agree_or_throw(conn.world.comm, error);
  restored.read_seconds = watch.seconds();
  restored.resumed_from = path;
  return restored;
}

}  // namespace

std::string checkpoint_dir(const config::Deck& deck) { return deck.run.output_dir + "/checkpoints"; }

namespace {

// What this rank saves of the stage, as training holds it: elements [begin, end) of the flat
// parameters and of each optimizer state (the partition of owned_range), the stage's buffers on
// its dp rank 0, the RNG states. `on_host`: GPU tensors copied to host memory first (the
// synchronous writer checksums and writes bytes through host pointers; on the CPU .cpu() is the
// tensor itself).
checkpoint::Shard live_shard(Trainer::State& s, bool on_host) {
  auto host = [&](const at::Tensor& t) { return on_host ? t.cpu() : t; };
  const auto range = owned_range(s.conn, s.stage);
  const int64_t n = range.end - range.begin;
  checkpoint::Shard shard;
  shard.stage = s.conn.topology->stage();
  shard.begin = range.begin;
  shard.end = range.end;
  shard.params = host(s.stage.grad_sync->params_partitioned() ? s.stage.grad_sync->optimizer_params()
                                                              : s.stage.grad_sync->full_params().narrow(0, range.begin, n));
  for (auto& [name, state] : s.stage.optimizer->state())
    shard.states.emplace_back(name, host(s.stage.grad_sync->sharded() ? state : state.narrow(0, range.begin, n)));
  if (s.conn.topology->dp_rank() == 0)
    for (const auto& b : s.stage.model->named_buffers())
      if (b.value().is_floating_point()) shard.buffers.emplace_back(b.key(), host(b.value()));
  shard.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  if (s.conn.torch_device.is_cuda()) shard.cuda_rng_state = cuda_generator(s.conn).get_state();
  return shard;
}

std::vector<std::string> state_names_of(Trainer::State& s) {
  std::vector<std::string> names;
  for (auto& st : s.stage.optimizer->state()) names.push_back(st.first);
  return names;
}

checkpoint::Meta meta_of(Trainer::State& s, int64_t step, const EpochLoss& loss) {
  checkpoint::Meta meta;
  meta.epoch_loss_sum = loss.sum;
  meta.epoch_loss_steps = loss.steps;
  meta.step = step;
  meta.epoch = s.stage.sampler->epoch_of(step);
  meta.cursor = s.stage.sampler->cursor_of(step);
  meta.optimizer_steps = s.stage.optimizer->steps();
  meta.global_batch = s.deck.optim.global_batch;
  meta.world = s.conn.world.size;
  meta.dp = s.conn.topology->dp();
  meta.pp = s.conn.topology->pp();
  meta.zero = static_cast<int>(s.deck.parallel.zero);
  meta.deck = config::deck_to_ini(s.deck);
  meta.trident_version = TRIDENT_VERSION;
  meta.torch_version = TORCH_VERSION;
  if (s.stage.scaler) {
    meta.loss_scale = s.stage.scaler->scale();
    meta.loss_scale_good_steps = s.stage.scaler->good_steps();
    meta.skipped_steps = s.stage.scaler->skipped_steps();
  }
  return meta;
}

// A committed save counted, `total_s` from its start to its commit (the training time it blocked
// is counted in s.times.checkpoint as it passes). A file of another run it replaced is this run's.
void count_save(Trainer::State& s, double total_s, const std::string& path) {
  auto& others = s.retention.not_this_runs;
  others.erase(std::remove(others.begin(), others.end(), std::filesystem::path(path).filename().string()), others.end());
  const auto range = owned_range(s.conn, s.stage);
  s.save_seconds += total_s;
  s.last_save_s = total_s;
  ++s.saves;
  s.bytes_written += sum_over_ranks(
      s, 4.0 * static_cast<double>((range.end - range.begin) * (1 + static_cast<int64_t>(s.stage.optimizer->state().size()))));
}

}  // namespace

std::string save_checkpoint(Trainer::State& s, int64_t step, const EpochLoss& loss) {
  commit_background_save(s);
  Stopwatch watch;
  const checkpoint::Shard shard = live_shard(s, /*on_host=*/true);  // (device copies: not file I/O)
  std::string path;
  {
    comm::FileIoScope io;  // the watchdog's long limit: a file system may stall a save
    path = checkpoint::save(checkpoint_dir(s.deck), meta_of(s, step, loss), s.stage.plan->placed_parameters(),
                            state_names_of(s), s.stage.plan->placed_buffers(), shard, s.conn.world.comm, s.retention);
  }
  const double seconds = watch.seconds();
  s.times.checkpoint += seconds;
  count_save(s, seconds, path);
  log::info("checkpoint {} written in {:.3f} s", path, seconds);
  return path;
}

void start_background_save(Trainer::State& s, int64_t step, const EpochLoss& loss) {
  if (s.background_save && !s.background_save->written())
    log::info("checkpoint: the save of step {} is still being written; the save of step {} waits for it",
              s.background_save->step(), step);
  commit_background_save(s);
  Stopwatch watch;
  checkpoint::Shard shard = live_shard(s, /*on_host=*/false);
  comm::FileIoScope io;  // the save's layout and its file's creation (rank 0) with the others waiting
  s.background_save = std::make_unique<checkpoint::BackgroundSave>(
      checkpoint_dir(s.deck), meta_of(s, step, loss), s.stage.plan->placed_parameters(), state_names_of(s),
      s.stage.plan->placed_buffers(), std::move(shard), s.snapshot, s.conn.world.comm, s.retention);
  s.background_start_s = watch.seconds();
  s.background_copy_wait_s = 0;
  s.times.checkpoint += s.background_start_s;
}

void commit_background_save(Trainer::State& s) {
  if (!s.background_save) return;
  auto save = std::move(s.background_save);  // gone even when the commit throws
  comm::FileIoScope io;  // waiting for this rank's writer, then the commit's renames and fsyncs
  Stopwatch watch;
  const double waited = save->wait();
  const std::string path = save->commit();
  const double blocked = watch.seconds();
  s.times.checkpoint += blocked;
  count_save(s, s.background_start_s + save->write_seconds() + (blocked - waited), path);
  log::info("checkpoint {} written in the background in {:.2f} s; it blocked training for {:.3f} s (layout {:.3f}, "
            "update waiting for the copies {:.3f}, waiting for the write {:.3f}, commit {:.3f})",
            path, s.last_save_s, s.background_start_s + s.background_copy_wait_s + blocked, s.background_start_s,
            s.background_copy_wait_s, waited, blocked - waited);
}


ResumeFrom resolve_resume(const config::Deck& deck, const Connection& conn, const std::string& resume) {
  // The ranks verify the file together (a bad PATH is bad input); that time counts as reading
  // it (report.json read_gb_per_s).
  std::string note, error;
  ResumeFrom from;
  Stopwatch verifying;
  try {
    from.path = checkpoint::resolve_resume(checkpoint_dir(deck), resume, note, conn.world.comm, &from.verified);
  } catch (const BadInput& e) {
    error = e.what();
  }
  comm::agree_or_throw(conn.world.comm, error);
  from.verify_seconds = verifying.seconds();
  if (resume != "never") from.note = note;
  return from;
}

namespace {

// Rank 0's part of retention_of: "" or why the other run's checkpoints could not be set aside.
std::string tidy_checkpoints_folder(const std::string& dir, int64_t start_step, bool locked,
                                    checkpoint::Retention& retention, std::string& resumed_from) {
  if (locked) {  // unguarded, they may be another live run's
    const auto aside = checkpoint::set_aside_other_runs(dir, start_step, resumed_from);
    if (!aside.moved.empty() && aside.failure.empty())
      log::info("checkpoints in {} of another run (this one starts at step {} from {}) moved to {}/previous, so that "
                "a requeue before this run's first save does not resume from them: {}",
                dir, start_step, resumed_from.empty() ? "scratch" : resumed_from, dir, fmt::join(aside.moved, ", "));
    if (!aside.replaced.empty())
      log::warn("removed the checkpoints an earlier start had moved to {}/previous: {}", dir,
                fmt::join(aside.replaced, ", "));
    if (!aside.brought_back.empty()) {
      log::info("{} moved back from {}/previous into {}: this run starts from it", aside.brought_back, dir, dir);
      resumed_from = (std::filesystem::path(dir) / aside.brought_back).string();  // where report.json finds it
    }
    if (!aside.note.empty()) log::warn("checkpoints in {} of another run: {}", dir, aside.note);
    for (const auto& kept : aside.kept_aside)
      log::warn("{}/{} was in the way of setting checkpoints aside: renamed, left as it is", dir, kept);
    // Left in place, a requeue before this run's first save (--resume auto) would resume from them.
    if (!aside.failure.empty())  // (before the unfinished saves are removed: a refused start changes nothing)
      return fmt::format("the checkpoints in {} of another run could not be set aside ({}); a requeue of this run "
                         "would resume from them. Make the folder's files movable and start again",
                         dir, aside.failure);
  }
  // Unguarded (no locks on this file system), an unfinished save may be another live run's.
  // Not the file this run resumes from, were it one of them (--resume naming a .tmp the user salvages).
  const auto unfinished =
      locked ? checkpoint::remove_unfinished_saves(dir, resumed_from) : checkpoint::unfinished_saves(dir, resumed_from);
  if (!unfinished.empty() && locked)
    log::info("removed the unfinished saves an earlier run of this folder left in {}: {}", dir,
              fmt::join(unfinished, ", "));
  else if (!unfinished.empty())
    log::warn("unfinished saves in {}, left as they are (without locks they may be another live run's): {}; remove "
              "them once no run uses this folder",
              dir, fmt::join(unfinished, ", "));
  retention.not_this_runs = checkpoint::step_files_after(dir, start_step);
  if (!retention.not_this_runs.empty())
    log::info("checkpoints in {} of later steps than this run's start (step {}), not this run's: {}; left as they are "
              "and not counted by checkpoint.keep_last (a save of the same step replaces one)",
              dir, start_step, fmt::join(retention.not_this_runs, ", "));
  return "";
}

}  // namespace

checkpoint::Retention retention_of(const config::Deck& deck, const Connection& conn, int64_t start_step, bool locked,
                                   std::string& resumed_from) {
  checkpoint::Retention retention;
  retention.keep_last = static_cast<int>(deck.checkpoint.keep_last);
  std::string failure;
  if (conn.world.rank == 0) {  // rank 0 commits and prunes
    try {
      failure = tidy_checkpoints_folder(checkpoint_dir(deck), start_step, locked, retention, resumed_from);
    } catch (const std::exception& e) {  // (a folder it cannot list): said on every rank, not rank 0's fault alone
      failure = fmt::format("{}: {}", checkpoint_dir(deck), e.what());
    }
  }
  comm::agree_or_throw(conn.world.comm, failure);
  resumed_from = comm::broadcast(conn.world.comm, resumed_from);  // (moved back from previous/ on rank 0)
  return retention;
}

Restored restore(const config::Deck& deck, const Connection& conn, StageParts& st, const ResumeFrom& from) {
  if (from.path.empty()) return {};
  Restored restored = load_checkpoint(deck, conn, st, from.path, &from.verified);
  restored.read_seconds += from.verify_seconds;
  return restored;
}

}  // namespace trident::train
