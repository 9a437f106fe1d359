// trident report SWEEP_DIR: a sweep file's points read back, the points ranked by their final
// test metric from hand-made report.json files, the micro-batch table's figures against numbers
// computed here; bad sweep lines name the file and line.
#include "report/sweep.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "scratch_folder.hpp"

namespace fs = std::filesystem;
using trident::BadInput;
using namespace trident::report;

namespace {

class SweepReport : public ScratchFolderTest {
 protected:
  void sweep_file(const std::string& text) { std::ofstream(dir_ / "sweep.txt") << text; }
  // point_K/report.json with what the sweep report reads (global batch 64).
  void point(int k, double test_accuracy, double test_loss, int64_t micro_batch, double step_time_s,
             const std::string& kind = "mlp") {
    const fs::path sub = dir_ / ("point_" + std::to_string(k));
    fs::create_directories(sub);
    std::ofstream(sub / "report.json")
        << "{\"deck\": {\"model\": {\"kind\": \"" << kind << "\"}, \"optim\": {\"global_batch\": 64, \"micro_batch\": "
        << micro_batch << "}},\n"
        << " \"layout\": {\"world\": 2, \"nodes\": 1, \"dp\": 2, \"pp\": 1, \"zero\": 0, \"micro_batch\": " << micro_batch
        << ", \"micro_batches\": " << 32 / micro_batch << "},\n"
        << " \"steps\": 100, \"final\": {\"train_loss\": 0.5, \"test_loss\": " << test_loss
        << ", \"test_accuracy\": " << test_accuracy << "},\n"
        << " \"throughput\": {\"samples_per_s\": " << 64.0 / step_time_s << ", \"step_time_s\": " << step_time_s << "}}\n";
  }
};

}  // namespace

TEST_F(SweepReport, ReadsPointsWithOrWithoutSetAndSkipsComments) {
  sweep_file("# lr x micro-batch\noptim.lr=1e-3 optim.micro_batch=8\n\n--set optim.lr=3e-3 --set optim.micro_batch=16  # two\n");
  const auto points = read_sweep_file((dir_ / "sweep.txt").string());
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0], (std::vector<std::pair<std::string, std::string>>{{"optim.lr", "1e-3"}, {"optim.micro_batch", "8"}}));
  EXPECT_EQ(points[1], (std::vector<std::pair<std::string, std::string>>{{"optim.lr", "3e-3"}, {"optim.micro_batch", "16"}}));
}

// A sweep.txt edited by hand after its points ran (lines swapped) would rank each point's result
// under the other's overrides: refused, naming the point and the values (the report said the
// winner was lr 1e-3 where its report.json records 0.01). Keys a report does not record (an older
// trident's) are not compared.
TEST_F(SweepReport, APointThatRanOtherOverridesIsRefused) {
  sweep_file("optim.micro_batch=16\noptim.micro_batch=8\n");
  point(0, 0.80, 0.60, 8, 0.040);  // ran micro_batch 8: line 1 of the file as it was
  point(1, 0.90, 0.40, 16, 0.025);
  try {
    load_sweep(dir_.string(), "");
    FAIL() << "no error";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("point_0/report.json: point 0 ran with other values than its line of sweep.txt "
                                         "gives (ran -> sweep.txt: optim.micro_batch 8 -> 16)"),
              std::string::npos)
        << e.what();
  }
  sweep_file("optim.micro_batch=8 optim.lr=5e-2\noptim.micro_batch=16 optim.global_batch=64\n");  // lr: not in these reports
  EXPECT_NO_THROW(load_sweep(dir_.string(), ""));
  // run.output_dir is sweep.slurm's (point_K, after the point's overrides): a line's own is not a
  // change; a key this trident does not know leaves the others checked.
  {
    const fs::path file = dir_ / "point_0" / "report.json";
    std::ifstream in(file);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    text.replace(text.find("\"deck\": {"), 9, "\"deck\": {\"run\": {\"output_dir\": \"sweeps/x/point_0\"}, ");
    std::ofstream(file) << text;
  }
  sweep_file("optim.micro_batch=8 run.output_dir=runs/mine\noptim.micro_batch=16\n");
  EXPECT_NO_THROW(load_sweep(dir_.string(), ""));
  sweep_file("optim.micro_batch=16 optim.bogus=1\noptim.micro_batch=16\n");
  EXPECT_THROW(load_sweep(dir_.string(), ""), BadInput);
}

