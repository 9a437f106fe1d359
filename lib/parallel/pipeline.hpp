#pragma once
// The pipeline executor: runs a schedule's op list (parallel/pipeline_schedule.hpp) for this rank's
// stage. Activations and their gradients go to the neighbouring stages with non-blocking sends
// and blocking receives of known shapes; only the first stage reads inputs and only the last
// reads labels and computes the loss. With pp = 1 it is plain forward/backward per micro-batch.
// Under the interleaved schedule a rank runs several chunks of the model: activations go from
// the last rank back to rank 0's next chunk, and the first and last chunks are rank 0's first
// and the last rank's last.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "data/loader.hpp"
#include "model/model.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/micro_step_graph.hpp"

namespace trident::parallel {

// When a compute op of a step ran on this rank, in seconds from the step's start.
struct OpTiming {
  int kind;  // an OpKind (parallel/pipeline_schedule.hpp)
  int micro, chunk;
  double start_s, end_s;
};

struct StageStats {
  double compute_s = 0, blocked_s = 0, step_s = 0;  // summed over steps
  int peak_alive = 0;              // most micro-batches (per chunk) between their forward and backward
  int64_t activation_bytes = 0;    // one micro-batch's output of a chunk (the largest): what each keeps
  // The latest step's compute ops, with a pipeline. Empty on a GPU, where the host only queues
  // the work and its clock says nothing of when the device ran it.
  std::vector<OpTiming> last_step;
  double bubble_fraction() const { return step_s > 0 ? 1.0 - compute_s / step_s : 0.0; }
};

// One model chunk a rank runs, with one sample's shape entering and leaving it.
struct PipelineChunk {
  model::LayerStack layers;
  std::vector<int64_t> input_shape, output_shape;
};

class Plan;

// `stage_model` (the stage's layers, chunk after chunk, as the trainer builds them) cut into the
// plan's chunks for `stage`: the whole stack for one chunk, a slice of it for each otherwise.
std::vector<PipelineChunk> stage_chunks(const Plan& plan, int stage, const model::LayerStack& stage_model);

class Pipeline {
 public:
  // `chunks`: this rank's, in order (one but for the interleaved schedule). Activations travel on `activations` (stage s -> s + 1) and gradients on `gradients`
  // (s + 1 -> s), over the pp group. They may be one communicator (MPI matches messages by tag
  // and source); NCCL needs two: its sends and receives run in order on one stream and a send
  // completes only when the peer receives it, so under 1F1B a stage sending an activation while
  // its neighbour sends it a gradient on the same stream would wait for each other forever.
  Pipeline(comm::Communicator& activations, comm::Communicator& gradients, int stage, int pp,
           std::vector<PipelineChunk> chunks, std::string schedule);

  // Forwards under autocast in `type` (Float = off, optim/precision.hpp) on `device`, where the
  // stage's model is; batches are copied there (asynchronously from pinned memory on a GPU) and
  // receive buffers are allocated there. Stages still exchange fp32 activations and gradients.
  void set_compute(c10::ScalarType type, c10::Device device) {
    compute_type_ = type;
    device_ = device;
  }

  // run.cuda_graph (parallel/micro_step_graph.hpp): each micro-step from then on runs as one
  // CUDA graph, its time counted as forward. For one stage (pp 1) of one chunk; the caller checks
  // the rest. False in a build without CUDA.
  bool replay_micro_steps();
  int64_t micro_steps_replayed() const { return graph_ ? graph_->replays() : 0; }

  bool first() const { return stage_ == 0; }    // reads the inputs
  bool last() const { return stage_ == pp_ - 1; }  // reads the labels, computes the loss

  // One optimizer step: `micro_batches` micro-batches of `micro_batch` samples. `next_batch`
  // gives the first stage its inputs and the last its labels, in micro-batch order. Returns the
  // sum of the micro-batches' mean losses on the last stage (0 elsewhere), as a 0-dimensional
  // fp64 tensor on the device: reading it is the caller's choice (a GPU step need not wait).
  // Backward starts from each mean loss × `loss_factor`, an fp32 scalar on the device (1 / the
  // replicas' micro-batches, times fp16's loss scale, which changes on the device).
  at::Tensor run_step(int micro_batches, int64_t micro_batch, const std::function<data::MicroBatch()>& next_batch,
                      GradSync& sync, const at::Tensor& loss_factor, double& forward_s, double& backward_s);

  // Forward only, `n` samples (same n on every stage of the replica): returns (loss sum,
  // correct predictions) over every target (a GPT sample has one per position) on the last
  // stage, (0, 0) elsewhere.
  std::pair<double, double> evaluate(int64_t n, const std::function<data::MicroBatch()>& read);

  const StageStats& stats() const { return stats_; }

 private:
  // A chunk's layers under the compute type; fp32 out but for the model's last chunk.
  at::Tensor forward(int chunk, const at::Tensor& x);
  bool first_chunk(int chunk) const { return first() && chunk == 0; }  // of the whole model
  bool last_chunk(int chunk) const { return last() && chunk == chunks() - 1; }
  int chunks() const { return static_cast<int>(chunks_.size()); }
  int next_rank() const { return (stage_ + 1) % pp_; }
  int previous_rank() const { return (stage_ + pp_ - 1) % pp_; }
  at::Tensor receive(comm::Communicator& comm, const std::vector<int64_t>& sample_shape, int64_t n, int peer,
                     int tag);
  at::Tensor to_device(const at::Tensor& t) const;
  at::Tensor run_graphed_step(int micro_batches, int64_t micro_batch, const std::function<data::MicroBatch()>& next_batch,
                              GradSync& sync, const at::Tensor& loss_factor, double& forward_s);
  void count_step(double step_s, double compute_s, int64_t micro_batch);  // into stats_
  comm::Communicator& activations_;
  comm::Communicator& gradients_;
  int stage_, pp_;
  std::vector<PipelineChunk> chunks_;
  std::string schedule_;
  StageStats stats_;
  c10::ScalarType compute_type_ = c10::ScalarType::Float;
  c10::Device device_ = c10::Device(c10::DeviceType::CPU);
  std::unique_ptr<MicroStepGraph> graph_;
};

}  // namespace trident::parallel
