#include "report/goodput.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "report/text_output.hpp"

namespace trident::report {

namespace fs = std::filesystem;
using nlohmann::json;

std::string lifetime_json(const Lifetime& l) {
  json r = {{"job", l.job},
            {"host", l.host},
            {"start", l.start},
            {"end", l.end},
            {"launch_s", l.launch_s},
            {"exit_code", l.exit_code ? json(*l.exit_code) : json(nullptr)},
            {"first_step", l.first_step},
            {"last_step", l.last_step},
            {"steps_trained", l.steps_trained()},
            {"startup_s", l.startup_s},
            {"step_s", l.step_s},
            {"data_wait_s", l.data_wait_s},
            {"evaluation_s", l.evaluation_s},
            {"checkpoint_s", l.checkpoint_s},
            {"resumed_from_step", l.resumed_from_step ? json(*l.resumed_from_step) : json(nullptr)},
            {"work_lost_steps", l.work_lost_steps},
            {"work_lost_s", l.work_lost_s}};
  return r.dump();
}

Lifetime parse_lifetime(const std::string& line, const std::string& where) {
  json r;
  try {
    r = json::parse(line);
  } catch (const json::exception& e) {
    throw BadInput(fmt::format("{}: not a JSON record ({})", where, e.what()));
  }
  if (!r.is_object()) throw BadInput(fmt::format("{}: not a JSON object", where));
  Lifetime l;
  // Counts are whole and seconds finite, neither negative: a hand-edited or foreign record
  // (first_step 1.5, end before start) would otherwise give a goodput above 100% or below 0.
  auto field = [&](const char* key) -> const json& {
    const auto it = r.find(key);
    if (it == r.end() || !it->is_number())
      throw BadInput(fmt::format("{}: field '{}' is missing or not a number", where, key));
    return *it;
  };
  auto seconds = [&](const char* key, double& into) {
    into = field(key).get<double>();
    if (!(into >= 0)) throw BadInput(fmt::format("{}: field '{}' = {} is negative", where, key, into));
  };
  auto count = [&](const char* key, int64_t& into) {
    const json& v = field(key);
    const bool whole = v.is_number_unsigned() ? v.get<uint64_t>() <= (uint64_t{1} << 62)
                                              : v.is_number_integer() && v.get<int64_t>() >= 0;
    if (!whole) throw BadInput(fmt::format("{}: field '{}' = {} is not a step count", where, key, v.dump()));
    into = v.get<int64_t>();
  };
  seconds("start", l.start);
  seconds("end", l.end);
  count("first_step", l.first_step);
  count("last_step", l.last_step);
  if (r.contains("launch_s")) seconds("launch_s", l.launch_s);  // absent from records before it was kept
  seconds("startup_s", l.startup_s);
  seconds("step_s", l.step_s);
  seconds("data_wait_s", l.data_wait_s);
  seconds("evaluation_s", l.evaluation_s);
  seconds("checkpoint_s", l.checkpoint_s);
  count("work_lost_steps", l.work_lost_steps);
  seconds("work_lost_s", l.work_lost_s);
  if (l.end < l.start)
    throw BadInput(fmt::format("{}: end = {} is before start = {}", where, l.end, l.start));
  if (l.last_step < l.first_step)
    throw BadInput(fmt::format("{}: last_step = {} is before first_step = {}", where, l.last_step, l.first_step));
  if (r.contains("job") && r["job"].is_string()) l.job = r["job"];
  if (r.contains("host") && r["host"].is_string()) l.host = r["host"];
  if (r.contains("exit_code") && r["exit_code"].is_number_integer()) l.exit_code = r["exit_code"].get<int>();
  if (r.contains("resumed_from_step") && r["resumed_from_step"].is_number_integer())
    l.resumed_from_step = r["resumed_from_step"].get<int64_t>();
  return l;
}

std::vector<Lifetime> read_goodput(const std::string& path, std::vector<std::string>* skipped) {
  std::ifstream in(path);
  if (!in) throw BadInput(fmt::format("report: cannot read {} (a run folder has one once a run has trained in it)", path));
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw BadInput(fmt::format("report: {} is a folder, not a file", path));
  std::vector<Lifetime> out;
  std::string line, first_skipped;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back(parse_lifetime(line, fmt::format("{}:{}", path, n)));
    } catch (const BadInput& e) {
      if (first_skipped.empty()) first_skipped = e.what();
      if (skipped) skipped->push_back(e.what());
    }
  }
  // Every line bad: why the first one is (a file of another format, a damaged one), not only that none is good.
  if (out.empty())
    throw BadInput(first_skipped.empty() ? fmt::format("report: {} holds no record", path)
                                         : fmt::format("report: {} holds no record: {}", path, first_skipped));
  return out;
}

