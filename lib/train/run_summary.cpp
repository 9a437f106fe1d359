#include "train/run_summary.hpp"

#include <mpi.h>
#include <torch/version.h>

#include <algorithm>

#include "comm/backend.hpp"
#include "comm/cuda_runtime.hpp"
#include "core/error.hpp"
#include "model/gpt.hpp"
#include "parallel/element_partition.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "train/plan_text.hpp"

namespace trident::train {

namespace {

// One rank's pipeline figures, gathered by rank 0 (MPI_DOUBLE fields, read back by name).
struct StageRecord {
  double stage, dp_rank, compute_s, blocked_s, bubble_fraction, peak_alive, activation_bytes, parameters;
};
constexpr int kStageRecordFields = sizeof(StageRecord) / sizeof(double);
static_assert(sizeof(StageRecord) == kStageRecordFields * sizeof(double), "StageRecord: doubles only, no padding");

// Every rank's timeline of its last step, on rank 0 (one [kind, micro, chunk, start, end] row per op).
std::vector<std::vector<report::TimelineOp>> gather_timelines(const parallel::StageStats& st, MPI_Comm comm) {
  std::vector<double> mine;
  for (const auto& op : st.last_step)
    mine.insert(mine.end(), {static_cast<double>(op.kind), static_cast<double>(op.micro),
                             static_cast<double>(op.chunk), op.start_s, op.end_s});
  int ranks = 0, rank = 0;
  MPI_CHECK(MPI_Comm_size(comm, &ranks));
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<size_t>(ranks)), offsets(static_cast<size_t>(ranks), 0);
  MPI_CHECK(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm));
  for (size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<double> all(rank == 0 ? static_cast<size_t>(offsets.back() + counts.back()) : 0);
  MPI_CHECK(MPI_Gatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(), offsets.data(), MPI_DOUBLE, 0, comm));
  std::vector<std::vector<report::TimelineOp>> out(static_cast<size_t>(ranks));
  if (rank != 0) return out;
  for (size_t r = 0; r < out.size(); ++r)
    for (int i = offsets[r]; i < offsets[r] + counts[r]; i += 5) {
      const double* row = all.data() + i;
      out[r].push_back({parallel::op_name(static_cast<parallel::OpKind>(row[0])), static_cast<int>(row[1]),
                        static_cast<int>(row[2]), row[3], row[4]});
    }
  return out;
}

// run.peak_tflops = 0 on a GPU in bf16/fp16: the dense 16-bit tensor-core peak of the GPUs this
// is known for (H100/H200 SXM 989, A100 312 TFLOP/s); 0 (no MFU) otherwise.
double default_peak_tflops(const Trainer::State& s) {
  if (!s.conn.torch_device.is_cuda() || s.deck.optim.precision == "fp32") return 0;
  const std::string name = comm::cuda_device_name(s.conn.cuda_index);
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) return 989;
  if (name.find("A100") != std::string::npos) return 312;
  return 0;
}

}  // namespace