// A point whose report.json has no test figures (null: a NaN loss) is listed, unranked, below the
// ranked ones; it ranked first with a test loss of 0. Its train loss, null too, is no figure (0.0000).
TEST_F(SweepReport, APointWithoutTestFiguresIsNotRanked) {
  sweep_file("optim.micro_batch=8\noptim.micro_batch=16\n");
  point(0, 0.80, 0.60, 8, 0.040);
  point(1, 0.90, 0.40, 16, 0.025);
  {
    const fs::path file = dir_ / "point_1" / "report.json";
    std::ifstream in(file);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string loss = "\"test_loss\": 0.4";
    text.replace(text.find(loss), loss.size(), "\"test_loss\": null");
    const std::string train = "\"train_loss\": 0.5";
    text.replace(text.find(train), train.size(), "\"train_loss\": null");  // diverged: a NaN, not 0
    std::ofstream(file) << text;
  }
  const Sweep s = load_sweep(dir_.string(), "test_loss");
  ASSERT_EQ(s.points.size(), 2u);
  EXPECT_EQ(s.points[0].index, 0);
  EXPECT_EQ(s.points[0].rank, 1);
  EXPECT_EQ(s.points[1].index, 1);
  EXPECT_EQ(s.points[1].rank, 0);
  const std::string md = sweep_markdown(s);
  EXPECT_NE(md.find("| - | 1 | 16 | no test figures in its report.json | - | - | 100 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1 | 0 | 8 | 80.00% | 0.6000 | 0.5000 | 100 |"), std::string::npos) << md;
  EXPECT_NE(sweep_csv(s).find("0,1,16,1,,,,100,"), std::string::npos) << sweep_csv(s);
}

// The deck's comment rule (sweep.slurm reads the file the same way): a '#' at a line's start or
// after a blank begins a comment, and is part of the value elsewhere (a point's data.path was cut
// to "runs/" at its '#').
TEST_F(SweepReport, AHashInsideAValueIsPartOfIt) {
  sweep_file("  # indented comment\ndata.path=runs/#3/d.h5 optim.lr=1e-3\t# note\noptim.lr=2e-3#x\n");
  const auto points = read_sweep_file((dir_ / "sweep.txt").string());
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0], (std::vector<std::pair<std::string, std::string>>{{"data.path", "runs/#3/d.h5"}, {"optim.lr", "1e-3"}}));
  EXPECT_EQ(points[1], (std::vector<std::pair<std::string, std::string>>{{"optim.lr", "2e-3#x"}}));
}

TEST_F(SweepReport, ABadLineNamesTheFileAndLine) {
  sweep_file("optim.lr=1e-3\nlr 3e-3\n");
  try {
    read_sweep_file((dir_ / "sweep.txt").string());
    FAIL() << "no error";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("sweep.txt:2: 'lr' is not a deck override section.key=value"), std::string::npos)
        << e.what();
  }
  sweep_file("# nothing\n\n");
  EXPECT_THROW(read_sweep_file((dir_ / "sweep.txt").string()), BadInput);
  // '--set' alone: sweep.slurm refuses it too (it trained it as a point with no overrides, and the
  // report paired that point's results with the next line's overrides).
  sweep_file("optim.lr=1e-3\n--set  # forgot the value\noptim.lr=2e-3\n");
  try {
    read_sweep_file((dir_ / "sweep.txt").string());
    FAIL() << "no error";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("sweep.txt:2: '--set' with no section.key=value after it"), std::string::npos)
        << e.what();
  }
}

