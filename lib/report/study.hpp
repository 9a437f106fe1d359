#pragma once
// Scaling studies: `trident report STUDY_DIR --out DIR` reads every report.json under a folder,
// groups the runs by layout (everything but the rank count), and writes the table a person reads
// (report.md), the numbers a script reads (report.csv) and a plot (report.svg: speedup and
// efficiency against ideal). No LibTorch, no MPI here: it only reads JSON.
//
// Speedup and efficiency are relative to each group's baseline, its smallest run (N0 ranks,
// step time T0); a run of N ranks with step time TN has
//   strong scaling (fixed global batch): speedup T0/TN,            efficiency T0*N0/(N*TN)
//   weak scaling (fixed per-rank batch): speedup (T0/TN)*(N/N0),   efficiency T0/TN
// (with N0 = 1 these are the usual T1/TN, T1/(N*TN) and T1/TN); ideal speedup is N/N0, ideal
// efficiency 1.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "report/report.hpp"

namespace trident::report {

struct StudyRun {
  std::string file;  // the report.json it came from
  std::string name;  // deck run.name
  int world = 1, nodes = 1, dp = 1, pp = 1, zero = 0;
  std::string backend, device, schedule, model, precision;
  int64_t parameters = 0;  // the model's (0: an older report without the field)
  int64_t global_batch = 0, micro_batch = 0, steps = 0, steps_run = 0;  // steps_run: in this run (after a resume)
  double step_time_s = 0, samples_per_s = 0;
  std::map<std::string, double> phase_s;          // time_s.* (max over ranks), seconds over the run
  int64_t peak_bytes = 0, model_state_bytes = 0;  // per rank, max over ranks
  // Pipelines: micro-batches per step, the bubble (mean over ranks) and its expectation for equal
  // op times, and each stage's figures with its last step's timeline.
  int64_t micro_batches = 1;
  double bubble = 0, expected_bubble = 0;
  std::vector<StageReport> stages;
  // Filled by compute_scaling:
  // The layout without the rank count, and the batch the study's kind keeps, e.g.
  // "cnn fp32 pp1 zero0 1f1b mpi/cpu, global batch 128"
  std::string group;
  bool baseline = false;
  double speedup = 0, ideal_speedup = 0, efficiency = 0;
};

struct Study {
  std::string kind;                                // strong | weak
  std::string dir;                                 // the study folder(s) read
  std::vector<StudyRun> runs;                      // sorted by group, then ranks
  std::map<std::string, std::string> baseline_of;  // group -> baseline run's file
};

// Reads one report.json; throws BadInput naming the file when it is not JSON or lacks a field.
StudyRun read_study_run(const std::string& file);

// Every report.json under dir (recursively), sorted; throws BadInput when there is none.
std::vector<std::string> find_reports(const std::string& dir);

// Groups, picks each group's baseline, fills speedup and efficiency. kind: strong | weak | ""
// (inferred: the same global batch everywhere = strong, global batch proportional to ranks =
// weak; BadInput when the runs fit neither).
Study compute_scaling(std::vector<StudyRun> runs, const std::string& kind);

// Reads the folders and computes the scaling (find_reports + read_study_run + compute_scaling).
Study load_study(const std::vector<std::string>& dirs, const std::string& kind);

std::string study_markdown(const Study& study);
std::string study_csv(const Study& study);
std::string study_svg(const Study& study);
// A pipelined run's last step, one row per stage: each compute op (F, B, Bi, W) where it ran,
// the idle time between; empty when the run has no timeline (no pipeline, or a GPU run).
std::string timeline_svg(const StudyRun& run);
// Where write_study puts a run's timeline picture (a name made of the run's folder).
std::string timeline_file(const Study& study, const StudyRun& run);

// Writes report.md, report.csv and report.svg into out_dir (created), and a timeline picture per
// pipelined run; returns the paths.
std::vector<std::string> write_study(const Study& study, const std::string& out_dir);

}  // namespace trident::report
