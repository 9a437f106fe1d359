// Checkpoints: resume equals an uninterrupted run bit for bit (dp, ZeRO, pp); a checkpoint
// written under one layout loads under another and training continues as if uninterrupted;
// damage and truncation are detected, and --resume auto falls back to the previous good file.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"
#include "checkpoint_files.hpp"

using namespace trident;
using namespace trident::test_support;
namespace fs = std::filesystem;

namespace {

// N steps straight vs k steps, --resume auto, N - k more (inside one epoch): the same losses and
// epoch train loss, the same parameters in memory, and final checkpoints identical in every
// dataset (params, optimizer state, batch-norm buffers, every rank's RNG state, checksums).
// `steps` in all, stopped and resumed after `stop_at`.
void expect_bit_exact_resume(config::Deck deck, const std::string& name, int64_t steps = 6, int64_t stop_at = 3) {
  deck.run.max_steps = steps;
  const auto straight = run_in(deck, MPI_COMM_WORLD, dir_for(name + "_straight", MPI_COMM_WORLD), "never");
  auto first_part = deck;
  first_part.run.max_steps = stop_at;  // ends with a checkpoint at step stop_at
  const std::string dir = dir_for(name + "_stopped", MPI_COMM_WORLD);
  run_in(first_part, MPI_COMM_WORLD, dir, "never");
  const auto resumed = run_in(deck, MPI_COMM_WORLD, dir, "auto");
  EXPECT_EQ(resumed.result.first_step, stop_at);
  const auto after = static_cast<size_t>(steps - stop_at);
  ASSERT_EQ(resumed.result.logged_losses.size(), after);
  for (size_t i = 0; i < after; ++i)
    EXPECT_EQ(resumed.result.logged_losses[i], straight.result.logged_losses[i + static_cast<size_t>(stop_at)])
        << name << " step " << static_cast<int64_t>(i) + stop_at + 1;
  // The epoch's train loss (report.json's final.train_loss) is over all six steps, the three
  // before the checkpoint included; summed in another order, so equal up to rounding.
  EXPECT_NEAR(resumed.result.train_loss, straight.result.train_loss, 1e-12 * std::abs(straight.result.train_loss))
      << name;
  ASSERT_EQ(resumed.params.size(), straight.params.size());
  for (size_t i = 0; i < straight.params.size(); ++i)
    EXPECT_TRUE(torch::equal(resumed.params[i].second, straight.params[i].second))
        << name << ": " << straight.params[i].first << " differs after resume";
  const std::string last = fmt::format("/checkpoints/step_{:07d}.h5", steps);
  expect_identical_checkpoints(straight.output_dir + last, dir + last, name + " (" + deck.model.kind + ")");
}

// Flips one byte of `file` inside the stored values of tensor `dataset`, `at` bytes into them.
void damage_tensor(const std::string& file, const std::string& dataset, haddr_t at = 100) {
  haddr_t offset = 0;
  {
    hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
    offset = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
  }
  ASSERT_NE(offset, HADDR_UNDEF);
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(offset + at));
  char byte = 0;
  io.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x5a);
  io.seekp(static_cast<std::streamoff>(offset + at));
  io.write(&byte, 1);
}

// The metadata of a checkpoint at step 1 written by this world (dp = every rank) of run `name`.
checkpoint::Meta step_one_of_this_world(const std::string& name) {
  checkpoint::Meta meta;
  meta.step = 1;
  meta.global_batch = 1;
  meta.world = world_size();
  meta.dp = world_size();
  meta.deck = "[run]\nname = " + name + "\n";
  return meta;
}

}  // namespace

TEST(Checkpoint, ResumeIsBitExactDataParallel) { expect_bit_exact_resume(tiny_deck("cnn", "ck_dp"), "ck_dp"); }