std::optional<Lifetime> read_open_lifetime(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  Lifetime life = parse_lifetime(line, path);
  life.open = true;
  return life;
}

LostWork lost_work(const std::vector<Lifetime>& chain) {
  const size_t n = chain.size();
  LostWork lost{std::vector<int64_t>(n, 0), std::vector<int64_t>(n, 0), std::vector<double>(n, 0.0),
                std::vector<double>(n, 0.0)};
  std::vector<int64_t> kept_to(n);  // lifetime i still keeps steps (first_step, kept_to[i]]
  for (size_t k = 0; k < n; ++k) {
    for (size_t i = 0; i < k; ++i) {
      const int64_t cut = kept_to[i] - std::max(chain[i].first_step, std::min(kept_to[i], chain[k].first_step));
      if (cut <= 0) continue;
      kept_to[i] -= cut;
      const double seconds = static_cast<double>(cut) * chain[i].compute_per_step_s();
      lost.of_steps[i] += cut, lost.of_s[i] += seconds;
      lost.by_steps[k] += cut, lost.by_s[k] += seconds;
    }
    kept_to[k] = std::max(chain[k].last_step, chain[k].first_step);
  }
  return lost;
}

namespace {

// The parts summed over `lifetimes`, each charged with the work it lost.
GoodputAccount tally(std::vector<Lifetime> lifetimes, std::vector<int64_t> lost_steps, std::vector<double> lost_s) {
  GoodputAccount a;
  for (size_t i = 0; i < lifetimes.size(); ++i) {
    const Lifetime& l = lifetimes[i];
    a.wall_s += l.wall_s();
    a.launch_s += l.launch_s;
    a.startup_s += l.startup_s;
    a.data_wait_s += l.data_wait_s;
    a.evaluation_s += l.evaluation_s;
    a.checkpoint_s += l.checkpoint_s;
    a.work_lost_s += lost_s[i];
    a.work_lost_steps += lost_steps[i];
    a.steps_trained += l.steps_trained();
    a.productive_s += l.step_s - l.data_wait_s - lost_s[i];
  }
  a.lost_steps_of = std::move(lost_steps);
  a.lost_s_of = std::move(lost_s);
  a.other_s = a.wall_s - a.productive_s - a.work_lost_s - a.launch_s - a.startup_s - a.data_wait_s - a.evaluation_s -
              a.checkpoint_s;
  a.lifetimes = std::move(lifetimes);
  return a;
}

}  // namespace

GoodputAccount account_goodput(std::vector<Lifetime> lifetimes) {
  LostWork lost = lost_work(lifetimes);
  return tally(std::move(lifetimes), std::move(lost.of_steps), std::move(lost.of_s));
}

