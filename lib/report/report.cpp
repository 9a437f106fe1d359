#include "report/report.hpp"

#include <fmt/format.h>
#include <mpi.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"

namespace trident::report {

using nlohmann::json;

namespace {

std::string mpi_library() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<size_t>(len));
  return s.substr(0, s.find('\n'));
}

json deck_json(const config::Deck& deck) {
  json out = json::object();
  const auto& fields = config::deck_fields();
  const auto values = config::deck_values(deck);
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto& f = fields[i];
    const std::string& text = values[i].second;
    json value = text;
    if (f.type == "integer") value = std::stoll(text);
    if (f.type == "number") value = std::stod(text);
    if (f.type == "true or false") value = text == "true";
    out[f.section][f.key] = value;
  }
  return out;
}

// Compact: one [op, micro, chunk, start_s, end_s] row per op.
json timeline_json(const std::vector<TimelineOp>& ops) {
  json rows = json::array();
  for (const auto& op : ops) rows.push_back({op.op, op.micro, op.chunk, op.start_s, op.end_s});
  return rows;
}

// `path` holding `text`, through a temporary file and a rename: a reader (or a kill) never meets
// half a file. A write that fails (a full disk shows at the flush) is this rank's fault, naming errno.
void replace_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) fatal_one(fmt::format("cannot create {} ({})", tmp, std::strerror(errno)));
    out << text;
    out.flush();
    if (!out) fatal_one(fmt::format("cannot write {} ({})", tmp, std::strerror(errno)));
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace

// A path that cannot be resolved is given back as it was: a checkpoint elsewhere.
std::string run_relative(const std::string& checkpoint, const std::string& output_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path file = fs::weakly_canonical(checkpoint, ec), dir = fs::weakly_canonical(output_dir, ec);
  if (ec) return checkpoint;
  const fs::path relative = file.lexically_relative(dir);
  return !relative.empty() && *relative.begin() != ".." ? relative.string() : checkpoint;
}

