#include "report/sweep.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "config/deck.hpp"
#include "core/error.hpp"
#include "report/report.hpp"
#include "report/text_output.hpp"

namespace trident::report {

namespace fs = std::filesystem;

namespace {

const char kMicroBatchKey[] = "optim.micro_batch";

bool higher_is_better(const std::string& metric) { return metric == "test_accuracy"; }

double metric_of(const SweepPoint& p, const std::string& metric) {
  return metric == "test_accuracy" ? p.test_accuracy : p.test_loss;
}

std::string metric_text(const SweepPoint& p, const std::string& metric) {
  return metric == "test_accuracy" ? fmt::format("{:.2f}%", 100.0 * p.test_accuracy) : fmt::format("{:.4f}", p.test_loss);
}

bool ranked(const SweepPoint& p) { return p.finished && p.evaluated; }

std::string value_of(const SweepPoint& p, const std::string& key) {
  for (const auto& [k, v] : p.overrides)
    if (k == key) return v;
  return "(deck)";
}

std::string overrides_text(const SweepPoint& p) {
  std::string text;
  for (const auto& [k, v] : p.overrides) text += (text.empty() ? "" : " ") + k + "=" + v;
  return text;
}

// Finished points grouped by their micro-batch: (micro_batch, the group's points).
std::map<int64_t, std::vector<const SweepPoint*>> by_micro_batch(const Sweep& sweep) {
  std::map<int64_t, std::vector<const SweepPoint*>> groups;
  for (const auto& p : sweep.points)
    if (p.finished) groups[p.micro_batch].push_back(&p);
  return groups;
}

bool micro_batch_swept(const Sweep& sweep) {
  return std::find(sweep.swept_keys.begin(), sweep.swept_keys.end(), kMicroBatchKey) != sweep.swept_keys.end() &&
         by_micro_batch(sweep).size() > 1;
}

struct BatchRow {
  int64_t micro_batch = 0, micro_batches = 0;
  size_t points = 0;
  double step_time_s = 0, samples_per_s = 0;  // means over the group's points
};

std::vector<BatchRow> batch_rows(const Sweep& sweep) {
  std::vector<BatchRow> rows;
  for (const auto& [mb, group] : by_micro_batch(sweep)) {
    BatchRow row;
    row.micro_batch = mb;
    row.micro_batches = group.front()->micro_batches;
    row.points = group.size();
    for (const auto* p : group) {
      row.step_time_s += p->step_time_s / static_cast<double>(group.size());
      row.samples_per_s += p->samples_per_s / static_cast<double>(group.size());
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

std::vector<std::vector<std::pair<std::string, std::string>>> read_sweep_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw BadInput(fmt::format("sweep: cannot read the sweep file {}", path));
  std::vector<std::vector<std::pair<std::string, std::string>>> points;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream words(line);
    std::vector<std::pair<std::string, std::string>> point;
    bool words_on_line = false;
    for (std::string word; words >> word;) {
      // The deck's rule: a '#' begins a comment at the line's start or after a blank, and is
      // part of the value elsewhere (data.path=runs/#3/d.h5).
      if (word.front() == '#') break;
      words_on_line = true;
      if (word == "--set") continue;
      const auto eq = word.find('=');
      const auto dot = word.find('.');
      if (eq == std::string::npos || dot == std::string::npos || dot == 0 || dot + 1 >= eq)
        throw BadInput(fmt::format("sweep: {}:{}: '{}' is not a deck override section.key=value", path, n, word));
      point.emplace_back(word.substr(0, eq), word.substr(eq + 1));
    }
    // sweep.slurm refuses such a line too: were it a point there and none here, the results
    // would be paired with the next line's overrides.
    if (words_on_line && point.empty())
      throw BadInput(fmt::format("sweep: {}:{}: '--set' with no section.key=value after it", path, n));
    if (!point.empty()) points.push_back(std::move(point));
  }
  if (points.empty()) throw BadInput(fmt::format("sweep: {} has no points (one line of section.key=value overrides each)", path));
  return points;
}

namespace {

// The deck a point's report.json records has the point's overrides: a sweep.txt edited by hand
// after the point ran would pair its results with other overrides (sweep.slurm refuses such a
// change while the point's folder exists; an editor does not).
void check_point_ran_its_overrides(const SweepPoint& p, const ReadReport& report, const std::string& file) {
  const config::Deck& ran = report.summary.deck;
  // The recorded deck with the point's overrides applied, all together (a pair such as
  // global_batch and micro_batch can hold the rules only together). A key this trident does not
  // know is left out (trident refused it: no run recorded it), the others still checked; and
  // run.output_dir is sweep.slurm's own (point_K, set after the point's overrides).
  std::vector<std::string> known;
  for (const auto& field : config::deck_fields()) known.push_back(field.name());
  std::vector<std::string> overrides;
  for (const auto& [key, value] : config::deck_values(ran)) overrides.push_back(key + "=" + value);
  for (const auto& [key, value] : p.overrides)
    if (key != "run.output_dir" && std::find(known.begin(), known.end(), key) != known.end())
      overrides.push_back(key + "=" + value);
  config::Deck expected;
  try {
    expected = config::parse_deck_text("", file, overrides);
  } catch (const BadInput&) {
    return;  // values trident refuses: no run recorded them
  }
  std::string list;  // of the keys the report records ("section.key before -> after")
  for (const auto& change : config::changed_keys(ran, expected))
    for (const auto& key : report.deck_keys)
      if (change.rfind(key + " ", 0) == 0) list += (list.empty() ? "" : "; ") + change;
  if (list.empty()) return;
  throw BadInput(fmt::format("report: {}: point {} ran with other values than its line of sweep.txt gives (ran -> "
                             "sweep.txt: {}): sweep.txt was changed after it ran; restore the line, or remove {} and "
                             "run the point again",
                             file, p.index, list, p.dir));
}

}  // namespace

bool is_sweep_dir(const std::string& dir) { return fs::is_regular_file(fs::path(dir) / "sweep.txt"); }

Sweep load_sweep(const std::string& dir, const std::string& metric) {
  if (!metric.empty() && metric != "test_accuracy" && metric != "test_loss")
    throw BadInput(fmt::format("report: --rank-by '{}': test_accuracy or test_loss", metric));
  Sweep sweep;
  sweep.dir = dir;
  sweep.metric = metric;
  const auto lines = read_sweep_file((fs::path(dir) / "sweep.txt").string());
  bool token_model = false;
  for (size_t k = 0; k < lines.size(); ++k) {
    SweepPoint p;
    p.index = static_cast<int>(k);
    p.overrides = lines[k];
    for (const auto& [key, value] : p.overrides)
      if (std::find(sweep.swept_keys.begin(), sweep.swept_keys.end(), key) == sweep.swept_keys.end()) sweep.swept_keys.push_back(key);
    p.dir = (fs::path(dir) / fmt::format("point_{}", k)).string();
    const std::string file = p.dir + "/report.json";
    if (fs::is_regular_file(file)) {
      const ReadReport read = read_report_json(file);
      const Summary& s = read.summary;
      check_point_ran_its_overrides(p, read, file);
      p.finished = true;
      p.evaluated = read.has_test_figures;
      p.test_loss = s.test_loss;
      p.test_accuracy = s.test_accuracy;
      p.train_loss = read.has_train_loss ? s.train_loss : std::nan("");  // shown as no figure, not 0
      p.step_time_s = s.step_time_s;
      p.samples_per_s = s.samples_per_s;
      p.micro_batch = s.layout.micro_batch;
      p.micro_batches = s.layout.micro_batches;
      p.steps = s.steps;
      token_model = token_model || s.deck.model.kind == "gpt";
    }
    sweep.points.push_back(std::move(p));
  }
  if (std::none_of(sweep.points.begin(), sweep.points.end(), [](const SweepPoint& p) { return p.finished; }))
    throw BadInput(fmt::format("report: no point of the sweep in {} has finished (no {}/point_K/report.json)", dir, dir));
  if (sweep.metric.empty()) sweep.metric = token_model ? "test_loss" : "test_accuracy";
  const bool higher = higher_is_better(sweep.metric);
  std::stable_sort(sweep.points.begin(), sweep.points.end(), [&](const SweepPoint& a, const SweepPoint& b) {
    if (ranked(a) != ranked(b)) return ranked(a);
    if (!ranked(a)) return a.index < b.index;
    const double x = metric_of(a, sweep.metric), y = metric_of(b, sweep.metric);
    if (x != y) return higher ? x > y : x < y;
    // A tie (two points at 100% accuracy) goes to the better of the other metric, then file order.
    if (a.test_loss != b.test_loss && sweep.metric != "test_loss") return a.test_loss < b.test_loss;
    if (a.test_accuracy != b.test_accuracy && sweep.metric != "test_accuracy") return a.test_accuracy > b.test_accuracy;
    return false;
  });
  int rank = 0;
  for (auto& p : sweep.points)
    if (ranked(p)) p.rank = ++rank;
  return sweep;
}

std::string sweep_markdown(const Sweep& sweep) {
  const bool higher = higher_is_better(sweep.metric);
  std::string md = fmt::format("# Sweep {}\n\n{} point(s), ranked by {} ({} first).\n\n| rank | point |", sweep.dir,
                               sweep.points.size(), sweep.metric, higher ? "highest" : "lowest");
  for (const auto& key : sweep.swept_keys) md += " " + key + " |";
  md += " test accuracy | test loss | train loss | steps | micro-batch | step time ms | samples/s |\n|---:|---:|";
  for (size_t i = 0; i < sweep.swept_keys.size(); ++i) md += "---|";
  md += "---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& p : sweep.points) {
    md += ranked(p) ? fmt::format("| {} | {} |", p.rank, p.index) : fmt::format("| - | {} |", p.index);
    for (const auto& key : sweep.swept_keys) md += " " + md_cell(value_of(p, key)) + " |";
    const std::string train_loss = std::isnan(p.train_loss) ? "-" : fmt::format("{:.4f}", p.train_loss);
    if (p.finished && !p.evaluated)
      md += fmt::format(" no test figures in its report.json | - | {} | {} | {} | {:.2f} | {:.0f} |\n", train_loss,
                        p.steps, p.micro_batch, 1e3 * p.step_time_s, p.samples_per_s);
    else if (p.finished)
      md += fmt::format(" {:.2f}% | {:.4f} | {} | {} | {} | {:.2f} | {:.0f} |\n", 100.0 * p.test_accuracy, p.test_loss,
                        train_loss, p.steps, p.micro_batch, 1e3 * p.step_time_s, p.samples_per_s);
    else
      md += fmt::format(" not finished: no {}/report.json | | | | | | |\n", md_cell(p.dir));
  }
  if (micro_batch_swept(sweep)) {
    md += "\n## Micro-batch size: step time and throughput\n\nEach optimizer step trains the same global batch; a larger "
          "micro-batch means fewer micro-batches per step (less gradient accumulation).\n\n"
          "| micro-batch | micro-batches per step | points | step time ms | samples/s | vs smallest |\n"
          "|---:|---:|---:|---:|---:|---:|\n";
    const auto rows = batch_rows(sweep);
    for (const auto& r : rows)
      md += fmt::format("| {} | {} | {} | {:.2f} | {:.0f} | {:.2f}x |\n", r.micro_batch, r.micro_batches, r.points,
                        1e3 * r.step_time_s, r.samples_per_s, r.samples_per_s / rows.front().samples_per_s);
  }
  return md;
}

std::string sweep_csv(const Sweep& sweep) {
  std::string csv = "rank,point";
  for (const auto& key : sweep.swept_keys) csv += "," + csv_field(key);
  csv += ",finished,test_accuracy,test_loss,train_loss,steps,micro_batch,micro_batches,step_time_s,samples_per_s,dir\n";
  for (const auto& p : sweep.points) {
    csv += fmt::format("{},{}", p.rank, p.index);
    for (const auto& key : sweep.swept_keys) csv += "," + csv_field(value_of(p, key));
    // (no test figures: empty cells, not 0)
    const auto test_figure = [&](double x) { return p.finished && !p.evaluated ? std::string() : fmt::format("{:.6g}", x); };
    const std::string train_loss = std::isnan(p.train_loss) ? "" : fmt::format("{:.6g}", p.train_loss);
    csv += fmt::format(",{},{},{},{},{},{},{},{:.6g},{:.6g},{}\n", p.finished ? 1 : 0, test_figure(p.test_accuracy),
                       test_figure(p.test_loss), train_loss, p.steps, p.micro_batch, p.micro_batches, p.step_time_s, p.samples_per_s, csv_field(p.dir));
  }
  return csv;
}

std::string sweep_svg(const Sweep& sweep) {
  // Top: one bar per finished point, in rank order, its length the metric (the best point's
  // bar is the longest for accuracy; for a loss, the bar is the loss: shortest is best). Below,
  // when the micro-batch is swept: samples/s per micro-batch size.
  const double left = 320, width = 420, bar = 18, gap = 6, top = 50;
  std::vector<const SweepPoint*> done;
  for (const auto& p : sweep.points)
    if (ranked(p)) done.push_back(&p);
  const auto rows = micro_batch_swept(sweep) ? batch_rows(sweep) : std::vector<BatchRow>{};
  const double ranks_h = static_cast<double>(done.size()) * (bar + gap);
  const double batch_top = top + ranks_h + 60;
  const double height = batch_top + (rows.empty() ? 0.0 : 40 + static_cast<double>(rows.size()) * (bar + gap)) + 20;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      left + width + 250, height);
  svg += fmt::format("<text x=\"10\" y=\"22\" font-size=\"15\">Sweep {}: points by {} ({} first)</text>\n", xml_escape(sweep.dir),
                     sweep.metric, higher_is_better(sweep.metric) ? "highest" : "lowest");
  double most = 0;
  for (const auto* p : done) most = std::max(most, metric_of(*p, sweep.metric));
  double y = top;
  for (const auto* p : done) {
    const double w = most > 0 ? width * metric_of(*p, sweep.metric) / most : 0;
    svg += fmt::format("<text x=\"{:.0f}\" y=\"{:.1f}\" text-anchor=\"end\">{}. #{} {}</text>\n", left - 8, y + bar * 0.75, p->rank,
                       p->index, xml_escape(overrides_text(*p)));
    svg += fmt::format("<rect x=\"{:.0f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.0f}\" fill=\"{}\"/>\n", left, y, w, bar,
                       p->rank == 1 ? "#2e7d32" : "#78909c");
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", left + w + 6, y + bar * 0.75, metric_text(*p, sweep.metric));
    y += bar + gap;
  }
  if (!rows.empty()) {
    double fastest = 0;
    for (const auto& r : rows) fastest = std::max(fastest, r.samples_per_s);
    svg += fmt::format("<text x=\"10\" y=\"{:.0f}\" font-size=\"14\">samples/s by micro-batch size (same global batch; mean "
                       "over the points of each size)</text>\n",
                       batch_top);
    y = batch_top + 20;
    for (const auto& r : rows) {
      const double w = fastest > 0 ? width * r.samples_per_s / fastest : 0;
      svg += fmt::format("<text x=\"{:.0f}\" y=\"{:.1f}\" text-anchor=\"end\">micro-batch {} ({} micro-batches/step)</text>\n", left - 8,
                         y + bar * 0.75, r.micro_batch, r.micro_batches);
      svg += fmt::format("<rect x=\"{:.0f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.0f}\" fill=\"#0277bd\"/>\n", left, y, w, bar);
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{:.0f} samples/s, {:.2f} ms/step</text>\n", left + w + 6, y + bar * 0.75,
                         r.samples_per_s, 1e3 * r.step_time_s);
      y += bar + gap;
    }
  }
  return svg + "</svg>\n";
}

std::vector<std::string> write_sweep(const Sweep& sweep, const std::string& out_dir) {
  return write_text_files(out_dir, {{"sweep.md", sweep_markdown(sweep)}, {"sweep.csv", sweep_csv(sweep)}, {"sweep.svg", sweep_svg(sweep)}});
}

}  // namespace trident::report
