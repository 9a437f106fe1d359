#pragma once
// The layout of a run as one pure value, built from the deck, the world size and the model's
// layer list: which rank is which stage and replica, the batch arithmetic, which layers each
// stage runs, where every parameter sits in its stage's flat buffer, and what each rank holds
// (model state under ZeRO, activations in flight, the expected bubble). No MPI, no LibTorch:
// `trident plan` prints it, the trainer builds from it, report.json states it, and the
// checkpoint reader places tensors by it. Everything about the layout is computed here once.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/deck.hpp"
#include "model/layer_info.hpp"

namespace trident::parallel {

// world = dp x pp, stage-major as in Megatron-LM: rank r is stage r / dp and replica r % dp,
// so a stage's gradient all-reduce stays inside a node when dp <= ranks per node.
struct RankGrid {
  int dp = 1, pp = 1;
  int world_size() const { return dp * pp; }
  int stage_of(int rank) const { return rank / dp; }
  int dp_rank_of(int rank) const { return rank % dp; }
  int rank_of(int stage, int dp_rank) const { return stage * dp + dp_rank; }
  std::string shape_text() const;     // "world 4 = dp 2 x pp 2"
  std::string rank_map_text() const;  // "rank r -> stage r / 2, dp rank r % 2"
  // parallel.dp / parallel.pp for `world_size` ranks; BadInput naming the key if they do not fit.
  static RankGrid of(const config::Deck& deck, int world_size);
};

// One tensor of the whole model and its place in its stage's flat buffer (parameters; a
// buffer's offset is 0). What checkpoints store and read by (checkpoint/checkpoint.hpp).
struct PlacedTensor {
  std::string name;
  std::vector<int64_t> shape;
  int stage = 0;
  int64_t offset = 0, numel = 0;
};

// Model-state bytes one rank holds in fp32, the ZeRO paper's accounting: parameters 4, gradients
// 4, optimizer state K per parameter (AdamW 8: m and v; SGD with momentum 4), each divided by dp
// where the stage partitions it: zero 0 (8+K)N, 1 (4+4)N + KN/dp, 2 4N + (4+K)N/dp, 3 (8+K)N/dp,
// with each partition ceil(N / dp) (the largest, rank 0's). (Mixed precision would be 2 + 2 + K
// with K = 12.)
struct ModelStateBytes {
  int64_t params = 0, grads = 0, optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};

class Plan {
 public:
  // Validates what the layout needs (BadInput naming the key): dp x pp = world, the batch
  // divides into micro-batches, the layers cut into pp stages.
  Plan(const config::Deck& deck, int world_size, std::vector<model::LayerInfo> layers,
       std::vector<int64_t> input_shape);

  const RankGrid& grid() const { return grid_; }
  int dp() const { return grid_.dp; }
  int pp() const { return grid_.pp; }
  int zero() const { return zero_; }
  const std::string& schedule() const { return schedule_; }
  int64_t global_batch() const { return global_batch_; }
  int64_t micro_batch() const { return micro_batch_; }
  bool micro_batch_auto() const { return micro_batch_auto_; }
  // Micro-batches per replica per optimizer step (the pipeline's m).
  int64_t accumulation() const { return accumulation_; }

  const std::vector<model::LayerInfo>& layers() const { return layers_; }
  int64_t parameters() const;                 // the whole model's
  // The layer list is cut into pp x v chunks (v = parallel.virtual_stages, 1 but for the
  // interleaved schedule); chunk c of stage s is virtual stage c * pp + s.
  int virtual_stages() const { return virtual_stages_; }
  std::pair<int, int> chunk_layers(int stage, int chunk) const;  // [first, end) of the layer list
  std::vector<int> stage_layer_indices(int stage) const;          // its chunks' layers, chunk by chunk
  int64_t stage_parameters(int stage) const;
  int largest_stage() const;                  // by parameters (the first of equals)
  // What decided the cut: "parallel.boundaries", "measured time" or "parameter count".
  const std::string& cut_by() const { return cut_by_; }
  // A stage's measured forward + backward time per micro-batch; 0 when not measured.
  double stage_seconds(int stage) const;
  // One sample entering / leaving a chunk: what the pipeline's neighbours exchange.
  const std::vector<int64_t>& chunk_input_shape(int stage, int chunk) const;
  const std::vector<int64_t>& chunk_output_shape(int stage, int chunk) const;
  // fp32 bytes of a stage's outputs (every chunk's) for one micro-batch: what its pipeline
  // neighbour receives, and the least it keeps from forward to backward.
  int64_t output_bytes(int stage) const;
  // What a stage's layers keep from the forward of one micro-batch to its backward, estimated
  // (LayerInfo::saved, outputs included; `trident plan`'s as on a GPU, the trainer's for the
  // attention its LibTorch runs): `saved_bytes` as they run, `stored_bytes` were none of them
  // recomputed. `recompute_bytes`: the largest stored set of its recomputed layers
  // (model.recompute), live again while that layer's backward recomputes it; 0 for none.
  int64_t saved_bytes(int stage) const;
  int64_t stored_bytes(int stage) const;
  int64_t recompute_bytes(int stage) const;
  // The most of those a rank of `stage` holds at once over its schedule: each (micro-batch,
  // chunk) from its forward to its last backward op, with the input it received from the
  // previous stage (1F1B: pp - stage micro-batches; an interleaved chunk by its own size).
  int64_t held_activation_bytes(int stage) const;
  // The least device memory a rank of `stage` needs: its model state under ZeRO, the activations
  // it holds at worst, and one recomputation.
  int64_t device_bytes(int stage) const;
  // Micro-batches a stage holds between forward and its last backward op at worst: GPipe all m,
  // 1F1B and ZB-H1 at most pp.
  int64_t micro_batches_in_flight() const;
  int64_t micro_batches_in_flight(int stage) const;  // the same for one stage (1F1B: pp - stage), rounded up
  // The schedule's idle share for equal op times (1F1B: (p - 1) / (m + p - 1)); 0 without a pipeline.
  double expected_bubble() const;

  // Optimizer state bytes per parameter: AdamW's two moments 8, SGD's momentum 4, plain SGD 0.
  int64_t optimizer_bytes_per_parameter() const { return optimizer_bytes_per_param_; }
  ModelStateBytes state_bytes(int stage) const;    // per rank of `stage`, under parallel.zero
  ModelStateBytes state_bytes_without_zero(int stage) const;

  // Every parameter / floating-point buffer of the whole model with its stage, in model order.
  const std::vector<PlacedTensor>& placed_parameters() const { return placed_parameters_; }
  const std::vector<PlacedTensor>& placed_buffers() const { return placed_buffers_; }
  std::vector<PlacedTensor> stage_parameters_placed(int stage) const;

 private:
  RankGrid grid_;
  int zero_ = 0;
  std::string schedule_;
  std::string cut_by_;
  int virtual_stages_ = 1;
  int64_t global_batch_ = 0, micro_batch_ = 1, accumulation_ = 1, optimizer_bytes_per_param_ = 0;
  bool micro_batch_auto_ = false;
  std::vector<model::LayerInfo> layers_;
  std::vector<std::vector<int64_t>> shapes_;  // shapes_[l]: layer l's input; shapes_[layers]: the output
  std::vector<int> first_layer_;              // of each stage
  std::vector<PlacedTensor> placed_parameters_, placed_buffers_;
};

// ModelStateBytes for `numel` parameters over `dp` ranks.
ModelStateBytes zero_state_bytes(int zero, int64_t numel, int dp, int64_t optimizer_bytes_per_param);

}  // namespace trident::parallel
