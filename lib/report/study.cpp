#include "report/study.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "report/report.hpp"
#include "report/text_output.hpp"

namespace trident::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Per-step phases (shown in ms per step) and whole-run phases (seconds), in the order of the
// report.json contract; other time_s keys a newer trident adds are shown as whole-run seconds.
const std::vector<std::string> kStepPhases = {"data_wait", "forward", "backward", "comm_exposed", "optimizer"};
const std::vector<std::string> kRunPhases = {"checkpoint", "evaluation", "total"};

std::vector<std::string> phase_order(const Study& study) {
  std::vector<std::string> order = kStepPhases;
  order.insert(order.end(), kRunPhases.begin(), kRunPhases.end());
  std::set<std::string> extra;
  for (const auto& r : study.runs)
    for (const auto& [k, v] : r.phase_s)
      if (std::find(order.begin(), order.end(), k) == order.end()) extra.insert(k);
  order.insert(order.end() - 1, extra.begin(), extra.end());  // before "total"
  return order;
}

bool per_step(const std::string& phase) {
  return std::find(kStepPhases.begin(), kStepPhases.end(), phase) != kStepPhases.end();
}

std::string relative_dir(const Study& study, const std::string& file) {
  const fs::path dir = fs::path(file).parent_path();
  if (study.dir.find(", ") != std::string::npos) return dir.string();  // several study folders
  std::error_code ec;
  const fs::path rel = fs::relative(dir, study.dir, ec);
  return ec || rel.empty() ? dir.string() : rel.string();
}

std::string kind_rule(const std::string& kind) {
  return kind == "weak" ? "fixed batch per rank; efficiency T0/TN, speedup (T0/TN)·(N/N0)"
                        : "fixed global batch; speedup T0/TN, efficiency T0·N0/(N·TN)";
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// A pipelined run whose report holds a timeline (CPU runs) gets a timeline picture.
bool has_timeline(const StudyRun& run) {
  if (run.pp < 2) return false;
  for (const auto& st : run.stages)
    if (!st.timeline.empty()) return true;
  return false;
}

}  // namespace

// ---- reading ------------------------------------------------------------------------------

StudyRun read_study_run(const std::string& file) {
  const ReadReport read = read_report_json(file);
  const Summary& s = read.summary;
  StudyRun r;
  r.file = file;
  r.name = s.deck.run.name;
  r.world = s.layout.world;
  r.nodes = s.layout.nodes;
  r.dp = s.layout.dp;
  r.pp = s.layout.pp;
  r.zero = s.layout.zero;
  r.backend = s.layout.backend;
  r.device = s.layout.device;
  r.schedule = s.layout.schedule;
  r.model = s.deck.model.kind;
  r.parameters = s.parameters;
  r.precision = s.deck.optim.precision;
  r.global_batch = s.deck.optim.global_batch;
  r.micro_batch = s.layout.micro_batch;
  r.steps = s.steps;
  r.steps_run = s.steps - s.first_step;  // a resumed run trained only the steps after its checkpoint
  r.samples_per_s = s.samples_per_s;
  r.step_time_s = s.step_time_s;
  r.phase_s = read.time_s;
  r.peak_bytes = s.peak_bytes;
  r.model_state_bytes = s.memory.params + s.memory.grads + s.memory.optimizer + s.memory.master;
  r.micro_batches = s.layout.micro_batches;
  r.bubble = s.bubble_fraction;
  r.expected_bubble = s.expected_bubble_fraction;
  r.stages = s.stages;
  if (r.world < 1) throw BadInput(fmt::format("report: {}: layout.world = {} is not a rank count", file, r.world));
  for (const auto& [field, count] : {std::pair<const char*, int64_t>{"layout.nodes", r.nodes}, {"layout.dp", r.dp},
                                     {"layout.pp", r.pp}, {"deck.optim.global_batch", r.global_batch}})
    if (count < 1) throw BadInput(fmt::format("report: {}: {} = {} is not a count (1 or more)", file, field, count));
  if (!(r.step_time_s > 0) || !std::isfinite(r.step_time_s))
    throw BadInput(
        fmt::format("report: {}: no step time (throughput.step_time_s and samples_per_s are 0: did the "
                    "run train any steps?)",
                    file));
  return r;
}

