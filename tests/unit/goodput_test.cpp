// goodput.jsonl: the records a chain of process lifetimes leaves (a SIGKILL's open record closed
// by the next lifetime, work lost counted when it resumes) and their account against figures
// computed here by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "core/error.hpp"
#include "report/goodput.hpp"
#include "train/goodput_log.hpp"

using namespace trident;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("trident_goodput_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

report::Lifetime lifetime(double start, double end, std::optional<int> exit_code, int64_t first, int64_t last, double step_s) {
  report::Lifetime l;
  l.job = "job";
  l.start = start;
  l.end = end;
  l.exit_code = exit_code;
  l.first_step = first;
  l.last_step = last;
  l.step_s = step_s;
  return l;
}

}  // namespace

TEST(Goodput, AccountOfAChainAgainstHandComputation) {
  // Lifetime 1: 100 s, steps 0..60 in 60 s (10 s data waits), 5 s start-up, 4 s evaluation,
  // 6 s saves; SIGKILLed (no exit code) after its checkpoint at step 40.
  auto a = lifetime(1000, 1100, std::nullopt, 0, 60, 60.0);
  a.startup_s = 5, a.data_wait_s = 10, a.evaluation_s = 4, a.checkpoint_s = 6;
  // Lifetime 2 resumes at 40: 20 steps lost at lifetime 1's mean step (1 s); trains 40..100 in
  // 48 s (no waits), 12 s start-up, 3 s saves, 70 s wall; exit 0.
  auto b = lifetime(1500, 1570, 0, 40, 100, 48.0);
  b.startup_s = 12, b.checkpoint_s = 3, b.resumed_from_step = 40, b.work_lost_steps = 20, b.work_lost_s = 20.0;
  const report::GoodputAccount acc = report::account_goodput({a, b});
  EXPECT_DOUBLE_EQ(acc.wall_s, 170.0);
  EXPECT_DOUBLE_EQ(acc.productive_s, (60 - 10) + 48 - 20.0);  // 78
  EXPECT_DOUBLE_EQ(acc.work_lost_s, 20.0);
  EXPECT_DOUBLE_EQ(acc.startup_s, 17.0);
  EXPECT_DOUBLE_EQ(acc.data_wait_s, 10.0);
  EXPECT_DOUBLE_EQ(acc.evaluation_s, 4.0);
  EXPECT_DOUBLE_EQ(acc.checkpoint_s, 9.0);
  EXPECT_DOUBLE_EQ(acc.other_s, 170.0 - 78 - 20 - 17 - 10 - 4 - 9);  // 32
  EXPECT_DOUBLE_EQ(acc.goodput(), 78.0 / 170.0);
  EXPECT_EQ(acc.steps_trained, 120);
  EXPECT_EQ(acc.work_lost_steps, 20);
  // The 20 steps are lifetime 1's loss (lifetime 2 found them on resuming).
  EXPECT_EQ(acc.lost_steps_of, (std::vector<int64_t>{20, 0}));
  EXPECT_EQ(acc.lost_s_of, (std::vector<double>{20.0, 0.0}));

  const std::string md = report::goodput_markdown(acc, "runs/x");
  EXPECT_NE(md.find("**45.9%** of 170.0 s"), std::string::npos) << md;
  EXPECT_NE(md.find("| work lost | 20.00 | 11.8 |"), std::string::npos) << md;
  // Lifetime 1 alone: (60 - 10 - 20) / 100; lifetime 2: 48 / 70.
  EXPECT_NE(md.find("| 1 | job |  | 1970-01-01 00:16:40 | 100.00 | killed | 0..60 | - | 20 | 20.00 | 5.00 | 60.00 | 10.00 | 4.00 | 6.00 | 30.0 |"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| 0 | 40..100 | 40 | 0 | 0.00 | 12.00 | 48.00 | 0.00 | 0.00 | 3.00 | 68.6 |"), std::string::npos) << md;
  const std::string svg = report::goodput_svg(acc, "runs/x");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("45.9%"), std::string::npos);
}

TEST(Goodput, RecordsRoundTrip) {
  auto l = lifetime(1.5, 9.25, 3, 7, 19, 2.5);
  l.job = "4242+1";
  l.resumed_from_step = 7;
  l.work_lost_steps = 2;
  l.work_lost_s = 0.5;
  const auto back = report::parse_lifetime(report::lifetime_json(l), "here");
  EXPECT_EQ(back.job, "4242+1");
  EXPECT_EQ(back.exit_code, std::optional<int>(3));
  EXPECT_EQ(back.resumed_from_step, std::optional<int64_t>(7));
  EXPECT_DOUBLE_EQ(back.wall_s(), 7.75);
  EXPECT_EQ(back.steps_trained(), 12);
  EXPECT_DOUBLE_EQ(back.work_lost_s, 0.5);
  const auto killed = report::parse_lifetime(report::lifetime_json(lifetime(0, 1, std::nullopt, 0, 0, 0)), "here");
  EXPECT_FALSE(killed.exit_code.has_value());
  EXPECT_FALSE(killed.resumed_from_step.has_value());
}

// A line that is not a record (a process killed in mid-append) is skipped and named, and the next
// record appended after it starts on a line of its own; a folder without records is bad input.
TEST(Goodput, TornLinesAreSkippedAndNamed) {
  const fs::path dir = fresh_dir("bad");
  {
    std::ofstream out(dir / "goodput.jsonl");
    out << report::lifetime_json(lifetime(0, 1, 0, 0, 1, 1)) << "\n{\"start\": 1}\n{\"job\": \"torn";  // no newline
  }
  train::GoodputLog next(dir.string(), 1);
  next.close(0, {2, 1.0, 0.0, 0.0, 0.0});
  const auto acc = report::load_goodput(dir.string());
  ASSERT_EQ(acc.lifetimes.size(), 2u);
  EXPECT_EQ(acc.lifetimes[1].last_step, 2);
  ASSERT_EQ(acc.skipped.size(), 2u);
  EXPECT_NE(acc.skipped[0].find("goodput.jsonl:2: field 'end' is missing"), std::string::npos) << acc.skipped[0];
  EXPECT_NE(acc.skipped[1].find("goodput.jsonl:3: not a JSON record"), std::string::npos) << acc.skipped[1];
  EXPECT_NE(report::goodput_markdown(acc, "x").find("Skipped, not a record"), std::string::npos);
  EXPECT_THROW(report::load_goodput((dir / "nothing").string()), BadInput);
  fs::create_directories(dir / "empty");
  std::ofstream(dir / "empty" / "goodput.jsonl") << "\n";
  EXPECT_THROW(report::load_goodput((dir / "empty").string()), BadInput);
  fs::remove_all(dir);
}

// The writer, as a chain of processes uses it: a lifetime killed after its checkpoint at step 40
// (it had reached step 60), then one resuming from 40, stopped by a signal at 80 (exit 3), then
// one resuming from 80 that finishes at 100.
TEST(Goodput, AKilledLifetimeIsClosedByTheNextAndItsWorkAfterTheCheckpointIsLost) {
  const fs::path dir = fresh_dir("chain");
  {
    auto first = std::make_unique<train::GoodputLog>(dir.string(), 0);
    first->first_step_starts();
    first->update({60, 30.0, 6.0, 1.0, 2.0});  // 60 steps in 30 s: 0.5 s per step
    // SIGKILL: the process ends here, never closing its record.
    EXPECT_TRUE(fs::exists(dir / "goodput.open.json"));
    EXPECT_FALSE(fs::exists(dir / "goodput.jsonl"));
  }
  {
    train::GoodputLog second(dir.string(), 40);
    EXPECT_EQ(second.record().work_lost_steps, 20);
    EXPECT_DOUBLE_EQ(second.record().work_lost_s, 10.0);
    second.first_step_starts();
    second.close(3, {80, 20.0, 0.0, 0.0, 1.0});
  }
  {
    train::GoodputLog third(dir.string(), 80);
    EXPECT_EQ(third.record().work_lost_steps, 0);  // the stop saved at 80
    third.close(0, {100, 10.0, 0.0, 0.5, 1.0});
  }
  EXPECT_FALSE(fs::exists(dir / "goodput.open.json"));
  const auto acc = report::load_goodput(dir.string());
  ASSERT_EQ(acc.lifetimes.size(), 3u);
  EXPECT_FALSE(acc.lifetimes[0].exit_code.has_value());
  EXPECT_EQ(acc.lifetimes[0].last_step, 60);
  EXPECT_EQ(acc.lifetimes[1].exit_code, std::optional<int>(3));
  EXPECT_EQ(acc.lifetimes[1].resumed_from_step, std::optional<int64_t>(40));
  EXPECT_EQ(acc.lifetimes[2].exit_code, std::optional<int>(0));
  EXPECT_EQ(acc.steps_trained, 60 + 40 + 20);
  EXPECT_EQ(acc.work_lost_steps, 20);
  EXPECT_DOUBLE_EQ(acc.productive_s, (30.0 - 6.0) + 20.0 + 10.0 - 10.0);
  EXPECT_DOUBLE_EQ(acc.checkpoint_s, 2.0 + 1.0 + 1.0);
  for (const auto& l : acc.lifetimes) EXPECT_GE(l.wall_s(), 0.0);

  // A fresh start into the same folder (no checkpoint to resume): everything trained before is
  // trained again.
  train::GoodputLog fresh(dir.string(), 0);
  EXPECT_EQ(fresh.record().work_lost_steps, 100);
  EXPECT_DOUBLE_EQ(fresh.record().work_lost_s, 100 * 0.5);  // the last lifetime's mean step
  fs::remove_all(dir);
}

TEST(Goodput, ExitCodesOfExceptions) {
  auto code = [](auto exception) { return exit_code_for(std::make_exception_ptr(exception)); };
  EXPECT_EQ(code(BadInput("x")), 2);
  EXPECT_EQ(code(StoppedBySignal("x")), 3);
  EXPECT_EQ(code(Diverged("x")), 4);
  EXPECT_EQ(code(AgreedFault("x")), 1);
  EXPECT_EQ(code(std::runtime_error("x")), 1);
}
