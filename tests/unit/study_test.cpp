// trident report: speedup and efficiency from hand-made report.json files, against numbers
// computed by hand; bad input names the file.
#include "report/study.hpp"
#include "report/report.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "scratch_folder.hpp"

namespace fs = std::filesystem;
using trident::BadInput;
using namespace trident::report;

namespace {

// Each test has a scratch folder of its own (scratch_folder.hpp).
class StudyReport : public ScratchFolderTest {
 protected:
  // A minimal report.json as trident writes it (only the fields the report reads, plus noise).
  void run(const std::string& sub, int world, int nodes, double step_time, int64_t global_batch, int pp = 1,
           const std::string& resumed_from = "", int64_t first_step = -1) {
    fs::create_directories(dir_ / sub);
    std::ofstream(dir_ / sub / "report.json")
        << "{\"trident_version\": \"0.1.0\", \"deck\": {\"run\": {\"name\": \"" << sub
        << "\"}, \"model\": {\"kind\": \"mlp\"}, \"optim\": {\"global_batch\": " << global_batch
        << ", \"micro_batch\": 16, \"precision\": \"" << precision_ << "\"}},\n"
        << " \"layout\": {\"world\": " << world << ", \"nodes\": " << nodes << ", \"dp\": " << world / pp
        << ", \"pp\": " << pp << ", \"zero\": 0, \"backend\": \"mpi\", \"device\": \"cpu\", \"schedule\": \"1f1b\"},\n"
        << (parameters_ > 0 ? " \"parameters\": " + std::to_string(parameters_) + "," : std::string())
        << " \"steps\": 100, \"resumed_from\": "
        << (resumed_from.empty() ? std::string("null") : "\"" + resumed_from + "\"") << ","
        << (first_step >= 0 ? " \"first_step\": " + std::to_string(first_step) + "," : std::string()) << "\n"
        << " \"throughput\": {\"samples_per_s\": " << static_cast<double>(global_batch) / step_time
        << ", \"step_time_s\": " << step_time << ", \"tflops\": null},\n"
        << " \"time_s\": {\"total\": 12.5, \"forward\": 2.0, \"backward\": 4.0, \"comm_exposed\": 1.0},\n"
        << " \"memory\": {\"model_state_bytes\": {\"params\": 1048576, \"grads\": 1048576, \"optimizer\": 2097152, "
           "\"master\": 0}, \"peak_bytes\": 104857600}}\n";
  }
  std::string path() const { return dir_.string(); }
  std::string precision_ = "fp32";  // of the runs written next
  int64_t parameters_ = 0;          // of the runs written next (0: no field, as older reports)
  trident::report::Study load(const std::string& kind) const {
    return load_study(std::vector<std::string>{path()}, kind);
  }
};

const StudyRun& run_of(const trident::report::Study& s, int world, int pp = 1) {
  for (const auto& r : s.runs)
    if (r.world == world && r.pp == pp) return r;
  throw std::runtime_error("no run with " + std::to_string(world) + " ranks");
}

}  // namespace

// Strong scaling, global batch 64 everywhere: T1 = 100 ms, T2 = 60 ms, T4 = 40 ms.
// speedup T1/TN = 1, 5/3, 5/2; efficiency T1/(N TN) = 1, 5/6, 5/8.
TEST_F(StudyReport, StrongScalingAgainstTheOneRankRun) {
  run("ranks_4", 4, 2, 0.040, 64);
  run("ranks_1", 1, 1, 0.100, 64);
  run("ranks_2", 2, 1, 0.060, 64);
  const auto s = load("");
  EXPECT_EQ(s.kind, "strong");  // inferred: the same global batch
  ASSERT_EQ(s.runs.size(), 3u);
  EXPECT_EQ(s.runs[0].world, 1);  // sorted by ranks
  EXPECT_TRUE(run_of(s, 1).baseline);
  EXPECT_FALSE(run_of(s, 2).baseline);
  EXPECT_DOUBLE_EQ(run_of(s, 1).speedup, 1.0);
  EXPECT_NEAR(run_of(s, 2).speedup, 5.0 / 3.0, 1e-12);
  EXPECT_NEAR(run_of(s, 4).speedup, 2.5, 1e-12);
  EXPECT_NEAR(run_of(s, 2).efficiency, 5.0 / 6.0, 1e-12);
  EXPECT_NEAR(run_of(s, 4).efficiency, 0.625, 1e-12);
  EXPECT_DOUBLE_EQ(run_of(s, 4).ideal_speedup, 4.0);
  EXPECT_EQ(run_of(s, 4).nodes, 2);
  EXPECT_EQ(run_of(s, 4).model_state_bytes, 4 << 20);
  EXPECT_EQ(run_of(s, 4).peak_bytes, 100 << 20);
}