namespace {

json summary_json(const Summary& s) {
  json r;
  r["trident_version"] = TRIDENT_VERSION;
  r["torch_version"] = s.torch_version;
  r["mpi"] = mpi_library();
  r["nccl"] = s.nccl_version.empty() ? json(nullptr) : json(s.nccl_version);
  r["deck"] = deck_json(s.deck);
  r["layout"] = {{"world", s.layout.world},       {"nodes", s.layout.nodes},
                 {"dp", s.layout.dp},             {"pp", s.layout.pp},
                 {"zero", s.layout.zero},         {"backend", s.layout.backend},
                 {"device", s.layout.device},     {"schedule", s.layout.schedule},
                 {"micro_batch", s.layout.micro_batch},     {"micro_batches", s.layout.micro_batches},
                 {"threads_per_rank", s.layout.threads_per_rank},
                 {"device_name", s.device_name.empty() ? json(nullptr) : json(s.device_name)}};
  r["steps"] = s.steps;
  r["epochs"] = s.epochs;
  r["parameters"] = s.parameters;
  r["resumed_from"] = s.resumed_from.empty() ? json(nullptr) : json(run_relative(s.resumed_from, s.deck.run.output_dir));
  r["first_step"] = s.first_step;
  r["final"] = {{"train_loss", s.train_loss}, {"test_loss", s.test_loss}, {"test_accuracy", s.test_accuracy},
                {"evaluated_by_a_later_job", false}};
  auto or_null = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  r["throughput"] = {{"samples_per_s", s.samples_per_s},       {"step_time_s", s.step_time_s},
                     {"tokens_per_s", or_null(s.tokens_per_s)}, {"tflops", or_null(s.tflops)},
                     {"mfu", or_null(s.mfu)},                   {"peak_tflops", or_null(s.peak_tflops)}};
  r["precision"] = {{"compute", s.deck.optim.precision},
                    {"master_weights", "fp32"},
                    {"loss_scale", or_null(s.loss_scale)},
                    {"skipped_steps", s.skipped_steps ? json(*s.skipped_steps) : json(nullptr)}};
  r["watchdog"] = {{"timeout_s", s.watchdog_timeout_s},
                   {"thread_cpu_s", s.watchdog_cpu_s},
                   {"cpu_share", s.time.total > 0 ? s.watchdog_cpu_s / s.time.total : 0.0}};
  r["zero3_gathers"] = {{"total", s.gathers}, {"prefetched", s.gathers_prefetched}};
  r["cuda_graph"] = {{"asked", s.deck.run.cuda_graph}, {"replayed_micro_steps", s.micro_steps_replayed}};
  r["time_s"] = {{"total", s.time.total},         {"data_wait", s.time.data_wait},
                 {"forward", s.time.forward},     {"backward", s.time.backward},
                 {"comm_exposed", s.time.comm_exposed}, {"optimizer", s.time.optimizer},
                 {"checkpoint", s.time.checkpoint}, {"evaluation", s.time.evaluation}};
  json stages = json::array();
  for (const auto& st : s.stages)
    stages.push_back({{"stage", st.stage},
                      {"parameters", st.parameters},
                      {"compute_s", st.compute_s},
                      {"blocked_s", st.blocked_s},
                      {"bubble_fraction", st.bubble_fraction},
                      {"peak_alive_micro_batches", st.peak_alive_micro_batches},
                      {"activation_bytes_per_micro_batch", st.activation_bytes_per_micro_batch},
                      {"peak_activation_bytes", st.activation_bytes_per_micro_batch * st.peak_alive_micro_batches},
                      {"timeline", timeline_json(st.timeline)}});
  r["pipeline"] = {{"bubble_fraction", s.bubble_fraction},
                   {"expected_bubble_fraction", s.expected_bubble_fraction},
                   {"stages", stages}};
  r["memory"] = {{"model_state_bytes",
                  {{"params", s.memory.params},
                   {"grads", s.memory.grads},
                   {"optimizer", s.memory.optimizer},
                   {"master", s.memory.master}}},
                 {"expected_model_state_bytes", s.memory.expected},
                 {"peak_bytes", s.peak_bytes},
                 {"startup_peak_bytes", s.startup_peak_bytes},
                 {"peak_device_bytes", s.peak_device_bytes ? json(*s.peak_device_bytes) : json(nullptr)},
                 {"device_total_bytes", s.device_total_bytes ? json(*s.device_total_bytes) : json(nullptr)},
                 {"estimated_device_bytes",
                  s.estimated_device_bytes ? json(*s.estimated_device_bytes) : json(nullptr)}};
  auto rate_or_null = [](double v) { return v > 0 ? json(v) : json(nullptr); };
  r["checkpoint"] = {{"saves", s.checkpoint_saves},
                     {"write_gb_per_s", rate_or_null(s.checkpoint_write_gb_per_s)},
                     {"read_gb_per_s", rate_or_null(s.checkpoint_read_gb_per_s)},
                     {"blocked_s", s.time.checkpoint},
                     {"async", s.checkpoint_async},
                     {"steps_while_writing", s.steps_while_writing},
                     {"step_time_while_writing_s", s.step_time_while_writing_s},
                     {"step_time_otherwise_s", s.step_time_otherwise_s}};
  r["time_to_safe_stop_s"] = s.time_to_safe_stop_s ? json(*s.time_to_safe_stop_s) : json(nullptr);
  return r;
}

// What identifies the checkpoint a pending report was written after: its size and modification
// time (a file of the same name from another run, set aside and brought back, differs in both).
json checkpoint_identity(const std::string& checkpoint) {
  struct stat st {};
  if (::stat(checkpoint.c_str(), &st) != 0) return nullptr;
  return {{"bytes", static_cast<int64_t>(st.st_size)},
          {"modified_ns", static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec}};
}

}  // namespace

void write_report_json(const std::string& path, const Summary& s) { replace_file(path, summary_json(s).dump(2) + "\n"); }

