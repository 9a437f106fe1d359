#pragma once
// Pipeline schedules as data: for one rank, the ordered list of what it does with each
// micro-batch in one optimizer step. Pure functions, no MPI: tests simulate all ranks together.
//
// A rank holds v model chunks (v = 1 but for `interleaved`): chunk c of rank s is virtual stage
// c * pp + s of the pp * v the model is cut into, so activations go from rank s to rank s + 1
// and from the last rank back to rank 0's next chunk.
//
// A backward is one op (Backward) or two (split backward): BackwardInput, the gradient with
// respect to the chunk's input, which the previous stage waits for, and BackwardWeight, the
// gradient with respect to the chunk's parameters, which nobody waits for and can fill a bubble.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trident::parallel {

enum class OpKind { RecvActivation, Forward, SendActivation, RecvGradient, Backward, BackwardInput, SendGradient, BackwardWeight };

struct ScheduleOp {
  OpKind kind;
  int micro;
  int chunk = 0;
  bool operator==(const ScheduleOp& o) const { return kind == o.kind && micro == o.micro && chunk == o.chunk; }
};

// What a schedule is made for: pp ranks, m micro-batches per step, v chunks per rank.
struct PipelineShape {
  int pp = 1;
  int micro_batches = 1;
  int virtual_stages = 1;
};

// The schedules `make_schedule` knows, and which of them the executor trains with.
const std::vector<std::string>& schedule_names();

// GPipe: every forward, then every backward (micro-batches in order both times).
std::vector<ScheduleOp> gpipe_schedule(const PipelineShape& shape, int stage);
// 1F1B: pp - stage - 1 warm-up forwards, then one forward / one backward, then the remaining
// backwards; at most pp - stage activations are alive at once.
std::vector<ScheduleOp> one_f_one_b_schedule(const PipelineShape& shape, int stage);
// Interleaved 1F1B (Megatron-LM): forwards go through the chunks in groups of pp micro-batches,
// backwards through them in reverse; (pp - stage - 1) * 2 + (v - 1) * pp warm-up forwards.
// Needs m divisible by pp (a group of pp micro-batches visits each chunk in turn).
std::vector<ScheduleOp> interleaved_schedule(const PipelineShape& shape, int stage);
// ZB-H1 (arXiv 2401.10241): 1F1B with split backwards, the weight gradients deferred into what
// would be bubbles. The order is that of a list schedule run with equal op times: a rank does an
// input gradient as soon as it can (the previous stage waits for it), else a forward while fewer
// than pp micro-batches are alive on it (1F1B's peak, on its first stage), else a deferred
// weight gradient.
std::vector<ScheduleOp> zero_bubble_h1_schedule(const PipelineShape& shape, int stage);

// By name (schedule_names()); throws std::invalid_argument for an unknown name or a shape the
// schedule cannot take (interleaved_constraint).
std::vector<ScheduleOp> make_schedule(const std::string& name, const PipelineShape& shape, int stage);
// "" when `name` can run `shape`, else why not (interleaved: m must be a multiple of pp).
std::string schedule_constraint(const std::string& name, const PipelineShape& shape);

// What the schedule costs when every op of a chunk takes the same time (a forward 1, an input
// gradient 1, a weight gradient 1, a whole backward 2; a chunk's ops 1 / v of that) and sending
// takes none: the simulated idle share of the step, its closed form, and activation memory.
struct ScheduleFigures {
  double bubble = 0;   // idle share of the step, simulated from the op lists
  double formula = 0;  // the schedule's closed form (see schedule_formula)
  std::string formula_text;
  // The most micro-batches any rank holds activations for (forward done, last backward op not),
  // in stage outputs: a chunk's count / v.
  double peak_activations = 0;
};
ScheduleFigures schedule_figures(const std::string& name, const PipelineShape& shape);

// Closed forms: gpipe and 1f1b (p - 1) / (m + p - 1); interleaved (p - 1) / (v m + p - 1);
// zb-h1 (p - 1) / (3 m + p - 1), the paper's figure, which its order reaches with m = p and misses
// by at most p - 1 op times otherwise (a bubble of at most 2 (p - 1) / (3 m + 2 (p - 1))).
double schedule_formula(const std::string& name, const PipelineShape& shape);

// The most one rank's `ops` hold at once, where each (micro-batch, chunk) holds held(chunk) from
// its forward to its last backward op there (Backward, or BackwardWeight when split).
int64_t peak_held(const std::vector<ScheduleOp>& ops, const std::function<int64_t(int chunk)>& held);

std::string to_string(const ScheduleOp& op);
std::string op_name(OpKind kind);  // F, B, Bi, W, recv_act, ...
bool is_compute(OpKind kind);      // F, B, Bi or W: not a send or a receive

}  // namespace trident::parallel