// Two sizes of one model in a group's runs are refused: the small one was the large one's
// baseline (an efficiency of 122%). A report without the count (older) is not compared, nor is a
// model studied at another batch (a group of its own).
TEST_F(StudyReport, OneLayoutOfTwoModelsIsRefused) {
  parameters_ = 1000;
  run("ranks_1", 1, 1, 0.100, 64);
  parameters_ = 0;
  run("ranks_4", 4, 1, 0.040, 64);
  EXPECT_NO_THROW(load(""));
  parameters_ = 250000;
  run("big_1", 1, 1, 0.300, 128);
  run("big_2", 2, 1, 0.160, 128);
  EXPECT_NO_THROW(load("strong"));
  run("ranks_2", 2, 1, 0.060, 64);
  try {
    load("strong");
    FAIL() << "no error";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("train different models (1000 and 250000 parameters) in one group (mlp fp32 "
                                         "pp1"),
              std::string::npos)
        << e.what();
  }
}

// Counts below 1 in a report.json are refused naming the field (the table showed "dp -7 x pp 0").
TEST_F(StudyReport, ACountBelowOneNamesItsField) {
  run("ranks_1", 1, -1, 0.100, 64);
  try {
    load("");
    FAIL() << "no error";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("ranks_1/report.json: layout.nodes = -1 is not a count"), std::string::npos)
        << e.what();
  }
}

// Weak scaling, 32 samples per rank: T1 = 100 ms, T2 = 110 ms, T4 = 125 ms.
// efficiency T1/TN = 1, 10/11, 4/5; (scaled) speedup N T1/TN = 1, 20/11, 16/5.
TEST_F(StudyReport, WeakScalingEfficiencyIsT1OverTN) {
  run("a", 1, 1, 0.100, 32);
  run("b", 2, 1, 0.110, 64);
  run("c", 4, 2, 0.125, 128);
  const auto s = load("");
  EXPECT_EQ(s.kind, "weak");  // inferred: global batch proportional to ranks
  EXPECT_NEAR(run_of(s, 2).efficiency, 10.0 / 11.0, 1e-12);
  EXPECT_NEAR(run_of(s, 4).efficiency, 0.8, 1e-12);
  EXPECT_NEAR(run_of(s, 2).speedup, 20.0 / 11.0, 1e-12);
  EXPECT_NEAR(run_of(s, 4).speedup, 3.2, 1e-12);
}