std::string write_pending_report(const std::string& path, const Summary& s, const std::string& checkpoint) {
  try {
    json r = summary_json(s);
    r["final"]["test_loss"] = r["final"]["test_accuracy"] = nullptr;
    r["pending"] = {{"why", "the run's report.json but for its last evaluation, which was under way when this was "
                            "written; a requeued job that finds the run trained completes it into report.json"},
                    {"checkpoint", run_relative(checkpoint, s.deck.run.output_dir)},
                    {"identity", checkpoint_identity(checkpoint)}};
    replace_file(path, r.dump(2) + "\n");
    return "";
  } catch (const std::exception& e) {  // a full disk: said, and the run goes on to its report.json
    std::error_code ec;
    std::filesystem::remove(path + ".tmp", ec);
    return e.what();
  }
}

std::string complete_pending_report(const std::string& pending, const std::string& path, const std::string& checkpoint,
                                    double test_loss, double test_accuracy, double evaluation_s) {
  json r;
  {
    std::ifstream in(pending);
    if (!in) return fmt::format("{} cannot be read ({})", pending, std::strerror(errno));
    r = json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  const auto number_or_absent = [&](const char* phase) {
    return !r["time_s"].contains(phase) || r["time_s"][phase].is_number();
  };
  if (!r.is_object() || !r.contains("pending") || !r["pending"].is_object() || !r.contains("final") ||
      !r["final"].is_object() || !r.contains("time_s") || !r["time_s"].is_object() || !number_or_absent("evaluation") ||
      !number_or_absent("total"))
    return fmt::format("{} is not a pending report trident wrote", pending);
  const json identity = checkpoint_identity(checkpoint);
  if (identity.is_null() || !r["pending"].contains("identity") || r["pending"]["identity"] != identity)
    return fmt::format("{} was written after another checkpoint than {}", pending, checkpoint);
  r.erase("pending");
  r["final"]["test_loss"] = test_loss;
  r["final"]["test_accuracy"] = test_accuracy;
  r["final"]["evaluated_by_a_later_job"] = true;
  for (const char* phase : {"evaluation", "total"})
    r["time_s"][phase] = (r["time_s"].contains(phase) ? r["time_s"][phase].get<double>() : 0.0) + evaluation_s;
  try {
    replace_file(path, r.dump(2) + "\n");
  } catch (const std::exception& e) {
    std::error_code ec;
    std::filesystem::remove(path + ".tmp", ec);
    return fmt::format("writing {} failed: {}", path, e.what());
  }
  std::error_code ec;
  std::filesystem::remove(pending, ec);
  return "";
}

namespace {

// The fields of a parsed report.json by their paths ("layout/world"); absent or null leaves the
// target as it is, unless the field is required.
class ReportFields {
 public:
  // "layout/world" as a user reads it: layout.world.
  static std::string dotted(std::string path) {
    std::replace(path.begin(), path.end(), '/', '.');
    return path;
  }
  ReportFields(const json& j, const std::string& file) : j_(j), file_(file) {}
  const json* find(const std::string& path, bool required = false) const {
    const json::json_pointer pointer("/" + path);
    if (j_.is_object() && j_.contains(pointer) && !j_.at(pointer).is_null()) return &j_.at(pointer);
    if (required) throw BadInput(fmt::format("report: {}: no field '{}' (is it a trident report.json?)", file_, dotted(path)));
    return nullptr;
  }
  template <typename T>
  void read(const std::string& path, T& out, bool required = false) const {
    if (const json* v = find(path, required)) out = get<T>(*v, path);
  }
  template <typename T>
  void read(const std::string& path, std::optional<T>& out) const {
    if (const json* v = find(path)) out = get<T>(*v, path);
  }
  // The value, or BadInput naming the field: one of another type ("fast" for a number), or a
  // count that is not whole or does not fit (json's conversion truncates 2.5 and 2^40 silently).
  template <typename T>
  T get(const json& v, const std::string& path) const {
    const auto wrong = [&](const std::string& why) {
      return BadInput(fmt::format("report: {}: field '{}' has the wrong type ({}: {})", file_, dotted(path),
                                  v.dump().substr(0, 60), why));
    };
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      bool fits = false;
      if (v.is_number_unsigned()) {
        fits = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
      } else if (v.is_number_integer()) {  // negative
        if constexpr (std::is_signed_v<T>) fits = v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min());
      }
      if (!fits) throw wrong(v.is_number() ? "not a whole number this field can hold" : "not a whole number");
    }
    try {
      return v.get<T>();
    } catch (const json::exception& e) {
      throw wrong(e.what());
    }
  }

 private:
  const json& j_;
  const std::string& file_;
};

