#include "parallel/pipeline_schedule.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

namespace trident::parallel {

namespace {

int virtual_stage(const PipelineShape& shape, int stage, int chunk) { return chunk * shape.pp + stage; }
int virtual_stages_total(const PipelineShape& shape) { return shape.pp * shape.virtual_stages; }

// A compute op with the communication around it: receive first, send after. The first virtual
// stage receives nothing and the last sends nothing onwards.
void add_forward(std::vector<ScheduleOp>& ops, const PipelineShape& shape, int stage, int micro, int chunk = 0) {
  const int vs = virtual_stage(shape, stage, chunk);
  if (vs > 0) ops.push_back({OpKind::RecvActivation, micro, chunk});
  ops.push_back({OpKind::Forward, micro, chunk});
  if (vs < virtual_stages_total(shape) - 1) ops.push_back({OpKind::SendActivation, micro, chunk});
}

// `kind`: Backward (both gradients) or BackwardInput (the input's; BackwardWeight follows later).
void add_backward(std::vector<ScheduleOp>& ops, const PipelineShape& shape, int stage, int micro, int chunk = 0,
                  OpKind kind = OpKind::Backward) {
  const int vs = virtual_stage(shape, stage, chunk);
  if (vs < virtual_stages_total(shape) - 1) ops.push_back({OpKind::RecvGradient, micro, chunk});
  ops.push_back({kind, micro, chunk});
  if (vs > 0) ops.push_back({OpKind::SendGradient, micro, chunk});
}

// ZB-H1's list schedule for every rank at once, in unit time steps (each op takes one).
std::vector<std::vector<ScheduleOp>> zero_bubble_h1_all(const PipelineShape& shape) {
  const int p = shape.pp, m = shape.micro_batches;
  const auto ranks = static_cast<size_t>(p);
  std::vector<std::vector<int>> forward_done(ranks, std::vector<int>(static_cast<size_t>(m), -1));
  std::vector<std::vector<int>> input_grad_done = forward_done;
  std::vector<int> forwards(ranks, 0), input_grads(ranks, 0), weight_grads(ranks, 0);
  std::vector<std::vector<ScheduleOp>> ops(ranks);
  for (int t = 0;; ++t) {
    bool finished = true;
    for (size_t s = 0; s < ranks; ++s) finished = finished && weight_grads[s] == m;
    if (finished) return ops;
    for (size_t s = 0; s < ranks; ++s) {
      const auto ready = [t](int done_at) { return done_at >= 0 && done_at <= t; };
      const int stage = static_cast<int>(s);
      const int b = input_grads[s], f = forwards[s];
      if (b < f && ready(stage == p - 1 ? forward_done[s][static_cast<size_t>(b)]
                                        : input_grad_done[s + 1][static_cast<size_t>(b)])) {
        add_backward(ops[s], shape, stage, b, 0, OpKind::BackwardInput);
        input_grad_done[s][static_cast<size_t>(input_grads[s]++)] = t + 1;
      } else if (f < m && f - weight_grads[s] < p && (s == 0 || ready(forward_done[s - 1][static_cast<size_t>(f)]))) {
        add_forward(ops[s], shape, stage, f);
        forward_done[s][static_cast<size_t>(forwards[s]++)] = t + 1;
      } else if (weight_grads[s] < b) {
        ops[s].push_back({OpKind::BackwardWeight, weight_grads[s]++, 0});
      }
    }
  }
}

}  // namespace

bool is_compute(OpKind k) {
  return k == OpKind::Forward || k == OpKind::Backward || k == OpKind::BackwardInput || k == OpKind::BackwardWeight;
}

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names{"gpipe", "1f1b", "interleaved", "zb-h1"};
  return names;
}

std::vector<ScheduleOp> gpipe_schedule(const PipelineShape& shape, int stage) {
  std::vector<ScheduleOp> ops;
  for (int m = 0; m < shape.micro_batches; ++m) add_forward(ops, shape, stage, m);
  for (int m = 0; m < shape.micro_batches; ++m) add_backward(ops, shape, stage, m);
  return ops;
}