// The baseline is the smallest run, not necessarily one rank: N0 = 2, T0 = 80 ms; T4 = 50 ms,
// T8 = 30 ms. speedup 1.6, 8/3 (ideal 2, 4); efficiency 0.8, 2/3. A pipeline run is a group of
// its own, with itself as baseline.
TEST_F(StudyReport, BaselineIsTheSmallestRunOfEachLayout) {
  run("r2", 2, 1, 0.080, 256);
  run("r4", 4, 2, 0.050, 256);
  run("r8", 8, 4, 0.030, 256);
  run("pp/r4", 4, 2, 0.070, 256, 2);
  const auto s = load("strong");
  EXPECT_TRUE(run_of(s, 2).baseline);
  EXPECT_NEAR(run_of(s, 4).speedup, 1.6, 1e-12);
  EXPECT_NEAR(run_of(s, 8).speedup, 8.0 / 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(run_of(s, 8).ideal_speedup, 4.0);
  EXPECT_NEAR(run_of(s, 4).efficiency, 0.8, 1e-12);
  EXPECT_NEAR(run_of(s, 8).efficiency, 2.0 / 3.0, 1e-12);
  EXPECT_TRUE(run_of(s, 4, 2).baseline);
  EXPECT_DOUBLE_EQ(run_of(s, 4, 2).efficiency, 1.0);
  EXPECT_EQ(s.baseline_of.size(), 2u);
}

// report.json's first_step, where the report has it, gives the steps a resumed run trained: a
// --resume PATH need not be named step_N.h5.
TEST_F(StudyReport, StepsRunFromFirstStep) {
  run("ranks_1", 1, 1, 0.100, 64);
  run("ranks_2", 2, 1, 0.060, 64, 1, "/scratch/saved/best.h5", 25);
  EXPECT_EQ(run_of(load("strong"), 2).steps_run, 75);
}

TEST_F(StudyReport, WritesTableCsvAndPlot) {
  run("ranks_1", 1, 1, 0.100, 64);
  run("ranks_2", 2, 1, 0.060, 64, 1, "runs/x/checkpoints/step_0000040.h5");  // trained 60 of 100 steps
  const auto s = load("strong");
  EXPECT_EQ(run_of(s, 2).steps_run, 60);  // a report without first_step: the step from the file name
  const auto files = write_study(s, (dir_ / "out").string());
  ASSERT_EQ(files.size(), 3u);
  for (const auto& f : files) EXPECT_TRUE(fs::exists(f)) << f;

  const std::string md = study_markdown(s);
  EXPECT_NE(md.find("Baseline: **ranks_1**"), std::string::npos) << md;
  EXPECT_NE(md.find("| 2 | 1 | dp 2 × pp 1, zero 0 | 64 | 60.000 | 1066.7 | 1.67 | 2.00 | 83.3% |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| 2 | 60 | - | 33.333 | 66.667 | 16.667 |"), std::string::npos) << md;  // ms per step

  const std::string csv = study_csv(s);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);  // header + 2 runs
  EXPECT_NE(csv.find(",1.666667,2.000000,0.833333,0,"), std::string::npos) << csv;

  const std::string svg = study_svg(s);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

TEST_F(StudyReport, BadInputNamesTheFile) {
  EXPECT_THROW(load(""), BadInput);  // no report.json at all
  try {
    load("");
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("no report.json under"), std::string::npos) << e.what();
  }
  run("good", 1, 1, 0.1, 64);
  fs::create_directories(dir_ / "broken");
  std::ofstream(dir_ / "broken" / "report.json") << "{\"layout\": {\"world\": 2,";
  try {
    load("");
    FAIL() << "malformed JSON accepted";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "broken" / "report.json").string() + ": not valid JSON"),
              std::string::npos)
        << e.what();
  }
  std::ofstream(dir_ / "broken" / "report.json") << "{\"layout\": {\"world\": 2}}";
  try {
    load("");
    FAIL() << "report.json without steps accepted";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("no field 'deck.optim.global_batch'"), std::string::npos) << e.what();
  }
  // A field of the wrong type is named (the message gave nlohmann's text alone).
  std::ofstream(dir_ / "broken" / "report.json")
      << "{\"deck\": {\"optim\": {\"global_batch\": 64}}, \"layout\": {\"world\": 2}, \"steps\": 10, "
         "\"throughput\": {\"samples_per_s\": 100, \"step_time_s\": \"fast\"}}";
  try {
    load("");
    FAIL() << "a string step time accepted";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("report.json: field 'throughput.step_time_s' has the wrong type (\"fast\""),
              std::string::npos)
        << e.what();
  }
  // A count that does not fit (2^40 ranks read as 0) or is not whole (2.5) is named too.
  for (const auto& [world, shown] : {std::pair<std::string, std::string>{"1099511627776", "1099511627776"}, {"2.5", "2.5"}}) {
    std::ofstream(dir_ / "broken" / "report.json")
        << "{\"deck\": {\"optim\": {\"global_batch\": 64}}, \"layout\": {\"world\": " << world
        << "}, \"steps\": 10, \"throughput\": {\"samples_per_s\": 100}}";
    try {
      load("");
      FAIL() << "layout.world " << world << " accepted";
    } catch (const BadInput& e) {
      EXPECT_NE(std::string(e.what()).find("field 'layout.world' has the wrong type (" + shown + ": not a whole number"),
                std::string::npos)
          << e.what();
    }
  }
}