// The deck section as `--set section.key=value` overrides of the defaults: keys this trident
// does not know (another version's) are left out.
config::Deck deck_of(const json& deck, const std::string& file) {
  std::vector<std::string> overrides;
  for (const auto& f : config::deck_fields()) {
    if (!deck.contains(f.section) || !deck[f.section].is_object() || !deck[f.section].contains(f.key)) continue;
    const json& v = deck[f.section][f.key];
    if (v.is_null()) continue;
    overrides.push_back(f.name() + "=" + (v.is_string() ? v.get<std::string>() : v.dump()));
  }
  return config::parse_deck_text("", file, overrides);
}

StageReport stage_from_json(const json& st) {
  StageReport r;
  r.stage = st.value("stage", 0);
  r.parameters = st.value("parameters", int64_t{0});
  r.compute_s = st.value("compute_s", 0.0);
  r.blocked_s = st.value("blocked_s", 0.0);
  r.bubble_fraction = st.value("bubble_fraction", 0.0);
  r.peak_alive_micro_batches = st.value("peak_alive_micro_batches", 0);
  r.activation_bytes_per_micro_batch = st.value("activation_bytes_per_micro_batch", int64_t{0});
  if (st.contains("timeline") && st["timeline"].is_array())
    for (const json& row : st["timeline"])
      r.timeline.push_back({row.at(0).get<std::string>(), row.at(1).get<int>(), row.at(2).get<int>(),
                            row.at(3).get<double>(), row.at(4).get<double>()});
  return r;
}

}  // namespace

