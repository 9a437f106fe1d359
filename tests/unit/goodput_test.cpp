// goodput.jsonl: the records a chain of process lifetimes leaves (a SIGKILL's open record closed
// by the next lifetime, work lost counted when a later one starts) and their account against figures
// computed here by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.hpp"
#include "report/goodput.hpp"
#include "train/goodput_log.hpp"
#include "../remove_tree.hpp"

using namespace trident;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("trident_goodput_" + name + "_" + std::to_string(::getpid()));
  trident::test_support::remove_tree(dir.string());
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
  // Lifetime 1: 100 s, steps 0..60 in 70 s (10 s data waits: 1 s of compute a step), 5 s
  // start-up, 4 s evaluation, 6 s saves; SIGKILLed (no exit code) after its checkpoint at step 40.
  auto a = lifetime(1000, 1100, std::nullopt, 0, 60, 70.0);
  a.startup_s = 5, a.data_wait_s = 10, a.evaluation_s = 4, a.checkpoint_s = 6;
  // Lifetime 2 resumes at 40: lifetime 1's 20 steps past it are lost, at 1 s each (its data waits
  // stay data waits); trains 40..100 in 48 s (no waits), 12 s start-up, 3 s saves, 70 s wall;
  // exit 0. Its record's work_lost_* are not what the account reads: it recomputes them.
  auto b = lifetime(1500, 1570, 0, 40, 100, 48.0);
  b.startup_s = 12, b.checkpoint_s = 3, b.resumed_from_step = 40, b.work_lost_steps = 999, b.work_lost_s = 999.0;
  const report::GoodputAccount acc = report::account_goodput({a, b});
  EXPECT_DOUBLE_EQ(acc.wall_s, 170.0);
  EXPECT_DOUBLE_EQ(acc.productive_s, (70 - 10) + 48 - 20.0);  // 88
  EXPECT_DOUBLE_EQ(acc.work_lost_s, 20.0);
  EXPECT_DOUBLE_EQ(acc.startup_s, 17.0);
  EXPECT_DOUBLE_EQ(acc.data_wait_s, 10.0);
  EXPECT_DOUBLE_EQ(acc.evaluation_s, 4.0);
  EXPECT_DOUBLE_EQ(acc.checkpoint_s, 9.0);
  EXPECT_DOUBLE_EQ(acc.other_s, 170.0 - 88 - 20 - 17 - 10 - 4 - 9);  // 22
  EXPECT_DOUBLE_EQ(acc.goodput(), 88.0 / 170.0);
  EXPECT_EQ(acc.steps_trained, 120);
  EXPECT_EQ(acc.work_lost_steps, 20);
  // The 20 steps are lifetime 1's loss (lifetime 2's start made them lost).
  EXPECT_EQ(acc.lost_steps_of, (std::vector<int64_t>{20, 0}));
  EXPECT_EQ(acc.lost_s_of, (std::vector<double>{20.0, 0.0}));

  const std::string md = report::goodput_markdown(acc, "runs/x");
  EXPECT_NE(md.find("**51.8%** of 170.0 s"), std::string::npos) << md;
  EXPECT_NE(md.find("| work lost | 20.00 | 11.8 |"), std::string::npos) << md;
  // Lifetime 1 alone: (70 - 10 - 20) / 100; lifetime 2: 48 / 70.
  EXPECT_NE(md.find("| 1 | job |  | 1970-01-01 00:16:40 | 100.00 | killed | 0..60 | - | 20 | 20.00 | 0.00 | 5.00 | 70.00 | 10.00 | 4.00 | 6.00 | 40.0 |"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| 0 | 40..100 | 40 | 0 | 0.00 | 0.00 | 12.00 | 48.00 | 0.00 | 0.00 | 3.00 | 68.6 |"), std::string::npos) << md;
  const std::string svg = report::goodput_svg(acc, "runs/x");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("51.8%"), std::string::npos);
}