// Folders holding two studies of one layout: each batch (strong: global; weak: per rank) and each
// precision is a group of its own, with its own baseline; two runs of a group at one rank count
// are refused, naming both.
TEST_F(StudyReport, EachBatchAndPrecisionIsAGroupOfItsOwn) {
  run("g64/r1", 1, 1, 0.100, 64);
  run("g64/r2", 2, 1, 0.060, 64);
  run("g128/r1", 1, 1, 0.200, 128);
  run("g128/r2", 2, 1, 0.100, 128);
  precision_ = "bf16";
  run("bf16/r2", 2, 1, 0.040, 64);
  run("bf16/r4", 4, 2, 0.025, 64);
  const auto s = load("strong");
  ASSERT_EQ(s.baseline_of.size(), 3u);
  for (const auto& r : s.runs) {
    const bool g128 = r.global_batch == 128, bf16 = r.precision == "bf16";
    EXPECT_EQ(r.group, fmt::format("mlp {} pp1 zero0 1f1b mpi/cpu, global batch {}", bf16 ? "bf16" : "fp32",
                                   r.global_batch));
    EXPECT_EQ(r.baseline, r.world == (bf16 ? 2 : 1)) << r.file;
    const double t0 = bf16 ? 0.040 : g128 ? 0.200 : 0.100, n0 = bf16 ? 2 : 1;
    EXPECT_NEAR(r.speedup, t0 / r.step_time_s, 1e-12) << r.file;
    EXPECT_NEAR(r.efficiency, t0 * n0 / (r.world * r.step_time_s), 1e-12) << r.file;
  }
  precision_ = "fp32";
  run("again/r2", 2, 1, 0.065, 64);
  try {
    load("strong");
    FAIL() << "two runs of one group at 2 ranks accepted";
  } catch (const BadInput& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("again/r2/report.json and "), std::string::npos) << what;
    EXPECT_NE(what.find("g64/r2/report.json are both runs of mlp fp32 pp1 zero0 1f1b mpi/cpu, global batch 64 at 2 "
                        "rank(s)"),
              std::string::npos)
        << what;
  }
}

// Batches that follow neither rule need a kind, and the kind's rule: a run alone at its batch
// among its layout's runs would be its own baseline (a weak report of a strong study).
TEST_F(StudyReport, MixedBatchesNeedAKind) {
  run("a", 1, 1, 0.1, 64);
  run("b", 2, 1, 0.1, 96);
  EXPECT_THROW(load(""), BadInput);
  EXPECT_THROW(load("medium"), BadInput);
  try {
    load("weak");
    FAIL() << "runs at 64 and 48 samples per rank reported as weak scaling";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("a/report.json is the only run of mlp fp32 pp1 zero0 1f1b mpi/cpu, 64 "
                                         "samples per rank: its layout's runs do not keep the batch per rank (weak "
                                         "scaling) fixed"),
              std::string::npos)
        << e.what();
  }
  run("b", 2, 1, 0.1, 128);  // now weak: 64 per rank
  EXPECT_EQ(load("weak").runs.back().group, "mlp fp32 pp1 zero0 1f1b mpi/cpu, 64 samples per rank");
  EXPECT_THROW(load("strong"), BadInput);  // a weak study reported as strong
}

// What trident writes is what trident report reads: a Summary with a distinct value in every
// field the reader knows, through write_report_json and read_report_json.
// resumed_from names a checkpoint of the run's own folder relative to it (DESIGN.md's
// "checkpoints/step_0000500.h5"), and one of another folder (a resharded run's source) as given.
TEST_F(StudyReport, ResumedFromIsRelativeToTheRunFolder) {
  Summary w;
  w.steps = 10;
  w.deck.run.output_dir = "runs/x";
  w.resumed_from = "runs/x/checkpoints/step_0000100.h5";
  const std::string file = (dir_ / "report.json").string();
  write_report_json(file, w);
  EXPECT_EQ(read_report_json(file).summary.resumed_from, "checkpoints/step_0000100.h5");
  w.resumed_from = "runs/other/checkpoints/step_0000100.h5";
  write_report_json(file, w);
  EXPECT_EQ(read_report_json(file).summary.resumed_from, "runs/other/checkpoints/step_0000100.h5");
}