std::vector<std::string> find_reports(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw BadInput(fs::exists(dir, ec) ? fmt::format("report: {} is a file: give the folder that holds the runs' "
                                                     "report.json files (or a sweep folder)",
                                                     dir)
                                       : fmt::format("report: {}: no such folder", dir));
  std::vector<std::string> files;
  // A run folder (one holding report.json) is a leaf: its checkpoints and whatever its links
  // reach are not searched. Links to run folders are followed (a study assembled from links to
  // runs kept elsewhere), each folder entered once: a link back up the tree does not loop.
  const auto run_folder = [&](const fs::path& folder) {
    std::error_code entry_ec;
    if (!fs::is_regular_file(folder / "report.json", entry_ec)) return false;
    files.push_back((folder / "report.json").string());
    return true;
  };
  if (!run_folder(dir)) {
    std::set<fs::path> entered;
    if (auto top = fs::canonical(dir, ec); !ec) entered.insert(top);
    for (auto it = fs::recursive_directory_iterator(
             dir, fs::directory_options::skip_permission_denied | fs::directory_options::follow_directory_symlink, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      std::error_code entry_ec;
      if (!it->is_directory(entry_ec)) continue;
      const fs::path real = fs::canonical(it->path(), entry_ec);
      if ((!entry_ec && !entered.insert(real).second) || run_folder(it->path())) it.disable_recursion_pending();
    }
  }
  if (ec) throw BadInput(fmt::format("report: {}: cannot list the folder ({})", dir, ec.message()));
  if (files.empty()) throw BadInput(fmt::format("report: no report.json under {}", dir));
  std::sort(files.begin(), files.end());
  return files;
}

// ---- the numbers --------------------------------------------------------------------------

Study compute_scaling(std::vector<StudyRun> runs, const std::string& kind) {
  if (runs.empty()) throw BadInput("report: no runs");
  if (!kind.empty() && kind != "strong" && kind != "weak")
    throw BadInput(fmt::format("report: --kind '{}': strong | weak", kind));
  for (auto& r : runs)
    r.group = fmt::format("{} {} pp{} zero{} {} {}/{}", r.model, r.precision, r.pp, r.zero, r.schedule, r.backend,
                          r.device);

  Study study;
  study.kind = kind;
  if (study.kind.empty()) {  // infer it from the batches: strong keeps the global batch, weak the per-rank one
    bool strong = true, weak = true;
    for (const auto& r : runs)
      for (const auto& s : runs) {
        if (r.group != s.group) continue;
        strong = strong && r.global_batch == s.global_batch;
        weak = weak && r.global_batch * s.world == s.global_batch * r.world;
      }
    if (!strong && !weak)
      throw BadInput(
          "report: the runs keep neither the global batch (strong scaling) nor the batch per rank (weak "
          "scaling) fixed; say which with --kind strong|weak");
    study.kind = strong ? "strong" : "weak";
  }
  // Runs of one layout at another batch (another study in the same folders) are a group of their
  // own: strong scaling keeps the global batch, weak scaling the batch per rank. A run alone at its
  // batch among others of its layout breaks the kind's rule (a weak report of a strong study):
  // refused, as it would be its own baseline and say nothing.
  std::vector<std::string> layout_of(runs.size());                  // each run's layout, before the batch
  std::map<std::string, std::vector<std::string>> batches_of_layout;  // layout -> each run's batch group
  for (size_t i = 0; i < runs.size(); ++i) {
    StudyRun& r = runs[i];
    layout_of[i] = r.group;
    r.group += study.kind == "strong" ? fmt::format(", global batch {}", r.global_batch)
               : r.global_batch % r.world == 0
                   ? fmt::format(", {} samples per rank", r.global_batch / r.world)
                   : fmt::format(", {}/{} samples per rank", r.global_batch, r.world);
    batches_of_layout[layout_of[i]].push_back(r.group);
  }
  // One group (layout and batch) is one model: two sizes of it (model.hidden, layers) would make the smaller one the
  // other's baseline, an efficiency of 120% say.
  for (const auto& r : runs)
    for (const auto& s : runs)
      if (r.group == s.group && r.parameters > 0 && s.parameters > 0 && r.parameters != s.parameters)
        throw BadInput(fmt::format("report: {} and {} train different models ({} and {} parameters) in one group ({}): "
                                   "a scaling study compares one model; give each its own study folder",
                                   r.file, s.file, r.parameters, s.parameters, r.group));
  for (size_t i = 0; i < runs.size(); ++i) {
    const StudyRun& r = runs[i];
    const auto& groups = batches_of_layout[layout_of[i]];
    if (groups.size() > 1 && std::count(groups.begin(), groups.end(), r.group) == 1)
      throw BadInput(fmt::format("report: {} is the only run of {}: its layout's runs do not keep the {} "
                                 "({} scaling) fixed; report them with the kind they follow, or give each "
                                 "study a folder of its own",
                                 r.file, r.group, study.kind == "strong" ? "global batch" : "batch per rank",
                                 study.kind));
  }
  std::stable_sort(runs.begin(), runs.end(), [](const StudyRun& a, const StudyRun& b) {
    return a.group != b.group ? a.group < b.group : a.world < b.world;
  });
  // Two runs of a group at the same rank count leave its figures ambiguous (which is the baseline?).
  for (size_t i = 1; i < runs.size(); ++i)
    if (runs[i].group == runs[i - 1].group && runs[i].world == runs[i - 1].world)
      throw BadInput(fmt::format("report: {} and {} are both runs of {} at {} rank(s): keep one (or give the "
                                 "other study a folder of its own)",
                                 runs[i - 1].file, runs[i].file, runs[i].group, runs[i].world));

  for (size_t first = 0; first < runs.size();) {
    size_t end = first;
    while (end < runs.size() && runs[end].group == runs[first].group) ++end;
    StudyRun& base = runs[first];  // the smallest run of the group (sorted by ranks)
    base.baseline = true;
    study.baseline_of[base.group] = base.file;
    const double t0 = base.step_time_s, n0 = base.world;
    for (size_t i = first; i < end; ++i) {
      StudyRun& r = runs[i];
      const double n = r.world, tn = r.step_time_s;
      r.ideal_speedup = n / n0;
      if (study.kind == "strong") {
        r.speedup = t0 / tn;
        r.efficiency = t0 * n0 / (n * tn);
      } else {
        r.efficiency = t0 / tn;
        r.speedup = r.efficiency * n / n0;
      }
    }
    first = end;
  }
  study.runs = std::move(runs);
  return study;
}

Study load_study(const std::vector<std::string>& dirs, const std::string& kind) {
  std::vector<StudyRun> runs;
  std::set<fs::path> read;  // a run reached twice (a folder given twice, or inside another given) is one run
  for (const auto& dir : dirs)
    for (const auto& file : find_reports(dir)) {
      std::error_code ec;
      const fs::path real = fs::canonical(file, ec);
      if (ec || read.insert(real).second) runs.push_back(read_study_run(file));
    }
  Study study = compute_scaling(std::move(runs), kind);
  for (const auto& dir : dirs) study.dir += (study.dir.empty() ? "" : ", ") + dir;
  return study;
}

// ---- report.md ----------------------------------------------------------------------------

std::string study_markdown(const Study& study) {
  std::ostringstream md;
  const std::string title = study.kind == "weak" ? "Weak" : "Strong";
  md << fmt::format("# {} scaling study\n\n", title);
  md << fmt::format(
      "Study folder `{}`: {} run(s). {} scaling: {}. Each group (the layout without the rank count) is "
      "measured against its baseline, its smallest run (N0 ranks, step time T0).\n",
      study.dir, study.runs.size(), title, kind_rule(study.kind));
  const auto phases = phase_order(study);
  for (size_t first = 0; first < study.runs.size();) {
    size_t end = first;
    while (end < study.runs.size() && study.runs[end].group == study.runs[first].group) ++end;
    const StudyRun& base = study.runs[first];
    md << fmt::format("\n## {}\n\nBaseline: **{}** ({} rank(s) on {} node(s), step time {:.3f} ms), `{}`\n\n",
                      base.group, relative_dir(study, base.file), base.world, base.nodes, 1e3 * base.step_time_s,
                      base.file);
    md << "| ranks | nodes | layout | global batch | step time (ms) | samples/s | speedup | ideal | efficiency "
          "| peak memory (MiB) | model state (MiB) | run |\n";
    md << "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
    for (size_t i = first; i < end; ++i) {
      const StudyRun& r = study.runs[i];
      md << fmt::format(
          "| {} | {} | dp {} × pp {}, zero {} | {} | {:.3f} | {:.1f} | {:.2f}{} | {:.2f} | {:.1f}% | {:.1f} "
          "| {:.2f} | {} |\n",
          r.world, r.nodes, r.dp, r.pp, r.zero, r.global_batch, 1e3 * r.step_time_s, r.samples_per_s, r.speedup,
          r.baseline ? " (baseline)" : "", r.ideal_speedup, 100.0 * r.efficiency, mib(r.peak_bytes),
          mib(r.model_state_bytes), md_cell(relative_dir(study, r.file)));
    }
    md << "\nTime by phase (max over ranks): ms per step for the training phases, seconds over the whole run for "
          "the others.\n\n| ranks | steps run |";
    for (const auto& p : phases) md << fmt::format(" {} ({}) |", p, per_step(p) ? "ms/step" : "s");
    md << "\n|---:|---:|";
    for (size_t k = 0; k < phases.size(); ++k) md << "---:|";
    md << "\n";
    for (size_t i = first; i < end; ++i) {
      const StudyRun& r = study.runs[i];
      md << fmt::format("| {} | {} |", r.world, r.steps_run);
      for (const auto& p : phases) {
        const auto it = r.phase_s.find(p);
        if (it == r.phase_s.end()) {
          md << " - |";
        } else if (per_step(p)) {
          md << fmt::format(" {:.3f} |", 1e3 * it->second / static_cast<double>(std::max<int64_t>(1, r.steps_run)));
        } else {
          md << fmt::format(" {:.3f} |", it->second);
        }
      }
      md << "\n";
    }
    first = end;
  }
  md << "\nPlot: `report.svg` (speedup and efficiency against ideal). Numbers: `report.csv`.\n";
  bool any_pipeline = false;
  for (const auto& r : study.runs) any_pipeline = any_pipeline || r.pp > 1;
  if (any_pipeline) md << "\n## Pipelines\n\nBubble: 1 - compute / step time per rank, mean over ranks; expected: the "
                         "schedule's for equal op times. Per stage (its first replica): compute and time blocked on a "
                         "neighbour over the run.\n";
  for (const auto& r : study.runs) {
    if (r.pp < 2) continue;
    md << fmt::format("\n### {}: pp {}, {}, {} micro-batches per step\n\nbubble measured {:.3f}, expected {:.3f}\n\n",
                      relative_dir(study, r.file), r.pp, r.schedule, r.micro_batches, r.bubble, r.expected_bubble);
    md << "| stage | compute (s) | blocked (s) | bubble |\n|---:|---:|---:|---:|\n";
    for (const auto& st : r.stages)
      md << fmt::format("| {} | {:.3f} | {:.3f} | {:.3f} |\n", st.stage, st.compute_s, st.blocked_s, st.bubble_fraction);
    if (has_timeline(r)) md << fmt::format("\n![the last step on each stage]({})\n", timeline_file(study, r));
  }
  return md.str();
}

// ---- report.csv ---------------------------------------------------------------------------

std::string study_csv(const Study& study) {
  const auto phases = phase_order(study);
  std::ostringstream csv;
  csv << "group,kind,ranks,nodes,dp,pp,zero,schedule,backend,device,model,global_batch,micro_batch,steps,steps_run,"
         "step_time_s,samples_per_s,speedup,ideal_speedup,efficiency,baseline,peak_bytes,model_state_bytes";
  for (const auto& p : phases) csv << ",time_" << p << "_s";
  csv << ",file\n";
  for (const auto& r : study.runs) {
    csv << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.9g},{:.9g},{:.6f},{:.6f},{:.6f},{},{},{}",
                       csv_field(r.group), study.kind, r.world, r.nodes, r.dp, r.pp, r.zero, csv_field(r.schedule),
                       csv_field(r.backend), csv_field(r.device), csv_field(r.model), r.global_batch, r.micro_batch,
                       r.steps, r.steps_run, r.step_time_s, r.samples_per_s, r.speedup, r.ideal_speedup, r.efficiency,
                       r.baseline ? 1 : 0, r.peak_bytes, r.model_state_bytes);
    for (const auto& p : phases) {
      const auto it = r.phase_s.find(p);
      csv << (it == r.phase_s.end() ? std::string(",") : fmt::format(",{:.9g}", it->second));
    }
    csv << "," << csv_field(r.file) << "\n";
  }
  return csv.str();
}