TEST(Goodput, TheJobsLaunchIsWallTime) {
  // A job whose script and srun took 8 s before the process's 100 s: 108 s of wall time, 8 s of
  // it launch; 60 s of steps, 5 s of start-up, the other 35 s unaccounted.
  auto l = lifetime(1000, 1100, 0, 0, 60, 60.0);
  l.launch_s = 8, l.startup_s = 5;
  const report::GoodputAccount acc = report::account_goodput({l});
  EXPECT_DOUBLE_EQ(acc.wall_s, 108.0);
  EXPECT_DOUBLE_EQ(acc.launch_s, 8.0);
  EXPECT_DOUBLE_EQ(acc.other_s, 108.0 - 60 - 8 - 5);
  EXPECT_DOUBLE_EQ(acc.goodput(), 60.0 / 108.0);
  const std::string md = report::goodput_markdown(acc, "runs/x");
  EXPECT_NE(md.find("| launch | 8.00 | 7.4 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 108.00 | 0 | 0..60 | - | 0 | 0.00 | 8.00 | 5.00 |"), std::string::npos) << md;
  EXPECT_DOUBLE_EQ(report::parse_lifetime(report::lifetime_json(l), "here").launch_s, 8.0);
  // A record written before launch_s was kept has none: no launch. A negative one is bad input.
  nlohmann::json old = nlohmann::json::parse(report::lifetime_json(l));
  old.erase("launch_s");
  EXPECT_EQ(report::parse_lifetime(old.dump(), "here").launch_s, 0.0);
  old["launch_s"] = -1;
  EXPECT_THROW(report::parse_lifetime(old.dump(), "here"), BadInput);

  // The record of this process: its start less the job's (TRIDENT_JOB_START_TIME, whole seconds
  // as squeue gives them); none without it.
  const fs::path dir = fresh_dir("launch");
  const double job_start = std::floor(train::process_start_unix()) - 7;
  setenv("TRIDENT_JOB_START_TIME", std::to_string(static_cast<long long>(job_start)).c_str(), 1);
  EXPECT_NEAR(train::GoodputLog(dir.string(), 0, true).record().launch_s, train::process_start_unix() - job_start, 1e-6);
  unsetenv("TRIDENT_JOB_START_TIME");
  EXPECT_EQ(train::GoodputLog(dir.string(), 0, true).record().launch_s, 0.0);
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
  // Every line bad: the message says why the first is (it said "holds no record" alone).
  fs::create_directories(dir / "all_bad");
  std::ofstream(dir / "all_bad" / "goodput.jsonl") << "step,loss\n1,0.5\n";
  try {
    report::read_goodput((dir / "all_bad" / "goodput.jsonl").string());
    FAIL() << "no error";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("holds no record: " + (dir / "all_bad").string() + "/goodput.jsonl:1: not a JSON record"),
              std::string::npos)
        << e.what();
  }
  fs::create_directories(dir / "folder" / "goodput.jsonl");
  try {
    report::read_goodput((dir / "folder" / "goodput.jsonl").string());
    FAIL() << "no error";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("goodput.jsonl is a folder, not a file"), std::string::npos) << e.what();
  }
  trident::test_support::remove_tree(dir.string());
}

// Values no lifetime can have (a hand-edited or foreign record) are skipped and named like a torn
// line: they gave a goodput above 100% (end before start) or an undefined conversion (1e300 steps).
TEST(Goodput, RecordsWithImpossibleValuesAreSkippedAndNamed) {
  const fs::path dir = fresh_dir("impossible");
  const std::string good = report::lifetime_json(lifetime(0, 10, 0, 0, 10, 8));
  auto with = [&](const std::string& key, const std::string& value) {
    nlohmann::json r = nlohmann::json::parse(good);
    r[key] = nlohmann::json::parse(value);
    return r.dump();
  };
  {
    std::ofstream out(dir / "goodput.jsonl");
    out << good << "\n"
        << with("end", "-5") << "\n"                 // 2: end before start
        << with("first_step", "1.5") << "\n"         // 3: not whole
        << with("last_step", "1e300") << "\n"        // 4: beyond int64
        << with("step_s", "-1") << "\n"              // 5: negative seconds
        << with("first_step", "11") << "\n"          // 6: last before first
        << with("work_lost_steps", "18446744073709551615") << "\n";  // 7: wraps to -1 as int64
  }
  const auto acc = report::load_goodput(dir.string());
  ASSERT_EQ(acc.lifetimes.size(), 1u);
  ASSERT_EQ(acc.skipped.size(), 6u);
  const std::vector<std::string> expected = {
      "goodput.jsonl:2: field 'end' = -5 is negative",
      "goodput.jsonl:3: field 'first_step' = 1.5 is not a step count",
      "goodput.jsonl:4: field 'last_step' = 1e+300 is not a step count",
      "goodput.jsonl:5: field 'step_s' = -1 is negative",
      "goodput.jsonl:6: last_step = 10 is before first_step = 11",
      "goodput.jsonl:7: field 'work_lost_steps' = 18446744073709551615 is not a step count"};
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NE(acc.skipped[i].find(expected[i]), std::string::npos) << acc.skipped[i];
  EXPECT_LE(acc.goodput(), 1.0);
  trident::test_support::remove_tree(dir.string());
}

