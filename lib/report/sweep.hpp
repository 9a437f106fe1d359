#pragma once
// Hyperparameter sweeps: jobs/sweep.slurm runs point K of a sweep file (one line of deck
// overrides per point) as array task K, in SWEEP_DIR/point_K, and copies the file to
// SWEEP_DIR/sweep.txt. `trident report SWEEP_DIR` ranks the points by their final test metric with
// their overrides side by side (sweep.md, sweep.csv, sweep.svg); when optim.micro_batch is swept,
// the report also shows its effect on step time and samples/s. No LibTorch, no MPI here.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trident::report {

struct SweepPoint {
  int index = 0;                           // K: its line among the sweep file's points, its array task
  std::vector<std::pair<std::string, std::string>> overrides;  // section.key -> value, as written
  std::string dir;                         // SWEEP_DIR/point_K
  bool finished = false;                   // its report.json exists (the run ended and wrote it)
  bool evaluated = false;                  // and has the final test figures (null: NaN), so it is ranked
  double test_loss = 0, test_accuracy = 0, train_loss = 0;
  double step_time_s = 0, samples_per_s = 0;
  int64_t micro_batch = 0, micro_batches = 0, steps = 0;
  int rank = 0;                            // 1 = best; 0 = not finished
};

struct Sweep {
  std::string dir;
  std::string metric;                   // test_accuracy (higher first) | test_loss (lower first)
  std::vector<std::string> swept_keys;  // every key some point sets, in the file's order
  std::vector<SweepPoint> points;       // in rank order, unfinished points last (by index)
};

// The point lines of a sweep file: each a list of section.key=value words (a "--set" before one
// is allowed); blank lines and '#' comments are not points. BadInput naming the file and line
// for a word that is not section.key=value.
std::vector<std::vector<std::pair<std::string, std::string>>> read_sweep_file(const std::string& path);

// Whether `dir` is a sweep folder (it holds the sweep.txt that jobs/sweep.slurm copies there).
bool is_sweep_dir(const std::string& dir);

// Reads SWEEP_DIR/sweep.txt and each point's report.json, and ranks them. metric: test_accuracy |
// test_loss | "" (test_loss for token models, whose accuracy is next-token accuracy; else
// test_accuracy). BadInput when no point has finished.
Sweep load_sweep(const std::string& dir, const std::string& metric);

std::string sweep_markdown(const Sweep& sweep);
std::string sweep_csv(const Sweep& sweep);
std::string sweep_svg(const Sweep& sweep);
// sweep.md, sweep.csv and sweep.svg into out_dir (created); returns their paths.
std::vector<std::string> write_sweep(const Sweep& sweep, const std::string& out_dir);

}  // namespace trident::report