GoodputAccount load_goodput(const std::string& run_dir) {
  std::vector<std::string> skipped;
  const std::string closed = run_dir + "/goodput.jsonl", open = run_dir + "/" + kOpenGoodputRecord;
  std::vector<Lifetime> lifetimes;
  std::string unreadable;  // goodput.jsonl's problem, when there is no closed record
  try {
    lifetimes = read_goodput(closed, &skipped);
  } catch (const BadInput& e) {
    unreadable = e.what();
  }
  // The lifetime under way, or killed as the chain's last: its record is still open. Read after
  // goodput.jsonl: a process that closed its record in between is there already.
  try {
    if (const auto last = read_open_lifetime(open)) {
      const Lifetime* before = lifetimes.empty() ? nullptr : &lifetimes.back();
      const bool closed_since =
          before && before->job == last->job && before->start == last->start && before->first_step == last->first_step;
      if (!closed_since) lifetimes.push_back(*last);
    }
  } catch (const BadInput& e) {
    skipped.push_back(e.what());
    if (lifetimes.empty()) unreadable += std::string("; ") + e.what();
  }
  if (lifetimes.empty()) throw BadInput(unreadable);
  GoodputAccount account = account_goodput(std::move(lifetimes));
  account.skipped = skipped;
  return account;
}

namespace {

std::string utc_text(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &tm);
  return text;
}

std::string exit_text(const Lifetime& l) {
  return l.exit_code ? std::to_string(*l.exit_code) : std::string(l.open ? "open" : "killed");
}

double percent(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

// The account's parts, in the table's and the picture's order, with the picture's colours.
struct Part {
  const char* name;
  double GoodputAccount::*total;
  const char* colour;
};
const Part kParts[] = {{"productive steps", &GoodputAccount::productive_s, "#2e7d32"},
                       {"work lost", &GoodputAccount::work_lost_s, "#c62828"},
                       {"launch", &GoodputAccount::launch_s, "#37474f"},
                       {"start-up", &GoodputAccount::startup_s, "#6a1b9a"},
                       {"data waits", &GoodputAccount::data_wait_s, "#ef6c00"},
                       {"evaluation", &GoodputAccount::evaluation_s, "#0277bd"},
                       {"checkpoint blocking", &GoodputAccount::checkpoint_s, "#f9a825"},
                       {"other", &GoodputAccount::other_s, "#9e9e9e"}};

// Lifetime k as an account of its own, charged with the work it lost.
GoodputAccount account_of(const GoodputAccount& a, size_t k) {
  return tally({a.lifetimes[k]}, {a.lost_steps_of[k]}, {a.lost_s_of[k]});
}

}  // namespace

std::string goodput_markdown(const GoodputAccount& a, const std::string& run_dir) {
  std::string md = fmt::format("# Goodput of {}\n\n", run_dir);
  md += fmt::format("**{:.1f}%** of {:.1f} s wall time over {} process lifetime(s) went into training steps that were kept "
                    "({} steps trained, {} of them lost: trained past the step a later lifetime started from).\n\n",
                    100.0 * a.goodput(), a.wall_s, a.lifetimes.size(), a.steps_trained, a.work_lost_steps);
  md += "| where the time went | seconds | % of wall |\n|---|---:|---:|\n";
  for (const auto& p : kParts) md += fmt::format("| {} | {:.2f} | {:.1f} |\n", p.name, a.*p.total, percent(a.*p.total, a.wall_s));
  md += fmt::format("| **wall time** | **{:.2f}** | 100.0 |\n\n", a.wall_s);
  md += "## Lifetimes\n\n"
        "| # | job | host | start (UTC) | wall s | exit | steps | resumed from | steps lost | lost s | launch s | start-up s | "
        "step s | data s | eval s | ckpt s | goodput % |\n"
        "|---:|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (size_t i = 0; i < a.lifetimes.size(); ++i) {
    const auto& l = a.lifetimes[i];
    md += fmt::format("| {} | {} | {} | {} | {:.2f} | {} | {}..{} | {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.1f} |\n",
                      i + 1, l.job, l.host, utc_text(l.start), l.wall_s(), exit_text(l), l.first_step, l.last_step,
                      l.resumed_from_step ? std::to_string(*l.resumed_from_step) : std::string("-"), a.lost_steps_of[i],
                      a.lost_s_of[i], l.launch_s, l.startup_s, l.step_s, l.data_wait_s, l.evaluation_s, l.checkpoint_s,
                      100.0 * account_of(a, i).goodput());
  }
  for (const auto& why : a.skipped) md += fmt::format("\nSkipped, not a record (a process killed while appending?): {}\n", why);
  md += "\nProductive = step time - data waits - work lost. Steps lost: the steps a lifetime trained past the step a "
        "later one started from (the checkpoint it resumed; all of them when it started afresh), at the lifetime's "
        "step time less data waits per step. 'killed': the process ended without a word (SIGKILL, an abort, a lost "
        "node); its record ends at the last update it wrote (every log line and save), so its last moments count as "
        "nothing. 'open': the last lifetime's record was never closed: it is still running, or it was killed and no "
        "later lifetime has closed it yet (counted as a killed one, to its last update). Launch: a job's start to trident's (the job script and "
        "srun), where the job script passed the job's start. Queue waits between jobs are not wall time here.\n";
  return md;
}