std::vector<ScheduleOp> one_f_one_b_schedule(const PipelineShape& shape, int stage) {
  std::vector<ScheduleOp> ops;
  const int micro_batches = shape.micro_batches;
  const int warmup = std::min(shape.pp - stage - 1, micro_batches);
  int forward = 0, backward = 0;
  while (forward < warmup) add_forward(ops, shape, stage, forward++);
  while (forward < micro_batches) {
    add_forward(ops, shape, stage, forward++);
    add_backward(ops, shape, stage, backward++);
  }
  while (backward < micro_batches) add_backward(ops, shape, stage, backward++);
  return ops;
}

std::vector<ScheduleOp> interleaved_schedule(const PipelineShape& shape, int stage) {
  const int p = shape.pp, v = shape.virtual_stages;
  if (v == 1) return one_f_one_b_schedule(shape, stage);
  if (const std::string why = schedule_constraint("interleaved", shape); !why.empty()) throw std::invalid_argument(why);
  const int total = shape.micro_batches * v;  // forwards on this rank, one per (micro-batch, chunk)
  // The k-th forward (backward) of a rank: micro-batches go in groups of pp through chunk 0, 1, ...
  // (backwards through chunk v - 1, v - 2, ...).
  const auto micro = [p, v](int k) { return (k / (p * v)) * p + k % p; };
  const auto forward_chunk = [p, v](int k) { return (k % (p * v)) / p; };
  const auto backward_chunk = [p, v](int k) { return v - 1 - (k % (p * v)) / p; };
  const int warmup = std::min((p - stage - 1) * 2 + (v - 1) * p, total);
  std::vector<ScheduleOp> ops;
  for (int k = 0; k < warmup; ++k) add_forward(ops, shape, stage, micro(k), forward_chunk(k));
  for (int k = 0; k < total - warmup; ++k) {
    add_forward(ops, shape, stage, micro(warmup + k), forward_chunk(warmup + k));
    add_backward(ops, shape, stage, micro(k), backward_chunk(k));
  }
  for (int k = total - warmup; k < total; ++k) add_backward(ops, shape, stage, micro(k), backward_chunk(k));
  return ops;
}

std::vector<ScheduleOp> zero_bubble_h1_schedule(const PipelineShape& shape, int stage) {
  return zero_bubble_h1_all(shape)[static_cast<size_t>(stage)];
}

std::string schedule_constraint(const std::string& name, const PipelineShape& shape) {
  if (std::find(schedule_names().begin(), schedule_names().end(), name) == schedule_names().end())
    return "unknown schedule '" + name + "'";
  if (name != "interleaved" && shape.virtual_stages != 1)
    return "only the interleaved schedule holds several model chunks per rank";
  if (name == "interleaved" && shape.virtual_stages > 1 && shape.micro_batches % shape.pp != 0)
    return "the interleaved schedule needs the micro-batches per step (" + std::to_string(shape.micro_batches) +
           ") to be a multiple of the pipeline stages (" + std::to_string(shape.pp) + ")";
  return "";
}

std::vector<ScheduleOp> make_schedule(const std::string& name, const PipelineShape& shape, int stage) {
  if (const std::string why = schedule_constraint(name, shape); !why.empty()) throw std::invalid_argument(why);
  if (name == "gpipe") return gpipe_schedule(shape, stage);
  if (name == "interleaved") return interleaved_schedule(shape, stage);
  if (name == "zb-h1") return zero_bubble_h1_schedule(shape, stage);
  return one_f_one_b_schedule(shape, stage);
}

double schedule_formula(const std::string& name, const PipelineShape& shape) {
  const double p = shape.pp, m = shape.micro_batches, v = shape.virtual_stages;
  if (name == "interleaved") return (p - 1) / (v * m + p - 1);
  if (name == "zb-h1") return (p - 1) / (3 * m + p - 1);
  return (p - 1) / (m + p - 1);
}