TEST_F(StudyReport, ReportJsonReadsBackWhatWasWritten) {
  Summary w;
  w.deck.run.name = "round_trip";
  w.deck.model.kind = "gpt";
  w.deck.optim.global_batch = 96;
  w.deck.optim.micro_batch = "auto";
  w.layout = {6, 2, 3, 2, 2, "nccl", "cuda:0", "gpipe", 4, 8, 7};
  w.device_name = "Test GPU";
  w.steps = 300;
  w.epochs = 3;
  w.parameters = 123456;
  w.resumed_from = "runs/x/checkpoints/step_0000100.h5";
  w.first_step = 100;
  w.train_loss = 1.5;
  w.test_loss = 1.75;
  w.test_accuracy = 0.625;
  w.samples_per_s = 480;
  w.step_time_s = 0.2;
  w.tokens_per_s = 1e6;
  w.tflops = 12.5;
  w.mfu = 0.25;
  w.peak_tflops = 50;
  w.time = {10, 1, 2, 3, 0.5, 0.25, 0.125, 0.0625};
  w.memory = {11, 12, 13, 14, 15};
  w.peak_bytes = 16;
  w.startup_peak_bytes = 15;
  w.peak_device_bytes = 17;
  w.device_total_bytes = 18;
  w.bubble_fraction = 0.3;
  w.expected_bubble_fraction = 0.2;
  w.stages = {{0, 2, 1.5, 0.25, 0.3, 1024, 100, {{"F", 0, 0, 0.0, 0.001}, {"Bi", 0, 1, 0.002, 0.0025}}},
              {1, 1, 1.75, 0.125, 0.2, 2048, 200, {{"W", 3, 0, 0.004, 0.005}}}};
  w.checkpoint_saves = 5;
  w.time_to_safe_stop_s = 1.25;
  const std::string file = (dir_ / "report.json").string();
  write_report_json(file, w);
  const ReadReport read = read_report_json(file);
  const Summary& r = read.summary;
  EXPECT_EQ(r.deck.run.name, "round_trip");
  EXPECT_EQ(r.deck.model.kind, "gpt");
  EXPECT_EQ(r.deck.optim.global_batch, 96);
  EXPECT_EQ(r.deck.optim.micro_batch, "auto");
  EXPECT_EQ(r.layout.world, 6);
  EXPECT_EQ(r.layout.nodes, 2);
  EXPECT_EQ(r.layout.dp, 3);
  EXPECT_EQ(r.layout.pp, 2);
  EXPECT_EQ(r.layout.zero, 2);
  EXPECT_EQ(r.layout.backend, "nccl");
  EXPECT_EQ(r.layout.device, "cuda:0");
  EXPECT_EQ(r.layout.schedule, "gpipe");
  EXPECT_EQ(r.layout.micro_batch, 4);
  EXPECT_EQ(r.layout.micro_batches, 8);
  EXPECT_EQ(r.layout.threads_per_rank, 7);
  EXPECT_EQ(r.device_name, "Test GPU");
  EXPECT_EQ(r.steps, 300);
  EXPECT_EQ(r.epochs, 3);
  EXPECT_EQ(r.parameters, 123456);
  EXPECT_EQ(r.resumed_from, w.resumed_from);
  EXPECT_EQ(r.first_step, 100);
  EXPECT_EQ(r.train_loss, 1.5);
  EXPECT_EQ(r.test_loss, 1.75);
  EXPECT_EQ(r.test_accuracy, 0.625);
  EXPECT_EQ(r.samples_per_s, 480);
  EXPECT_EQ(r.step_time_s, 0.2);
  EXPECT_EQ(r.tokens_per_s, 1e6);
  EXPECT_EQ(r.tflops, 12.5);
  EXPECT_EQ(r.mfu, 0.25);
  EXPECT_EQ(r.peak_tflops, 50);
  EXPECT_EQ(r.time.total, 10);
  EXPECT_EQ(r.time.data_wait, 1);
  EXPECT_EQ(r.time.forward, 2);
  EXPECT_EQ(r.time.backward, 3);
  EXPECT_EQ(r.time.comm_exposed, 0.5);
  EXPECT_EQ(r.time.optimizer, 0.25);
  EXPECT_EQ(r.time.checkpoint, 0.125);
  EXPECT_EQ(r.time.evaluation, 0.0625);
  EXPECT_EQ(read.time_s.size(), 8u);
  EXPECT_EQ(r.memory.params, 11);
  EXPECT_EQ(r.memory.grads, 12);
  EXPECT_EQ(r.memory.optimizer, 13);
  EXPECT_EQ(r.memory.master, 14);
  EXPECT_EQ(r.memory.expected, 15);
  EXPECT_EQ(r.peak_bytes, 16);
  EXPECT_EQ(r.startup_peak_bytes, 15);
  EXPECT_EQ(r.peak_device_bytes, 17);
  EXPECT_EQ(r.device_total_bytes, 18);
  EXPECT_EQ(r.bubble_fraction, 0.3);
  EXPECT_EQ(r.expected_bubble_fraction, 0.2);
  EXPECT_EQ(r.time_to_safe_stop_s, std::optional<double>(1.25));
  ASSERT_EQ(r.stages.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    const StageReport &a = r.stages[s], &b = w.stages[s];
    EXPECT_EQ(std::tie(a.stage, a.peak_alive_micro_batches, a.compute_s, a.blocked_s, a.bubble_fraction,
                       a.activation_bytes_per_micro_batch, a.parameters),
              std::tie(b.stage, b.peak_alive_micro_batches, b.compute_s, b.blocked_s, b.bubble_fraction,
                       b.activation_bytes_per_micro_batch, b.parameters));
    ASSERT_EQ(a.timeline.size(), b.timeline.size());
    for (size_t i = 0; i < a.timeline.size(); ++i)
      EXPECT_EQ(std::tie(a.timeline[i].op, a.timeline[i].micro, a.timeline[i].chunk, a.timeline[i].start_s, a.timeline[i].end_s),
                std::tie(b.timeline[i].op, b.timeline[i].micro, b.timeline[i].chunk, b.timeline[i].start_s, b.timeline[i].end_s));
  }
  EXPECT_EQ(r.checkpoint_saves, 5);
}