std::string goodput_svg(const GoodputAccount& a, const std::string& run_dir) {
  // One bar per lifetime (its length its wall time) and one for the whole chain (100%), each cut
  // into the parts of its account.
  const double left = 200, width = 600, bar = 22, gap = 12, top = 50;
  const size_t rows = a.lifetimes.size() + 1;
  const double legend_y = top + static_cast<double>(rows) * (bar + gap) + 30;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      left + width + 90, legend_y + 40);
  svg += fmt::format("<text x=\"10\" y=\"22\" font-size=\"15\">Goodput of {}: {:.1f}% of {:.0f} s</text>\n", xml_escape(run_dir),
                     100.0 * a.goodput(), a.wall_s);
  double longest = 0;
  for (const auto& l : a.lifetimes) longest = std::max(longest, l.wall_s());
  auto draw = [&](const GoodputAccount& part, double y, double length, const std::string& label, const std::string& note) {
    svg += fmt::format("<text x=\"{:.0f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", left - 8, y + bar * 0.7, xml_escape(label));
    double x = left;
    for (const auto& p : kParts) {
      const double w = part.wall_s > 0 ? length * std::max(0.0, part.*p.total) / part.wall_s : 0;
      if (w <= 0) continue;
      svg += fmt::format("<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.0f}\" fill=\"{}\"><title>{}: {:.2f} s</title></rect>\n", x, y, w,
                         bar, p.colour, p.name, part.*p.total);
      x += w;
    }
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", left + length + 6, y + bar * 0.7, xml_escape(note));
  };
  double y = top;
  for (size_t i = 0; i < a.lifetimes.size(); ++i) {
    const auto& l = a.lifetimes[i];
    const double length = longest > 0 ? width * l.wall_s() / longest : 0;
    draw(account_of(a, i), y, length, fmt::format("#{} {} ({})", i + 1, l.job, l.exit_code ? "exit " + exit_text(l) : exit_text(l)), fmt::format("{:.0f} s", l.wall_s()));
    y += bar + gap;
  }
  draw(a, y + 6, width, "whole chain", fmt::format("{:.1f}%", 100.0 * a.goodput()));
  double x = 10;
  for (const auto& p : kParts) {
    svg += fmt::format("<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{:.0f}\" y=\"{:.0f}\">{}</text>\n", x,
                       legend_y, p.colour, x + 16, legend_y + 10, p.name);
    x += 30 + 7.0 * static_cast<double>(std::string(p.name).size());
  }
  svg += fmt::format("<text x=\"10\" y=\"{:.0f}\" fill=\"#555\">bars: each process lifetime, its length its wall time; "
                     "the last: the whole chain's wall time</text>\n</svg>\n",
                     legend_y + 32);
  return svg;
}

std::vector<std::string> write_goodput(const GoodputAccount& a, const std::string& run_dir, const std::string& out_dir) {
  return write_text_files(out_dir, {{"goodput.md", goodput_markdown(a, run_dir)}, {"goodput.svg", goodput_svg(a, run_dir)}});
}

}  // namespace trident::report