// The writer, as a chain of processes uses it: a lifetime killed after its checkpoint at step 40
// (it had reached step 60), then one resuming from 40, stopped by a signal at 80 (exit 3), then
// one resuming from 80 that finishes at 100.
TEST(Goodput, AKilledLifetimeIsClosedByTheNextAndItsWorkAfterTheCheckpointIsLost) {
  const fs::path dir = fresh_dir("chain");
  {
    auto first = std::make_unique<train::GoodputLog>(dir.string(), 0);
    first->startup_ends();
    first->update({60, 30.0, 6.0, 1.0, 2.0});  // 60 steps in 30 s: 0.5 s per step
    // SIGKILL: the process ends here, never closing its record.
    EXPECT_TRUE(fs::exists(dir / "goodput.open.json"));
    EXPECT_FALSE(fs::exists(dir / "goodput.jsonl"));
  }
  {
    train::GoodputLog second(dir.string(), 40);
    EXPECT_EQ(second.record().work_lost_steps, 20);
    EXPECT_DOUBLE_EQ(second.record().work_lost_s, 20 * (30.0 - 6.0) / 60);  // compute per step: 0.4 s
    second.startup_ends();
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
  EXPECT_DOUBLE_EQ(acc.productive_s, (30.0 - 6.0) + 20.0 + 10.0 - 8.0);
  EXPECT_DOUBLE_EQ(acc.checkpoint_s, 2.0 + 1.0 + 1.0);
  for (const auto& l : acc.lifetimes) EXPECT_GE(l.wall_s(), 0.0);

  // A fresh start into the same folder (no checkpoint to resume): every step still kept is
  // trained again, each at the compute time of the lifetime that trained it: 0..40 at 0.4 s,
  // 40..80 at 0.5 s, 80..100 at 0.5 s.
  train::GoodputLog fresh(dir.string(), 0);
  EXPECT_EQ(fresh.record().work_lost_steps, 100);
  EXPECT_DOUBLE_EQ(fresh.record().work_lost_s, 40 * 0.4 + 40 * 0.5 + 20 * 0.5);
  trident::test_support::remove_tree(dir.string());
}

// The fail-fast watchdog's abort on rank 0 (abort_all_ranks' hook) closes the record with the
// exit code and the figures of its last update; the main thread's close after it changes nothing.
TEST(Goodput, AnAbortClosesTheRecordWithItsExitCodeAndTheLastUpdate) {
  const fs::path dir = fresh_dir("abort");
  {
    train::GoodputLog log(dir.string(), 0);
    log.startup_ends();
    log.update({30, 15.0, 1.0, 0.0, 0.5});
    log.close_at_abort(kExitFault);
    EXPECT_FALSE(fs::exists(dir / "goodput.open.json"));
    log.update({40, 20.0, 1.0, 0.0, 0.5});  // the main thread, still running until the abort ends it
    log.close(kExitOk, {50, 25.0, 1.0, 0.0, 0.5});
  }
  const auto chain = report::read_goodput((dir / "goodput.jsonl").string());
  ASSERT_EQ(chain.size(), 1u);
  EXPECT_EQ(chain[0].exit_code, std::optional<int>(kExitFault));
  EXPECT_EQ(chain[0].last_step, 30);
  EXPECT_DOUBLE_EQ(chain[0].step_s, 15.0);
  EXPECT_FALSE(fs::exists(dir / "goodput.open.json"));
  trident::test_support::remove_tree(dir.string());
}

// The report reads the open record as the chain's last lifetime: a run still training, or the
// last job of a chain killed with no later one to close its record, counts to its last update.
TEST(Goodput, TheOpenRecordIsTheLastLifetimeOfTheReport) {
  const fs::path dir = fresh_dir("open");
  {
    auto first = std::make_unique<train::GoodputLog>(dir.string(), 0);
    first->startup_ends();
    first->update({60, 30.0, 6.0, 1.0, 2.0});
  }  // killed: only the open record
  auto only = report::load_goodput(dir.string());
  ASSERT_EQ(only.lifetimes.size(), 1u);
  EXPECT_TRUE(only.lifetimes[0].open);
  EXPECT_EQ(only.lifetimes[0].last_step, 60);
  EXPECT_DOUBLE_EQ(only.productive_s, 30.0 - 6.0);
  {
    train::GoodputLog second(dir.string(), 40);  // closes the first into goodput.jsonl
    second.startup_ends();
    second.update({70, 15.0, 0.0, 0.0, 1.0});
  }  // killed too: the chain's last record is open
  const auto acc = report::load_goodput(dir.string());
  ASSERT_EQ(acc.lifetimes.size(), 2u);
  EXPECT_FALSE(acc.lifetimes[0].open);
  EXPECT_TRUE(acc.lifetimes[1].open);
  EXPECT_EQ(acc.lifetimes[1].last_step, 70);
  EXPECT_EQ(acc.work_lost_steps, 20);  // the first's steps 40..60, redone by the second
  EXPECT_DOUBLE_EQ(acc.productive_s, (30.0 - 6.0) - 20 * 0.4 + 15.0);
  const std::string md = report::goodput_markdown(acc, dir.string());
  EXPECT_NE(md.find("| open | 40..70 |"), std::string::npos) << md;
  EXPECT_NE(md.find("'open': the last lifetime's record was never closed"), std::string::npos);
  // Read while a process closes its record (appended to goodput.jsonl, the open file not yet
  // removed): the lifetime counts once, as closed.
  {
    train::GoodputLog third(dir.string(), 70);
    third.startup_ends();
    third.update({80, 5.0, 0.0, 0.0, 0.0});
    std::ifstream in(dir / "goodput.open.json");
    const std::string open_text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    third.close(0, {90, 10.0, 0.0, 0.0, 0.0});
    std::ofstream(dir / "goodput.open.json") << open_text;
  }
  const auto closing = report::load_goodput(dir.string());
  ASSERT_EQ(closing.lifetimes.size(), 3u);
  EXPECT_FALSE(closing.lifetimes[2].open);
  EXPECT_EQ(closing.lifetimes[2].exit_code, std::optional<int>(0));
  trident::test_support::remove_tree(dir.string());
}

// A lifetime killed before its first checkpoint, then a fresh start: all of the first one's steps
// are lost, and its productive time is nothing, never less (its data waits stay data waits).
TEST(Goodput, AllStepsLostLeaveNoProductiveTimeNotANegativeOne) {
  auto killed = lifetime(0, 5, std::nullopt, 0, 200, 4.0);
  killed.data_wait_s = 0.2;
  auto fresh = lifetime(10, 11, 0, 0, 5, 0.1);
  const auto acc = report::account_goodput({killed, fresh});
  EXPECT_EQ(acc.lost_steps_of, (std::vector<int64_t>{200, 0}));
  EXPECT_DOUBLE_EQ(acc.lost_s_of[0], 3.8);
  EXPECT_DOUBLE_EQ(acc.productive_s, 0.1);
  EXPECT_DOUBLE_EQ(acc.data_wait_s, 0.2);
  const std::string md = report::goodput_markdown(acc, "x");
  EXPECT_NE(md.find("| 200 | 3.80 |"), std::string::npos) << md;
  EXPECT_FALSE(std::regex_search(md, std::regex(R"((\| |\*\*)-[0-9])"))) << md;  // no negative figure anywhere
}

// Lost steps belong to the lifetime that trained them, also when a later start goes back past
// the lifetime just before it: 80..90, then 90..90 (nothing trained), then a resume from 80.
TEST(Goodput, StepsLostAreChargedToTheLifetimeThatTrainedThem) {
  auto first = lifetime(0, 10, 0, 0, 80, 8.0);
  auto second = lifetime(20, 30, 0, 80, 90, 2.0);
  second.resumed_from_step = 80;
  auto third = lifetime(40, 42, 0, 90, 90, 0.0);
  third.resumed_from_step = 90;
  auto fourth = lifetime(50, 60, 0, 80, 100, 4.0);
  fourth.resumed_from_step = 80;
  const report::LostWork lost = report::lost_work({first, second, third, fourth});
  EXPECT_EQ(lost.of_steps, (std::vector<int64_t>{0, 10, 0, 0}));
  EXPECT_EQ(lost.of_s, (std::vector<double>{0, 2.0, 0, 0}));
  EXPECT_EQ(lost.by_steps, (std::vector<int64_t>{0, 0, 0, 10}));  // the resume from 80 made them lost
  // A fresh start after all four: first's 80, fourth's 20 (second's 10 were lost already).
  const report::LostWork again = report::lost_work({first, second, third, fourth, lifetime(70, 71, 0, 0, 0, 0.0)});
  EXPECT_EQ(again.of_steps, (std::vector<int64_t>{80, 10, 0, 20, 0}));
  EXPECT_EQ(again.by_steps.back(), 100);
  EXPECT_DOUBLE_EQ(again.by_s.back(), 80 * 0.1 + 20 * 0.2);
}

TEST(Goodput, ExitCodesOfExceptions) {
  auto code = [](auto exception) { return exit_code_for(std::make_exception_ptr(exception)); };
  EXPECT_EQ(code(BadInput("x")), 2);
  EXPECT_EQ(code(StoppedBySignal("x")), 3);
  EXPECT_EQ(code(Diverged("x")), 4);
  EXPECT_EQ(code(AgreedFault("x")), 1);
  EXPECT_EQ(code(std::runtime_error("x")), 1);
}