// A study assembled from links to run folders kept elsewhere reads them (it said "no report.json"),
// a link back up the tree does not loop, and a folder given twice (or inside another given) is
// each run once (it said "X and X are both runs ... keep one").
TEST_F(StudyReport, LinkedRunFoldersAreReadAndEachRunOnce) {
  run("kept/ranks_1", 1, 1, 0.100, 64);
  run("kept/ranks_2", 2, 1, 0.060, 64);
  fs::create_directories(dir_ / "study");
  fs::create_directory_symlink(dir_ / "kept/ranks_1", dir_ / "study/ranks_1");
  fs::create_directory_symlink(dir_ / "kept/ranks_2", dir_ / "study/ranks_2");
  fs::create_directory_symlink(dir_ / "study", dir_ / "study/loop");
  const std::string study = (dir_ / "study").string();
  const auto s = load_study({study, study, (dir_ / "study/ranks_2").string()}, "");
  ASSERT_EQ(s.runs.size(), 2u);
  EXPECT_NEAR(run_of(s, 2).speedup, 5.0 / 3.0, 1e-12);
  // Nothing below a run folder is searched (its checkpoints, a link to scratch): a report.json
  // there is not another run of the study.
  run("kept/ranks_2/scratch/copy", 2, 1, 0.030, 64);
  ASSERT_EQ(load_study({study}, "").runs.size(), 2u);
}

