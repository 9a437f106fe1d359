#include "report/report.hpp"

#include <mpi.h>
#include <sys/resource.h>
#include <torch/version.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/backend.hpp"
#include "core/error.hpp"

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

}  // namespace

void write_report_json(const std::string& path, const Summary& s) {
  json r;
  r["trident_version"] = TRIDENT_VERSION;
  r["torch_version"] = TORCH_VERSION;
  r["mpi"] = mpi_library();
  r["nccl"] = comm::nccl_version().empty() ? json(nullptr) : json(comm::nccl_version());
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
  r["resumed_from"] = s.resumed_from.empty() ? json(nullptr) : json(s.resumed_from);
  r["first_step"] = s.first_step;
  r["final"] = {{"train_loss", s.train_loss}, {"test_loss", s.test_loss}, {"test_accuracy", s.test_accuracy}};
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
                      {"peak_activation_bytes", st.activation_bytes_per_micro_batch * st.peak_alive_micro_batches}});
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
                 {"peak_device_bytes", s.peak_device_bytes ? json(*s.peak_device_bytes) : json(nullptr)},
                 {"device_total_bytes", s.device_total_bytes ? json(*s.device_total_bytes) : json(nullptr)}};
  auto rate_or_null = [](double v) { return v > 0 ? json(v) : json(nullptr); };
  r["checkpoint"] = {{"saves", s.checkpoint_saves},
                     {"write_gb_per_s", rate_or_null(s.checkpoint_write_gb_per_s)},
                     {"read_gb_per_s", rate_or_null(s.checkpoint_read_gb_per_s)},
                     {"blocked_s", s.time.checkpoint}};

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) fatal_one("cannot write " + tmp);
    out << r.dump(2) << "\n";
    if (!out) fatal_one("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

MetricsLog::MetricsLog(const std::string& path, bool append) : file_(std::fopen(path.c_str(), append ? "a" : "w")) {
  if (!file_) fatal_one("cannot create " + path);
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const MetricsRecord& m) {
  if (!file_) return;
  json line = {{"step", m.step}, {"epoch", m.epoch}, {"loss", m.loss},
               {"lr", m.lr},     {"samples_per_s", m.samples_per_s}, {"grad_norm", m.grad_norm}};
  if (m.loss_scale) line["loss_scale"] = *m.loss_scale;
  if (m.skipped_steps) line["skipped_steps"] = *m.skipped_steps;
  std::fprintf(file_, "%s\n", line.dump().c_str());
  std::fflush(file_);
}

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace trident::report