ReadReport read_report_json(const std::string& path) {
  json j;
  {
    std::ifstream in(path);
    if (!in) throw BadInput(fmt::format("report: {}: cannot read the file", path));
    try {
      j = json::parse(in);
    } catch (const json::parse_error& e) {
      throw BadInput(fmt::format("report: {}: not valid JSON ({})", path, e.what()));
    }
  }
  const ReportFields f(j, path);
  ReadReport read;
  Summary& s = read.summary;
  try {
    if (const json* deck = f.find("deck"); deck && deck->is_object()) {
      s.deck = deck_of(*deck, path);
      for (const auto& field : config::deck_fields())
        if (f.find("deck/" + field.section + "/" + field.key)) read.deck_keys.push_back(field.name());
    }
    f.read("deck/optim/global_batch", s.deck.optim.global_batch, /*required=*/true);
    f.read("layout/world", s.layout.world, /*required=*/true);
    s.layout.dp = s.layout.world;
    f.read("layout/nodes", s.layout.nodes);
    f.read("layout/dp", s.layout.dp);
    f.read("layout/pp", s.layout.pp);
    f.read("layout/zero", s.layout.zero);
    s.layout.backend = s.layout.device = "?";
    s.layout.schedule = "-";
    f.read("layout/backend", s.layout.backend);
    f.read("layout/device", s.layout.device);
    f.read("layout/schedule", s.layout.schedule);
    s.layout.micro_batch = 0;
    if (!f.find("layout/micro_batch"))  // older reports: the deck's integer, if it was one ("auto": 0)
      s.layout.micro_batch = std::strtoll(s.deck.optim.micro_batch.c_str(), nullptr, 10);
    f.read("layout/micro_batch", s.layout.micro_batch);
    f.read("layout/micro_batches", s.layout.micro_batches);
    f.read("layout/threads_per_rank", s.layout.threads_per_rank);
    f.read("layout/device_name", s.device_name);
    f.read("steps", s.steps, /*required=*/true);
    f.read("epochs", s.epochs);
    f.read("parameters", s.parameters);
    f.read("resumed_from", s.resumed_from);
    if (!f.find("first_step")) {  // older reports name the step only in resumed_from
      const size_t at = s.resumed_from.rfind("step_");
      if (at != std::string::npos && at + 5 < s.resumed_from.size() &&
          std::isdigit(static_cast<unsigned char>(s.resumed_from[at + 5])))
        s.first_step = std::stoll(s.resumed_from.substr(at + 5));
    }
    f.read("first_step", s.first_step);
    f.read("final/train_loss", s.train_loss);
    f.read("final/test_loss", s.test_loss);
    f.read("final/test_accuracy", s.test_accuracy);
    read.has_test_figures = f.find("final/test_loss") && f.find("final/test_accuracy");
    read.has_train_loss = f.find("final/train_loss") != nullptr;
    f.read("throughput/samples_per_s", s.samples_per_s, /*required=*/true);
    s.step_time_s = s.samples_per_s > 0 ? static_cast<double>(s.deck.optim.global_batch) / s.samples_per_s : 0;
    f.read("throughput/step_time_s", s.step_time_s);
    f.read("throughput/tokens_per_s", s.tokens_per_s);
    f.read("throughput/tflops", s.tflops);
    f.read("throughput/mfu", s.mfu);
    f.read("throughput/peak_tflops", s.peak_tflops);
    if (const json* times = f.find("time_s"); times && times->is_object())
      for (const auto& [name, seconds] : times->items())
        if (seconds.is_number()) read.time_s[name] = seconds.get<double>();
    auto time_of = [&](const char* name) { return read.time_s.count(name) ? read.time_s.at(name) : 0.0; };
    s.time = {time_of("total"),        time_of("data_wait"), time_of("forward"),    time_of("backward"),
              time_of("comm_exposed"), time_of("optimizer"), time_of("checkpoint"), time_of("evaluation")};
    f.read("memory/model_state_bytes/params", s.memory.params);
    f.read("memory/model_state_bytes/grads", s.memory.grads);
    f.read("memory/model_state_bytes/optimizer", s.memory.optimizer);
    f.read("memory/model_state_bytes/master", s.memory.master);
    f.read("memory/expected_model_state_bytes", s.memory.expected);
    f.read("memory/peak_bytes", s.peak_bytes);
    f.read("memory/startup_peak_bytes", s.startup_peak_bytes);
    f.read("memory/peak_device_bytes", s.peak_device_bytes);
    f.read("memory/device_total_bytes", s.device_total_bytes);
    f.read("memory/estimated_device_bytes", s.estimated_device_bytes);
    f.read("pipeline/bubble_fraction", s.bubble_fraction);
    f.read("pipeline/expected_bubble_fraction", s.expected_bubble_fraction);
    if (const json* stages = f.find("pipeline/stages"); stages && stages->is_array())
      for (const json& st : *stages) s.stages.push_back(stage_from_json(st));
    f.read("checkpoint/saves", s.checkpoint_saves);
    f.read("time_to_safe_stop_s", s.time_to_safe_stop_s);
  } catch (const json::exception& e) {
    throw BadInput(fmt::format("report: {}: a field has the wrong type ({})", path, e.what()));
  }
  return read;
}

namespace {

// The step of a record line (metrics.jsonl, evaluations.jsonl), or nullopt when it is not a whole record (a kill cut it short).
std::optional<int64_t> record_step(const std::string& line) {
  const json record = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) return std::nullopt;
  return record["step"].get<int64_t>();
}