// report.pending.json is completed only with the checkpoint it was written after: a file of the
// same name that differs (another run's, set aside and brought back) or a file that is not a
// pending report leaves it and writes no report.json; the completed one reads back with the
// evaluation's figures and its time added.
TEST_F(StudyReport, PendingReportIsCompletedOnlyWithItsCheckpoint) {
  Summary s;
  s.deck.run.output_dir = path();
  s.steps = 40;
  s.train_loss = 0.5;
  s.time.total = 10.0;
  s.time.evaluation = 1.0;
  const std::string checkpoint = (dir_ / "step_0000040.h5").string(), pending = (dir_ / "report.pending.json").string(),
                    report = (dir_ / "report.json").string();
  std::ofstream(checkpoint) << "the final checkpoint";
  ASSERT_EQ(write_pending_report(pending, s, checkpoint), "");

  std::ofstream(checkpoint, std::ios::app) << " and more";  // another file by that name
  const std::string refused = complete_pending_report(pending, report, checkpoint, 0.25, 0.75, 2.0);
  EXPECT_NE(refused.find("written after another checkpoint"), std::string::npos) << refused;
  EXPECT_FALSE(fs::exists(report));
  EXPECT_TRUE(fs::exists(pending));

  std::ofstream(checkpoint) << "the final checkpoint";
  ASSERT_EQ(write_pending_report(pending, s, checkpoint), "");
  ASSERT_EQ(complete_pending_report(pending, report, checkpoint, 0.25, 0.75, 2.0), "");
  EXPECT_FALSE(fs::exists(pending));
  const Summary r = read_report_json(report).summary;
  EXPECT_EQ(r.steps, 40);
  EXPECT_DOUBLE_EQ(r.train_loss, 0.5);
  EXPECT_DOUBLE_EQ(r.test_loss, 0.25);
  EXPECT_DOUBLE_EQ(r.test_accuracy, 0.75);
  EXPECT_DOUBLE_EQ(r.time.total, 12.0);
  EXPECT_DOUBLE_EQ(r.time.evaluation, 3.0);

  fs::remove(report);
  std::ofstream(pending) << "{\"steps\": 40}";
  EXPECT_NE(complete_pending_report(pending, report, checkpoint, 0.25, 0.75, 2.0).find("not a pending report"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(report));
}

// A resumed run's metrics.jsonl keeps the records up to the step it resumes from: the records an
// earlier (killed) lifetime logged after it go, a line a kill cut short goes, and a last record
// without its newline gets one. Past the first 64 KiB read from the end, more is read.
TEST_F(StudyReport, MetricsLogKeepsTheRecordsUpToTheResumedStep) {
  const std::string file = (dir_ / "metrics.jsonl").string();
  const auto record = [](int64_t step) {
    return fmt::format("{{\"epoch\":0,\"grad_norm\":1.0,\"loss\":0.5,\"lr\":0.001,\"samples_per_s\":1000.0,\"step\":{}}}",
                       step);  // as MetricsLog writes it (keys in order)
  };
  const auto contents = [&] {
    std::ifstream in(file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const auto write = [&](int64_t first, int64_t last, const std::string& tail) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    for (int64_t step = first; step <= last; ++step) out << record(step) << "\n";
    out << tail;
  };
  const auto expected = [&](int64_t first, int64_t last) {
    std::string text;
    for (int64_t step = first; step <= last; ++step) text += record(step) + "\n";
    return text;
  };
  // 4000 records of about 100 bytes: the 2000 dropped span several windows.
  write(1, 4000, "{\"epoch\":0,\"grad_no");
  { MetricsLog log(file, 2000); }
  EXPECT_EQ(contents(), expected(1, 2000));
  // Nothing after the step: unchanged.
  { MetricsLog log(file, 2000); }
  EXPECT_EQ(contents(), expected(1, 2000));
  // A last record without its newline, of a step kept: the newline added.
  write(1, 9, record(10));
  { MetricsLog log(file, 10); }
  EXPECT_EQ(contents(), expected(1, 10));
  // Resumed from before every record: none kept.
  write(5, 9, "");
  { MetricsLog log(file, 4); }
  EXPECT_EQ(contents(), "");
  // A resumed run appends after what is kept.
  write(1, 6, "");
  {
    MetricsLog log(file, 3);
    log.write({4, 0, 0.5, 0.001, 1000.0, 1.0, {}, {}});
  }
  EXPECT_EQ(contents(), expected(1, 4));
}