// Resumed at step 14 of a 16-step epoch: the resumed run finishes that epoch (its evaluation, its
// train loss from the checkpoint's partial sum), reshuffles for the next and goes on to step 20.
TEST(Checkpoint, ResumeIsBitExactAcrossAnEpochEnd) {
  expect_bit_exact_resume(tiny_deck("cnn", "ck_epoch_end"), "ck_epoch_end", 20, 14);
}

TEST(Checkpoint, ResumeIsBitExactEveryZeroStage) {
  for (int zero : {1, 2, 3}) {
    auto deck = tiny_deck("cnn", "ck_zero" + std::to_string(zero));  // batch norm: buffers in the file
    deck.parallel.zero = zero;
    expect_bit_exact_resume(deck, deck.run.name);
  }
}

// A save mid-run (checkpoint.every_steps) must not change what the ranks train with: 6 steps
// saving every 2 equal 6 steps saving only at the end, in every dataset of the final file.
TEST(Checkpoint, SavingDoesNotChangeTheTrainingPath) {
  auto deck = tiny_deck("cnn", "ck_saving");
  deck.run.max_steps = 6;
  const auto quiet = run_in(deck, MPI_COMM_WORLD, dir_for("ck_saving_quiet", MPI_COMM_WORLD), "never");
  deck.checkpoint.every_steps = 2;
  deck.checkpoint.keep_last = 5;
  const auto saving = run_in(deck, MPI_COMM_WORLD, dir_for("ck_saving_often", MPI_COMM_WORLD), "never");
  expect_identical_checkpoints(quiet.output_dir + "/checkpoints/step_0000006.h5",
                               saving.output_dir + "/checkpoints/step_0000006.h5", "ck_saving (cnn)");
}

// checkpoint.async: saves written by a background thread while training goes on are the files a
// synchronous save writes (every dataset and checksum, byte for byte), and training takes the
// same path (the final files match). The thread is slowed (50 ms before its copies and before
// its write), so the next update must wait for the copies (without that wait the file would hold
// the next step's parameters) and, saving every step, each save waits for the one in flight;
// ZeRO-3 saves partitioned parameters.
TEST(Checkpoint, BackgroundSavesWriteTheSameFilesAsSynchronousOnes) {
  setenv("TRIDENT_TEST_SLOW_BACKGROUND_SAVE_MS", "50", 1);
  for (const auto& [zero, every] : {std::pair<int, int>{0, 1}, {3, 2}}) {
    auto deck = tiny_deck("cnn", "ck_async");  // batch norm: buffers in the file
    deck.run.max_steps = 6;
    deck.parallel.zero = zero;
    deck.checkpoint.every_steps = every;
    deck.checkpoint.keep_last = 6;
    const std::string name = "ck_async_zero" + std::to_string(zero);
    deck.checkpoint.async = false;
    const auto sync = run_in(deck, MPI_COMM_WORLD, dir_for(name + "_sync", MPI_COMM_WORLD), "never");
    deck.checkpoint.async = true;
    const auto async = run_in(deck, MPI_COMM_WORLD, dir_for(name + "_async", MPI_COMM_WORLD), "never");
    for (int step = every; step <= 6; step += every) {
      const std::string file = fmt::format("/checkpoints/step_{:07d}.h5", step);
      ASSERT_TRUE(fs::exists(async.output_dir + file)) << name << ": no " << file;
      expect_identical_checkpoints(sync.output_dir + file, async.output_dir + file, name + " step " + std::to_string(step));
    }
  }
  unsetenv("TRIDENT_TEST_SLOW_BACKGROUND_SAVE_MS");
}