// Keeps the records of `path` up to step `last` (and drops a line a kill cut short), saying how
// many went. The records are in step order (each lifetime appends after the records up to the
// step it resumed from), so only the tail past the last kept record is read, backwards, and cut
// off: a long run's file is hundreds of MB, and reading it whole took 1.9 s per 100 MB at every
// resume.
void keep_records_up_to(const std::string& path, int64_t last) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  const off_t size = ::fstat(fd, &st) == 0 ? st.st_size : 0;
  off_t keep = 0;          // bytes kept: up to the newline after the last record kept
  bool add_newline = false;  // the last record kept is the file's last line, without its newline
  int64_t dropped = 0;
  for (off_t window = 64 << 10;; window *= 4) {
    const off_t from = std::max<off_t>(0, size - window);
    std::string tail(static_cast<size_t>(size - from), '\0');
    if (::pread(fd, tail.data(), tail.size(), from) != static_cast<ssize_t>(tail.size())) {
      ::close(fd);
      return;  // unreadable: left as it is
    }
    dropped = 0;
    bool decided = false;
    size_t end = tail.size();  // the current line is [begin, end); a newline follows unless end is the tail's end
    while (true) {
      const size_t newline = end == 0 ? std::string::npos : tail.rfind('\n', end - 1);
      const size_t begin = newline == std::string::npos ? 0 : newline + 1;
      if (begin == 0 && from > 0) break;  // the line may start before the window: read more
      if (begin < end) {                  // (an empty line is not a record)
        const bool terminated = end < tail.size();
        if (const auto step = record_step(tail.substr(begin, end - begin)); step && *step <= last) {
          keep = from + static_cast<off_t>(end) + (terminated ? 1 : 0);
          add_newline = !terminated;
          decided = true;
          break;
        }
        ++dropped;
      }
      if (begin == 0) {  // the file's first line: nothing is kept
        keep = 0;
        decided = true;
        break;
      }
      end = begin - 1;  // the newline before this line ends the previous one
    }
    if (decided || from == 0) break;
  }
  if (keep == size && !add_newline) {
    ::close(fd);
    return;
  }
  if (dropped > 0)
    log::info("{}: {} record(s) of steps after {} dropped (logged after the checkpoint this run resumes from; it "
              "logs those steps again)",
              path, dropped, last);
  // A last record without its newline (a kill between the two) gets one: the next record would be
  // appended onto it.
  const bool ok = ::ftruncate(fd, keep) == 0 && (!add_newline || ::pwrite(fd, "\n", 1, keep) == 1);
  if (!ok) log::warn("{}: could not drop the records after step {} ({})", path, last, std::strerror(errno));
  ::close(fd);
}

}  // namespace

RecordLog::RecordLog(const std::string& path, int64_t resumed_from) : path_(path) {
  if (resumed_from > 0) keep_records_up_to(path, resumed_from);
  file_ = std::fopen(path.c_str(), resumed_from > 0 ? "a" : "w");
  if (!file_) fatal_one(fmt::format("cannot create {} ({})", path, std::strerror(errno)));
}

RecordLog::~RecordLog() {
  if (file_) std::fclose(file_);
}

void RecordLog::write_line(const std::string& line, int64_t step) {
  if (!file_) return;
  const bool written = std::fprintf(file_, "%s\n", line.c_str()) > 0 && std::fflush(file_) == 0;
  if (!written && !warned_) {
    warned_ = true;
    log::warn("{}: a record of step {} could not be written ({}); training goes on", path_, step, std::strerror(errno));
  }
}

void MetricsLog::write(const MetricsRecord& m) {
  json line = {{"step", m.step}, {"epoch", m.epoch}, {"loss", m.loss},
               {"lr", m.lr},     {"samples_per_s", m.samples_per_s}, {"grad_norm", m.grad_norm}};
  if (m.loss_scale) line["loss_scale"] = *m.loss_scale;
  if (m.skipped_steps) line["skipped_steps"] = *m.skipped_steps;
  write_line(line.dump(), m.step);
}

void EvaluationLog::write(const EvaluationRecord& e) {
  const json line = {{"step", e.step},
                     {"epoch", e.epoch},
                     {"test_loss", e.test_loss},
                     {"test_accuracy", e.test_accuracy},
                     {"samples", e.samples},
                     {"seconds", e.seconds},
                     {"end_of_epoch", e.end_of_epoch}};
  write_line(line.dump(), e.step);
}

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace trident::report