// ---- report.svg: two panels, speedup and efficiency against ranks (log2), ideal dashed -----

std::string study_svg(const Study& study) {
  const double panel_w = 420, panel_h = 300, left = 60, top = 70, gap = 90, bottom = 50;
  const double width = left + 2 * panel_w + gap + 30, height = top + panel_h + bottom;
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

  std::set<int> ranks;
  double max_speedup = 1, max_eff = 1;
  for (const auto& r : study.runs) {
    ranks.insert(r.world);
    max_speedup = std::max({max_speedup, r.speedup, r.ideal_speedup});
    max_eff = std::max(max_eff, r.efficiency);
  }
  const double lo = std::log2(*ranks.begin()), hi = std::max(std::log2(*ranks.rbegin()), lo + 1);
  auto x_of = [&](double panel_x, int n) { return panel_x + 20 + (std::log2(n) - lo) / (hi - lo) * (panel_w - 40); };
  const double speedup_step = nice_step(max_speedup * 1.05), eff_step = nice_step(std::max(1.1, max_eff * 1.05));
  const double y_top_speedup = std::ceil(max_speedup * 1.05 / speedup_step) * speedup_step;
  const double y_top_eff = std::ceil(std::max(1.1, max_eff * 1.05) / eff_step) * eff_step;
  auto y_of = [&](double v, double top_value) { return top + panel_h - v / top_value * panel_h; };

  std::ostringstream svg;
  svg << fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n",
      width, height);
  svg << fmt::format(
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{:.0f}\" y=\"22\" "
      "font-size=\"16\" font-weight=\"bold\">{} scaling: {}</text>\n",
      left, study.kind == "weak" ? "Weak" : "Strong", xml_escape(kind_rule(study.kind)));
  // Legend: one colour per group; dashed = ideal.
  std::vector<std::string> groups;
  for (const auto& r : study.runs)
    if (groups.empty() || groups.back() != r.group) groups.push_back(r.group);
  double lx = left;
  for (size_t g = 0; g < groups.size(); ++g) {
    const char* c = colors[g % 8];
    svg << fmt::format(
        "<line x1=\"{0:.0f}\" y1=\"42\" x2=\"{1:.0f}\" y2=\"42\" stroke=\"{2}\" stroke-width=\"2\"/>"
        "<circle cx=\"{3:.0f}\" cy=\"42\" r=\"3.5\" fill=\"{2}\"/><text x=\"{4:.0f}\" y=\"46\">{5}</text>\n",
        lx, lx + 24, c, lx + 12, lx + 30, xml_escape(groups[g]));
    lx += 40 + 7.0 * static_cast<double>(groups[g].size());
  }
  svg << fmt::format(
      "<line x1=\"{0:.0f}\" y1=\"42\" x2=\"{1:.0f}\" y2=\"42\" stroke=\"#555\" stroke-dasharray=\"5,4\"/>"
      "<text x=\"{2:.0f}\" y=\"46\">ideal</text>\n",
      lx, lx + 24, lx + 30);

  auto panel = [&](double px, const std::string& label, double top_value, double step, bool speedup) {
    // frame, grid and y ticks
    svg << fmt::format(
        "<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"none\" "
        "stroke=\"#333\"/>\n",
        px, top, panel_w, panel_h);
    const int ticks = static_cast<int>(std::lround(top_value / step));
    for (int t = 0; t <= ticks; ++t) {
      const double v = step * t, y = y_of(v, top_value);
      svg << fmt::format(
          "<line x1=\"{0:.0f}\" y1=\"{1:.1f}\" x2=\"{2:.0f}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
          "<text x=\"{3:.0f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
          px, y, px + panel_w, px - 6, y + 4, speedup ? fmt::format("{:.3g}", v) : fmt::format("{:.0f}%", 100 * v));
    }
    for (int n : ranks) {
      const double x = x_of(px, n);
      svg << fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.0f}\" x2=\"{0:.1f}\" y2=\"{2:.0f}\" stroke=\"#eee\"/>"
          "<text x=\"{0:.1f}\" y=\"{3:.0f}\" text-anchor=\"middle\">{4}</text>\n",
          x, top, top + panel_h, top + panel_h + 16, n);
    }
    svg << fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">ranks (log scale)</text>\n",
                       px + panel_w / 2, top + panel_h + 34);
    svg << fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" font-weight=\"bold\">{}</text>\n", px, top - 8, label);
    // ideal and measured, per group
    for (size_t g = 0; g < groups.size(); ++g) {
      std::string ideal, measured, dots;
      for (const auto& r : study.runs) {
        if (r.group != groups[g]) continue;
        const double x = x_of(px, r.world);
        const double v = speedup ? r.speedup : r.efficiency, iv = speedup ? r.ideal_speedup : 1.0;
        ideal += fmt::format("{:.1f},{:.1f} ", x, y_of(iv, top_value));
        measured += fmt::format("{:.1f},{:.1f} ", x, y_of(v, top_value));
        dots += fmt::format(
            "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"><title>{} ranks: {}</title>"
            "</circle>\n",
            x, y_of(v, top_value), colors[g % 8], r.world,
            speedup ? fmt::format("speedup {:.2f} (ideal {:.2f})", v, iv) : fmt::format("efficiency {:.1f}%", 100 * v));
      }
      svg << fmt::format(
          "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-opacity=\"0.6\" "
          "stroke-dasharray=\"5,4\"/>\n",
          ideal, speedup ? colors[g % 8] : "#555");
      svg << fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n{}", measured,
                         colors[g % 8], dots);
    }
  };
  panel(left, "speedup", y_top_speedup, speedup_step, true);
  panel(left + panel_w + gap, "parallel efficiency", y_top_eff, eff_step, false);
  svg << "</svg>\n";
  return svg.str();
}