TEST_F(SweepReport, RanksByTestAccuracyWithUnfinishedPointsLast) {
  sweep_file("optim.lr=1e-3 optim.micro_batch=8\noptim.lr=3e-3 optim.micro_batch=16\noptim.lr=1e-2 optim.micro_batch=32\n"
             "optim.lr=3e-2\n");
  point(0, 0.80, 0.60, 8, 0.040);
  point(1, 0.90, 0.40, 16, 0.025);
  point(2, 0.85, 0.30, 32, 0.020);  // lowest loss, not the best accuracy
  // point 3 has not finished: no report.json
  ASSERT_TRUE(is_sweep_dir(dir_.string()));
  const Sweep s = load_sweep(dir_.string(), "");
  EXPECT_EQ(s.metric, "test_accuracy");
  EXPECT_EQ(s.swept_keys, (std::vector<std::string>{"optim.lr", "optim.micro_batch"}));
  ASSERT_EQ(s.points.size(), 4u);
  EXPECT_EQ(s.points[0].index, 1);
  EXPECT_EQ(s.points[1].index, 2);
  EXPECT_EQ(s.points[2].index, 0);
  EXPECT_EQ(s.points[3].index, 3);
  EXPECT_EQ(s.points[0].rank, 1);
  EXPECT_FALSE(s.points[3].finished);
  EXPECT_EQ(s.points[3].rank, 0);

  const Sweep by_loss = load_sweep(dir_.string(), "test_loss");
  EXPECT_EQ(by_loss.points[0].index, 2);
  EXPECT_EQ(by_loss.points[1].index, 1);
  EXPECT_THROW(load_sweep(dir_.string(), "speed"), BadInput);

  const std::string md = sweep_markdown(s);
  EXPECT_NE(md.find("| 1 | 1 | 3e-3 | 16 | 90.00% | 0.4000 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| - | 3 | 3e-2 | (deck) | not finished"), std::string::npos) << md;
  // The micro-batch table: samples/s = 64 / step time; 8 -> 1600, 16 -> 2560 (1.60x), 32 -> 3200 (2.00x).
  EXPECT_NE(md.find("| 8 | 4 | 1 | 40.00 | 1600 | 1.00x |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 16 | 2 | 1 | 25.00 | 2560 | 1.60x |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 32 | 1 | 1 | 20.00 | 3200 | 2.00x |"), std::string::npos) << md;
  const std::string csv = sweep_csv(s);
  EXPECT_NE(csv.find("1,1,3e-3,16,1,0.9,0.4,0.5,100,16,2,0.025,2560,"), std::string::npos) << csv;
  const std::string svg = sweep_svg(s);
  EXPECT_NE(svg.find("samples/s by micro-batch size"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

// A tie on the ranking metric goes to the other metric, not to file order: points 1 and 2 tie at
// 100% accuracy (2 has the lower loss), points 0 and 1 tie at loss 0.30 (1 has the higher accuracy).
// File order ranked a 150x higher loss first.
TEST_F(SweepReport, ATieGoesToTheOtherMetric) {
  sweep_file("optim.lr=1e-3\noptim.lr=3e-3\noptim.lr=1e-2\n");
  point(0, 0.90, 0.30, 8, 0.040);
  point(1, 1.00, 0.30, 8, 0.040);
  point(2, 1.00, 0.002, 8, 0.040);
  const Sweep by_accuracy = load_sweep(dir_.string(), "test_accuracy");
  EXPECT_EQ(by_accuracy.points[0].index, 2);
  EXPECT_EQ(by_accuracy.points[1].index, 1);
  EXPECT_EQ(by_accuracy.points[2].index, 0);
  const Sweep by_loss = load_sweep(dir_.string(), "test_loss");
  EXPECT_EQ(by_loss.points[0].index, 2);
  EXPECT_EQ(by_loss.points[1].index, 1);
  EXPECT_EQ(by_loss.points[2].index, 0);
}

// An output that cannot be written leaves none of the set: sweep.md was left (and sweep.csv.tmp)
// when sweep.csv could not be written.
TEST_F(SweepReport, AnOutputThatCannotBeWrittenLeavesNoneOfTheFiles) {
  sweep_file("optim.lr=1e-3\n");
  point(0, 0.9, 0.3, 8, 0.040);
  const Sweep sweep = load_sweep(dir_.string(), "");
  const fs::path out = dir_ / "out";
  fs::create_directories(out / "sweep.csv");  // a folder where the CSV goes
  try {
    write_sweep(sweep, out.string());
    FAIL() << "no error";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("sweep.csv: a folder has its name"), std::string::npos) << e.what();
  }
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(out)) left.push_back(entry.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"sweep.csv"});
  std::ofstream(dir_ / "a_file") << "x";
  try {
    write_sweep(sweep, (dir_ / "a_file").string());
    FAIL() << "no error";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("a_file is a file, not a folder"), std::string::npos) << e.what();
  }
}

TEST_F(SweepReport, TokenModelsRankByTestLossAndNoMicroBatchTableWhenItIsNotSwept) {
  sweep_file("optim.lr=1e-3\noptim.lr=3e-3\n");
  point(0, 0.30, 2.5, 16, 0.1, "gpt");
  point(1, 0.20, 2.1, 16, 0.1, "gpt");
  const Sweep s = load_sweep(dir_.string(), "");
  EXPECT_EQ(s.metric, "test_loss");
  EXPECT_EQ(s.points[0].index, 1);
  EXPECT_EQ(sweep_markdown(s).find("Micro-batch size"), std::string::npos);
}

TEST_F(SweepReport, NoFinishedPointIsBadInput) {
  sweep_file("optim.lr=1e-3\n");
  try {
    load_sweep(dir_.string(), "");
    FAIL() << "no error";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("no point of the sweep"), std::string::npos) << e.what();
  }
}

TEST_F(SweepReport, AValueWithABarStaysInItsMarkdownCell) {
  sweep_file("data.path=a|b.h5\ndata.path=c.h5\n");
  point(0, 0.80, 0.60, 16, 0.1);
  point(1, 0.90, 0.40, 16, 0.1);
  const std::string md = sweep_markdown(load_sweep(dir_.string(), ""));
  EXPECT_NE(md.find("| 2 | 0 | a\\|b.h5 | 80.00% |"), std::string::npos) << md;  // the '|' escaped: one cell
}