int64_t peak_held(const std::vector<ScheduleOp>& ops, const std::function<int64_t(int chunk)>& held) {
  int64_t alive = 0, peak = 0;
  for (const ScheduleOp& op : ops) {
    if (op.kind == OpKind::Forward) peak = std::max(peak, alive += held(op.chunk));
    if (op.kind == OpKind::Backward || op.kind == OpKind::BackwardWeight) alive -= held(op.chunk);
  }
  return peak;
}

ScheduleFigures schedule_figures(const std::string& name, const PipelineShape& shape) {
  const int p = shape.pp;
  const double v = shape.virtual_stages;
  std::vector<std::vector<ScheduleOp>> ops;
  for (int s = 0; s < p; ++s) ops.push_back(make_schedule(name, shape, s));
  ScheduleFigures figures;
  figures.formula = schedule_formula(name, shape);
  figures.formula_text = name == "interleaved" ? "(p - 1) / (v m + p - 1)"
                         : name == "zb-h1"     ? "(p - 1) / (3 m + p - 1)"
                                               : "(p - 1) / (m + p - 1)";
  // ZB-H1 reaches the paper's figure with as many micro-batches as stages; with others, only
  // its bound holds (README), which is what a plan shows.
  if (name == "zb-h1" && shape.micro_batches != p) {
    const double pp = p, m = shape.micro_batches;
    figures.formula = 2 * (pp - 1) / (3 * m + 2 * (pp - 1));
    figures.formula_text = "<= 2(p-1) / (3m + 2(p-1))";
  }
  for (const auto& rank_ops : ops)
    figures.peak_activations =
        std::max(figures.peak_activations, static_cast<double>(peak_held(rank_ops, [](int) { return 1; })) / v);
  // Timed run: each rank does its ops in order, an op starting once the rank is free and its
  // input is there (the previous virtual stage's forward, the next one's input gradient).
  enum { kForward, kInputGrad };
  std::map<std::tuple<int, int, int>, double> done;  // (what, micro, virtual stage) -> finish time
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0.0);
  const int last_vs = virtual_stages_total(shape) - 1;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      auto& i = next[static_cast<size_t>(s)];
      for (; i < ops[static_cast<size_t>(s)].size(); ++i) {
        const ScheduleOp& op = ops[static_cast<size_t>(s)][i];
        if (!is_compute(op.kind)) continue;
        const int vs = virtual_stage(shape, s, op.chunk);
        double ready = 0;
        if (op.kind != OpKind::BackwardWeight) {
          std::tuple<int, int, int> needs{kForward, op.micro, vs - 1};  // a forward's input
          if (op.kind != OpKind::Forward) needs = vs == last_vs ? std::tuple<int, int, int>{kForward, op.micro, vs}
                                                                : std::tuple<int, int, int>{kInputGrad, op.micro, vs + 1};
          if (op.kind != OpKind::Forward || vs > 0) {
            const auto it = done.find(needs);
            if (it == done.end()) break;  // waits for another rank
            ready = it->second;
          }
        }
        const double cost = (op.kind == OpKind::Backward ? 2.0 : 1.0) / v;
        double& free = free_at[static_cast<size_t>(s)];
        free = std::max(free, ready) + cost;
        if (op.kind != OpKind::BackwardWeight)  // nobody waits for a weight gradient
          done[{op.kind == OpKind::Forward ? kForward : kInputGrad, op.micro, vs}] = free;
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s)
    if (next[static_cast<size_t>(s)] != ops[static_cast<size_t>(s)].size())
      throw std::logic_error("schedule " + name + " deadlocks");
  const double makespan = *std::max_element(free_at.begin(), free_at.end());
  figures.bubble = makespan > 0 ? 1.0 - 3.0 * shape.micro_batches / makespan : 0.0;
  return figures;
}

std::string op_name(OpKind kind) {
  static const char* names[] = {"recv_act", "F", "send_act", "recv_grad", "B", "Bi", "send_grad", "W"};
  return names[static_cast<int>(kind)];
}

std::string to_string(const ScheduleOp& op) {
  std::string text = op_name(op.kind) + std::to_string(op.micro);
  if (op.chunk > 0) text += "." + std::to_string(op.chunk);
  return text;
}

}  // namespace trident::parallel