std::string timeline_file(const Study& study, const StudyRun& run) {
  const std::string relative = relative_dir(study, run.file);
  std::string name = relative;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  // A path that is not a plain name (pp2/1f1b and pp2_1f1b would share one picture) or is long (a
  // file name holds 255 bytes) gets a hash of the path (FNV-1a), and a long one only its start.
  constexpr size_t kKept = 180;
  if (name != relative || name.size() > kKept) {
    uint64_t hash = 1469598103934665603ull;
    for (const unsigned char c : relative) hash = (hash ^ c) * 1099511628211ull;  // (a/b and a_b differ)
    name = fmt::format("{}_{:016x}", name.substr(0, std::min(name.size(), kKept)), hash);
  }
  return "timeline_" + name + ".svg";
}

std::string timeline_svg(const StudyRun& run) {
  double end = 0;
  for (const auto& st : run.stages)
    for (const auto& op : st.timeline) end = std::max(end, op.end_s);
  if (!(end > 0)) return "";
  const double left = 90, top = 64, row = 30, gap = 10, width = 960, plot_w = width - left - 30;
  const double height = top + static_cast<double>(run.stages.size()) * (row + gap) + 70;
  auto x_of = [&](double t) { return left + t / end * plot_w; };
  // "F3", or "F3.1" for micro-batch 3's forward through this rank's chunk 1 (interleaved).
  auto label = [](const TimelineOp& op) {
    return op.op + std::to_string(op.micro) + (op.chunk > 0 ? "." + std::to_string(op.chunk) : "");
  };
  auto color = [](const std::string& op) {
    return op == "F" ? "#4c78a8" : op == "W" ? "#54a24b" : op == "Bi" ? "#f58518" : "#e45756";
  };
  std::ostringstream svg;
  svg << fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" font-family=\"sans-serif\" "
                     "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
                     width, height);
  svg << fmt::format("<text x=\"{:.0f}\" y=\"22\" font-size=\"15\">{}: pp {}, {}, {} micro-batches, the last step's "
                     "compute on each stage</text>\n",
                     left, xml_escape(run.name), run.pp, xml_escape(run.schedule), run.micro_batches);
  svg << fmt::format("<text x=\"{:.0f}\" y=\"42\">bubble measured {:.3f} (mean over ranks, whole run), {:.3f} expected "
                     "for equal op times; grey: idle (waiting for a neighbour)</text>\n",
                     left, run.bubble, run.expected_bubble);
  for (size_t s = 0; s < run.stages.size(); ++s) {
    const auto& st = run.stages[s];
    const double y = top + static_cast<double>(s) * (row + gap);
    svg << fmt::format("<text x=\"8\" y=\"{:.1f}\">stage {}</text>\n", y + row / 2 + 4, st.stage);
    svg << fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.0f}\" fill=\"#e6e6e6\"/>\n", left, y,
                       plot_w, row);
    for (const auto& op : st.timeline) {
      const double x0 = x_of(op.start_s), w = std::max(0.5, x_of(op.end_s) - x0);
      svg << fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.0f}\" fill=\"{}\" "
                         "stroke=\"white\" stroke-width=\"0.5\"><title>{} {:.2f}-{:.2f} ms</title></rect>\n",
                         x0, y, w, row, color(op.op), label(op), 1e3 * op.start_s, 1e3 * op.end_s);
      if (w > 16)
        svg << fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"white\" font-size=\"10\" text-anchor=\"middle\">{}</text>\n",
                           x0 + w / 2, y + row / 2 + 4, label(op));
    }
  }
  // Time axis in ms, and the legend.
  const double axis_y = top + static_cast<double>(run.stages.size()) * (row + gap) + 4;
  const double step_ms = nice_step(1e3 * end);
  for (double t = 0; t <= 1e3 * end + 1e-9; t += step_ms)
    svg << fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"#888\"/><text x=\"{0:.1f}\" "
                       "y=\"{3:.1f}\" text-anchor=\"middle\">{4:g}</text>\n",
                       x_of(t / 1e3), axis_y, axis_y + 5, axis_y + 18, t);
  svg << fmt::format("<text x=\"{:.0f}\" y=\"{:.1f}\">ms from the step's start</text>\n", left + plot_w - 130, axis_y + 34);
  double lx = left;
  for (const auto& [op, text] : std::vector<std::pair<std::string, std::string>>{
           {"F", "forward"}, {"B", "backward"}, {"Bi", "input gradient"}, {"W", "weight gradient"}}) {
    svg << fmt::format("<rect x=\"{:.0f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{:.0f}\" "
                       "y=\"{:.1f}\">{} {}</text>\n",
                       lx, axis_y + 24, color(op), lx + 16, axis_y + 34, op, text);
    lx += 150;
  }
  svg << "</svg>\n";
  return svg.str();
}

std::vector<std::string> write_study(const Study& study, const std::string& out_dir) {
  std::vector<std::pair<std::string, std::string>> files{
      {"report.md", study_markdown(study)}, {"report.csv", study_csv(study)}, {"report.svg", study_svg(study)}};
  for (const auto& run : study.runs)
    if (has_timeline(run)) files.emplace_back(timeline_file(study, run), timeline_svg(run));
  return write_text_files(out_dir, files);
}

}  // namespace trident::report