report::Summary summarize_run(Trainer::State& s, const Result& result, double train_seconds) {
  const auto& deck = s.deck;
  const auto& topo = *s.conn.topology;
  report::Summary summary;
  summary.deck = deck;
  summary.torch_version = TORCH_VERSION;
  summary.nccl_version = comm::nccl_version();
  summary.layout = {s.conn.world.size, s.conn.world.node_count, topo.dp(), topo.pp(), static_cast<int>(deck.parallel.zero),
                    s.conn.dp_comm->backend(), s.conn.device, deck.parallel.schedule, s.stage.plan->micro_batch(), s.stage.plan->accumulation(), s.conn.threads};
  summary.steps = s.stage.total_steps;
  summary.epochs = s.stage.epochs;
  summary.parameters = static_cast<int64_t>(sum_over_ranks(s, static_cast<double>(s.stage.flat->numel())) / topo.dp());
  summary.train_loss = result.train_loss;
  summary.test_loss = result.test_loss;
  summary.test_accuracy = result.test_accuracy;
  summary.samples_per_s = result.samples_per_s;
  if (s.stage.train_split->tokens()) {
    // Per token: 6 N for the matmul parameters (all but the token and position tables) plus
    // attention's matmuls (model/gpt.hpp); achieved TFLOP/s per rank, as Megatron reports it.
    const int64_t vocab = train::input_spec(deck, *s.stage.train_split).classes;
    const int64_t matmul_params = summary.parameters - (vocab + deck.model.seq_len) * deck.model.d_model;
    summary.tokens_per_s = result.samples_per_s * static_cast<double>(deck.model.seq_len);
    summary.tflops = *summary.tokens_per_s *
                     model::gpt_flops_per_token(matmul_params, deck.model.layers, deck.model.seq_len, deck.model.d_model) /
                     1e12 / s.conn.world.size;
    if (deck.run.peak_tflops > 0) summary.peak_tflops = deck.run.peak_tflops;
    else if (const double peak = default_peak_tflops(s); peak > 0) summary.peak_tflops = peak;
    if (summary.peak_tflops) summary.mfu = *summary.tflops / *summary.peak_tflops;
  }
  if (s.stage.scaler) {
    summary.loss_scale = s.stage.scaler->scale();
    summary.skipped_steps = s.stage.scaler->skipped_steps();
  }
  summary.step_time_s = train_seconds / static_cast<double>(std::max<int64_t>(1, s.stage.total_steps - s.restored.start_step));
  summary.resumed_from = s.restored.resumed_from;
  summary.first_step = s.restored.start_step;
  summary.checkpoint_saves = s.saves;
  summary.gathers = s.stage.grad_sync->gathers() - s.evaluation_gathers;  // training's
  summary.gathers_prefetched = s.stage.grad_sync->gathers_prefetched() - s.evaluation_gathers_prefetched;
  summary.micro_steps_replayed = s.stage.pipeline->micro_steps_replayed();
  const double save_seconds = max_over_ranks(s, s.save_seconds);  // whole saves: background writes included
  summary.checkpoint_write_gb_per_s = save_seconds > 0 ? s.bytes_written / save_seconds / 1e9 : 0;
  summary.checkpoint_async = s.deck.checkpoint.async;
  const double read_seconds = max_over_ranks(s, s.restored.read_seconds);
  summary.checkpoint_read_gb_per_s = read_seconds > 0 ? sum_over_ranks(s, s.restored.bytes_read) / read_seconds / 1e9 : 0;
  for (double* t : {&s.times.total, &s.times.data_wait, &s.times.forward, &s.times.backward, &s.times.comm_exposed,
                    &s.times.optimizer, &s.times.checkpoint, &s.times.evaluation})
    *t = max_over_ranks(s, *t);
  summary.time = s.times;
  const auto state = s.stage.grad_sync->state_bytes();
  auto max_bytes = [&](int64_t v) { return static_cast<int64_t>(max_over_ranks(s, static_cast<double>(v))); };
  summary.memory = {max_bytes(state.params), max_bytes(state.grads), max_bytes(s.stage.optimizer->state_bytes()),
                    max_bytes(state.master),
                    max_bytes(s.stage.plan->state_bytes(topo.stage()).total())};
  // Per stage (from its dp rank 0): compute, time blocked on neighbours, bubble, activations.
  // Without a pipeline there is no bubble: the step's time outside forward and backward (data,
  // the loss) is not idle time waiting for another stage.
  const auto& st = s.stage.pipeline->stats();
  const double bubble = topo.pp() > 1 ? st.bubble_fraction() : 0.0;
  const StageRecord mine{static_cast<double>(topo.stage()), static_cast<double>(topo.dp_rank()), st.compute_s,
                         st.blocked_s, bubble, static_cast<double>(st.peak_alive),
                         static_cast<double>(st.activation_bytes), static_cast<double>(s.stage.flat->numel())};
  std::vector<StageRecord> all(static_cast<size_t>(s.conn.world.size));
  MPI_CHECK(MPI_Gather(&mine, kStageRecordFields, MPI_DOUBLE, all.data(), kStageRecordFields, MPI_DOUBLE, 0,
                       s.conn.world.comm));
  const auto timelines = gather_timelines(st, s.conn.world.comm);
  double bubble_sum = 0;
  for (size_t rank = 0; rank < all.size(); ++rank) {
    const StageRecord& r = all[rank];
    bubble_sum += r.bubble_fraction;
    if (r.dp_rank != 0) continue;
    summary.stages.push_back({static_cast<int>(r.stage), static_cast<int>(r.peak_alive), r.compute_s, r.blocked_s,
                              r.bubble_fraction, static_cast<int64_t>(r.activation_bytes),
                              static_cast<int64_t>(r.parameters), timelines[rank]});
  }
  summary.bubble_fraction = bubble_sum / s.conn.world.size;
  summary.expected_bubble_fraction = s.stage.plan->expected_bubble();
  summary.peak_bytes = static_cast<int64_t>(max_over_ranks(s, static_cast<double>(report::peak_rss_bytes())));
  summary.startup_peak_bytes = static_cast<int64_t>(max_over_ranks(s, static_cast<double>(s.startup_peak_bytes)));
  const int64_t peak_device =
      max_bytes(s.conn.torch_device.is_cuda() ? comm::cuda_peak_allocated_bytes(s.conn.cuda_index) : 0);  // collective
  const int64_t estimated_device = max_bytes(s.stage.plan->device_bytes(topo.stage()));  // collective
  if (s.conn.torch_device.is_cuda()) {
    summary.device_name = comm::cuda_device_name(s.conn.cuda_index);
    summary.device_total_bytes = comm::cuda_total_memory_bytes(s.conn.cuda_index);
    summary.peak_device_bytes = peak_device;
    summary.estimated_device_bytes = estimated_device;
  }
  return summary;
}

}  // namespace trident::train