TEST(Checkpoint, ResumeIsBitExactPipeline) {
  if (world_size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  auto deck = tiny_deck("cnn", "ck_pp");
  deck.parallel.pp = 2;
  expect_bit_exact_resume(deck, "ck_pp");
}

// Two chunks per rank: each rank's file blocks are its chunks' tensors, in its buffer's order.
TEST(Checkpoint, ResumeIsBitExactInterleavedPipeline) {
  if (world_size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  auto deck = tiny_deck("mlp", "ck_interleaved");
  deck.model.hidden = "31,17,13";
  deck.parallel.pp = 2;
  deck.parallel.schedule = "interleaved";
  deck.parallel.virtual_stages = 2;
  expect_bit_exact_resume(deck, "ck_interleaved");
}

// A checkpoint written at step 3 by `writer` (the world's ranks, `deck` in another layout), read
// by one rank with plain DDP: the loaded parameters are the saved ones exactly, and three more
// steps match a run of `deck` that never stopped.
static void expect_one_rank_reads_back(const config::Deck& deck, config::Deck writer, const std::string& tag) {
  const auto uninterrupted = run_in(deck, MPI_COMM_SELF, dir_for(tag + "_straight", MPI_COMM_SELF), "never");
  writer.run.max_steps = 3;
  const std::string dir = dir_for(tag + "_written", MPI_COMM_WORLD);
  run_in(writer, MPI_COMM_WORLD, dir, "never");
  const std::string file = dir + "/checkpoints/step_0000003.h5";

  auto reader = deck;
  reader.run.output_dir = dir_for(tag + "_read", MPI_COMM_SELF);
  {  // right after loading: the saved parameters, compared with a fresh three-step run at dp 1
    auto three = deck;
    three.run.max_steps = 3;
    const auto reference = run_in(three, MPI_COMM_SELF, dir_for(tag + "_three", MPI_COMM_SELF), "never");
    train::Trainer loaded(reader, MPI_COMM_SELF, file);
    const auto params = loaded.full_parameters();
    ASSERT_EQ(params.size(), reference.params.size());
    Trained as_loaded;
    as_loaded.params = params;
    EXPECT_LE(max_relative_difference(as_loaded, reference), kLayoutTolerance) << tag;
  }
  const auto continued = run_in(deck, MPI_COMM_SELF, dir_for(tag + "_continued", MPI_COMM_SELF), file);
  EXPECT_EQ(continued.result.first_step, 3);
  EXPECT_LE(max_relative_difference(continued, uninterrupted), kLayoutTolerance) << tag;
}

// Written by dp = world with ZeRO-3 (and pp = 2 when the ranks allow).
TEST(Checkpoint, ReshardsToAnotherLayout) {
  auto deck = tiny_deck("mlp", "ck_reshard");
  deck.model.hidden = "31,17";
  deck.run.max_steps = 6;
  auto writer = deck;
  writer.parallel.zero = 3;
  if (world_size() % 2 == 0 && world_size() >= 2) writer.parallel.pp = 2;
  expect_one_rank_reads_back(deck, writer, "ck_reshard");
}

// Written by an interleaved pipeline (each rank's two chunks in one buffer) with ZeRO-1.
TEST(Checkpoint, InterleavedReshardsToOneRank) {
  if (world_size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  auto deck = tiny_deck("mlp", "ck_reshard_interleaved");
  deck.model.hidden = "31,17,13";
  deck.run.max_steps = 6;
  auto writer = deck;
  writer.parallel.pp = 2;
  writer.parallel.zero = 1;
  writer.parallel.schedule = "interleaved";
  writer.parallel.virtual_stages = 2;
  expect_one_rank_reads_back(deck, writer, "ck_reshard_interleaved");
}

TEST(Checkpoint, DamageIsDetectedAndAutoFallsBack) {
  auto deck = tiny_deck("mlp", "ck_damage");
  deck.run.max_steps = 4;
  deck.checkpoint.every_steps = 2;
  deck.checkpoint.keep_last = 3;
  const std::string dir = dir_for("ck_damage", MPI_COMM_WORLD);
  run_in(deck, MPI_COMM_WORLD, dir, "never");
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    const std::string good = dir + "/checkpoints/step_0000002.h5", last = dir + "/checkpoints/step_0000004.h5";
    ASSERT_EQ(checkpoint::verify(last), "");
    // Flip one byte inside the stored values of a tensor.
    const auto damaged = shared_scratch_dir() + "/damaged.h5";
    fs::copy_file(last, damaged, fs::copy_options::overwrite_existing);
    damage_tensor(damaged, "/params/fc1.linear.weight");
    const auto problem = checkpoint::verify(damaged);
    EXPECT_NE(problem.find("tensor /params/fc1.linear.weight is damaged"), std::string::npos) << problem;
    // A truncated file.
    const auto truncated = shared_scratch_dir() + "/truncated.h5";
    fs::copy_file(last, truncated, fs::copy_options::overwrite_existing);
    fs::resize_file(truncated, fs::file_size(truncated) / 2);
    EXPECT_NE(checkpoint::verify(truncated), "");
    fs::copy_file(damaged, last, fs::copy_options::overwrite_existing);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // --resume auto skips a damaged latest and takes the previous good one: the ranks share the
  // checking out, and whichever rank met the damaged block, every rank gets the verdict.
  const std::string good = dir + "/checkpoints/step_0000002.h5", last = dir + "/checkpoints/step_0000004.h5";
  std::string note;
  EXPECT_EQ(checkpoint::resolve_resume(dir + "/checkpoints", "auto", note, MPI_COMM_WORLD), good) << note;
  EXPECT_NE(note.find("skipped checkpoint " + last + ": tensor /params/fc1.linear.weight is damaged"),
            std::string::npos) << note;
  // An explicit damaged path is refused, and so is reading the damaged tensor.
  EXPECT_THROW(checkpoint::resolve_resume(dir + "/checkpoints", last, note, MPI_COMM_WORLD), BadInput);
  checkpoint::Reader reader(last);
  EXPECT_THROW(reader.read_tensor("/params/fc1.linear.weight"), BadInput);
}

// The metadata a resume needs beyond the tensors survive a save and a read: step, cursor,
// optimizer steps, layout, and fp16's loss scale with its window position and skipped steps.
TEST(Checkpoint, MetadataRoundTripsIncludingTheLossScale) {
  checkpoint::Meta meta;
  meta.step = 7;
  meta.epoch = 1;
  meta.cursor = 7 * 32;
  meta.optimizer_steps = 7;
  meta.global_batch = 32;
  meta.world = world_size();
  meta.dp = world_size();
  meta.loss_scale = 16384;
  meta.loss_scale_good_steps = 123;
  meta.skipped_steps = 4;
  meta.epoch_loss_sum = 0.1 + 0.2;  // not a short decimal: the text must keep every bit
  meta.epoch_loss_steps = 3;
  meta.deck = "[run]\nname = meta\n";
  const std::vector<checkpoint::TensorEntry> params{{"w", {2, 3}, 0, 0, 6}};
  // Each rank writes a contiguous part of the one tensor.
  const int64_t begin = 6 * world_rank() / world_size(), end = 6 * (world_rank() + 1) / world_size();
  checkpoint::Shard shard;
  shard.begin = begin;
  shard.end = end;
  shard.params = torch::arange(begin, end, torch::kFloat);
  shard.states.emplace_back("m", shard.params * 2);
  const std::string dir = dir_for("ck_meta", MPI_COMM_WORLD) + "/checkpoints";
  const std::string path = checkpoint::save(dir, meta, params, {"m"}, {}, shard, MPI_COMM_WORLD, {2, {}});
  checkpoint::Reader reader(path);
  const auto& read = reader.meta();
  EXPECT_EQ(read.step, 7);
  EXPECT_EQ(read.cursor, 224);
  EXPECT_EQ(read.optimizer_steps, 7);
  EXPECT_EQ(read.world, world_size());
  EXPECT_EQ(read.loss_scale, 16384.0);
  EXPECT_EQ(read.loss_scale_good_steps, 123);
  EXPECT_EQ(read.skipped_steps, 4);
  EXPECT_EQ(read.epoch_loss_sum, 0.1 + 0.2);
  EXPECT_EQ(read.epoch_loss_steps, 3);
  EXPECT_TRUE(torch::equal(reader.read_flat("params", params, 0, 6), torch::arange(0, 6, torch::kFloat)));
  EXPECT_TRUE(torch::equal(reader.read_flat("optim/m", params, 0, 6), torch::arange(0, 6, torch::kFloat) * 2));
}

// Tensors larger than the writer's largest single write (1 MB) are written in pieces, from any
// offset a partition boundary gives: what is read back equals what was written, element for
// element, and the file verifies.
TEST(Checkpoint, TensorsLargerThanOneWriteRoundTripExactly) {
  const checkpoint::Meta meta = step_one_of_this_world("pieces");
  // 3 MB + 5 elements, then 1.5 MB: every rank's share starts and ends off a piece boundary.
  const int64_t a = 3 * (int64_t{1} << 18) + 5, b = 3 * (int64_t{1} << 17) + 1;
  const std::vector<checkpoint::TensorEntry> params{{"a", {a}, 0, 0, a}, {"b", {b / 7, 7}, 0, a, b - b % 7}};
  const int64_t used = a + b - b % 7;
  const int64_t begin = used * world_rank() / world_size() + (world_rank() > 0 ? 3 : 0);
  const int64_t end = world_rank() + 1 == world_size() ? used : used * (world_rank() + 1) / world_size() + 3;
  checkpoint::Shard shard;
  shard.begin = begin;
  shard.end = end;
  torch::manual_seed(5);  // the same tensor on every rank, each writing its share
  const at::Tensor all = torch::randn({used});
  shard.params = all.narrow(0, begin, end - begin).clone();
  shard.states.emplace_back("m", shard.params * -3);
  const std::string dir = dir_for("ck_pieces", MPI_COMM_WORLD) + "/checkpoints";
  const std::string path = checkpoint::save(dir, meta, params, {"m"}, {}, shard, MPI_COMM_WORLD, {2, {}});
  checkpoint::Reader reader(path);
  EXPECT_TRUE(torch::equal(reader.read_flat("params", params, 0, used), all));
  EXPECT_TRUE(torch::equal(reader.read_flat("optim/m", params, 0, used), all * -3));
  // Into place: straight into host fp32; into anything else (a GPU's state; here a strided view)
  // through a host buffer a chunk at a time, the chunks ending off the checksummed blocks' ends.
  at::Tensor into = torch::zeros({used - 3});
  reader.read_flat_into("optim/m", params, 3, used, into);
  EXPECT_TRUE(torch::equal(into, all.narrow(0, 3, used - 3) * -3));
  at::Tensor every_other = torch::zeros({2 * (used - 3)}).slice(0, 0, 2 * (used - 3), 2);
  reader.read_flat_into("params", params, 3, used, every_other, /*chunk_elements=*/100003);
  EXPECT_TRUE(torch::equal(every_other, all.narrow(0, 3, used - 3)));
  at::Tensor rows = torch::zeros({1, used - 3});  // not 1-D: also a chunk at a time, flattened
  reader.read_flat_into("params", params, 3, used, rows);
  EXPECT_TRUE(torch::equal(rows.view({-1}), all.narrow(0, 3, used - 3)));
  EXPECT_ANY_THROW(reader.read_flat_into("params", params, 0, used, into));  // too small
  EXPECT_EQ(checkpoint::verify(path), "");
}

// A resume checks each block's CRC-32 once: a rank's load does not checksum again the blocks the
// rank checked while verifying the file (the ranks share them out), and reads the same values;
// it checks all the others. A file replaced since it was verified is checked in full: a copy with
// one byte damaged, renamed over it, is refused.
TEST(Checkpoint, ALoadChecksOnlyTheBlocksItsRankDidNotVerify) {
  const checkpoint::Meta meta = step_one_of_this_world("verified");
  const int64_t n = 3 * (int64_t{1} << 18) + 5;  // 3 MB, in several writes
  const std::vector<checkpoint::TensorEntry> params{{"a", {n}, 0, 0, n}};
  const int64_t begin = n * world_rank() / world_size(), end = n * (world_rank() + 1) / world_size();
  torch::manual_seed(11);
  const at::Tensor all = torch::randn({n});
  checkpoint::Shard shard;
  shard.begin = begin;
  shard.end = end;
  shard.params = all.narrow(0, begin, end - begin).clone();
  shard.states.emplace_back("m", shard.params * 2);
  const std::string dir = dir_for("ck_verified", MPI_COMM_WORLD) + "/checkpoints";
  const std::string path = checkpoint::save(dir, meta, params, {"m"}, {}, shard, MPI_COMM_WORLD, {2, {}});
  auto read_all = [&](const checkpoint::Reader& reader) {
    EXPECT_TRUE(torch::equal(reader.read_flat("params", params, 0, n), all));
    EXPECT_TRUE(torch::equal(reader.read_flat("optim/m", params, 0, n), all * 2));
  };
  checkpoint::Reader unverified(path);
  read_all(unverified);
  const int64_t blocks = unverified.blocks_checksummed();  // every block of the file
  EXPECT_EQ(blocks, 2 * world_size());  // a block per tensor and writing rank

  checkpoint::VerifiedBlocks verified;
  std::string note;
  ASSERT_EQ(checkpoint::resolve_resume(dir, "auto", note, MPI_COMM_WORLD, &verified), path) << note;
  int64_t shared_out = static_cast<int64_t>(verified.size());
  MPI_Allreduce(MPI_IN_PLACE, &shared_out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(shared_out, blocks) << "the ranks' verified blocks are not the file's blocks, each once";
  checkpoint::Reader reader(path, &verified);
  read_all(reader);
  EXPECT_EQ(reader.blocks_checksummed(), blocks - static_cast<int64_t>(verified.size()));
  // A range ending inside blocks (a ZeRO partition's, another layout's): the part of each.
  EXPECT_TRUE(torch::equal(reader.read_flat("params", params, n / 3, 2 * n / 3),
                           all.narrow(0, n / 3, 2 * n / 3 - n / 3)));
  if (world_size() == 1) {
    EXPECT_EQ(reader.blocks_checksummed(), 0);
  }

  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    fs::copy_file(path, path + ".new");
    damage_tensor(path + ".new", "/params/a");
    fs::rename(path + ".new", path);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  checkpoint::Reader replaced(path, &verified);
  EXPECT_THROW(replaced.read_flat("params", params, 0, n), BadInput);
  EXPECT_THROW(checkpoint::resolve_resume(dir, path, note, MPI_COMM_WORLD, &verified), BadInput);
  EXPECT_EQ(verified.size(), 0u);
}

// Each rank's random stream continues where it was: the numbers drawn after a resume equal the
// ones an uninterrupted run would draw next, on every rank (their streams differ).
TEST(Checkpoint, EveryRanksRandomStreamIsRestored) {
  auto deck = tiny_deck("mlp", "ck_rng");
  deck.run.max_steps = 3;
  const std::string dir = dir_for("ck_rng", MPI_COMM_WORLD);
  deck.run.output_dir = dir;
  {
    train::Trainer first(deck, MPI_COMM_WORLD, "never");  // seeds and initialises the model
    torch::manual_seed(1000 + world_rank());            // then a different stream per rank
    first.run();                                        // saves at step 3 with the generator as it is
  }
  const auto expected = torch::rand({4});  // what the stream gives next
  torch::manual_seed(42);                       // disturb it
  train::Trainer resumed(deck, MPI_COMM_WORLD, dir + "/checkpoints/step_0000003.h5");
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected)) << "rank " << world_rank();
  // The ranks' streams really differ (so each got its own back, not rank 0's).
  auto mine = expected.clone(), first = expected.clone();
  MPI_Bcast(first.data_ptr(), 4, MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (world_rank() > 0) {
    EXPECT_FALSE(torch::equal(mine, first));
  }
}
