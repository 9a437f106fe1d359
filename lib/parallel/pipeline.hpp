#pragma once
// The pipeline executor: runs a schedule's op list (parallel/pipeline_schedule.hpp) for this rank's
// stage. Activations and their gradients go to the neighbouring stages with non-blocking sends
// and blocking receives of known shapes; only the first stage reads inputs and only the last
// reads labels and computes the loss. With pp = 1 it is plain forward/backward per micro-batch.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "data/loader.hpp"
#include "model/model.hpp"
#include "parallel/grad_sync.hpp"

namespace trident::parallel {

// When a compute op of a step ran on this rank, in seconds from the step's start.
struct OpTiming {
  int kind;  // an OpKind (parallel/pipeline_schedule.hpp)
  int micro, chunk;
  double start_s, end_s;
};

struct StageStats {
  double compute_s = 0, blocked_s = 0, step_s = 0;  // summed over steps
  int peak_alive = 0;              // most micro-batches between their forward and backward
  int64_t activation_bytes = 0;    // one micro-batch's stage output (the activation kept per micro-batch)
  // The latest step's compute ops. Empty on a GPU, where the host only queues the work and its
  // clock says nothing of when the device ran it.
  std::vector<OpTiming> last_step;
  double bubble_fraction() const { return step_s > 0 ? 1.0 - compute_s / step_s : 0.0; }
};

class Pipeline {
 public:
  // `input_shape` / `output_shape`: one sample's shape entering / leaving this stage.
  // Activations travel on `activations` (stage s -> s + 1) and gradients on `gradients`
  // (s + 1 -> s), over the pp group. They may be one communicator (MPI matches messages by tag
  // and source); NCCL needs two: its sends and receives run in order on one stream and a send
  // completes only when the peer receives it, so under 1F1B a stage sending an activation while
  // its neighbour sends it a gradient on the same stream would wait for each other forever.
  Pipeline(comm::Communicator& activations, comm::Communicator& gradients, int stage, int pp,
           model::LayerStack stage_model, std::vector<int64_t> input_shape, std::vector<int64_t> output_shape,
           std::string schedule);

  // Forwards under autocast in `type` (Float = off, optim/precision.hpp) on `device`, where the
  // stage's model is; batches are copied there (asynchronously from pinned memory on a GPU) and
  // receive buffers are allocated there. Stages still exchange fp32 activations and gradients.
  void set_compute(c10::ScalarType type, c10::Device device) {
    compute_type_ = type;
    device_ = device;
  }

  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ == pp_ - 1; }
  model::LayerStack& model() { return model_; }

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
  at::Tensor forward(const at::Tensor& x);  // this stage's layers under the compute type; fp32 out
  at::Tensor receive(comm::Communicator& comm, const std::vector<int64_t>& sample_shape, int64_t n, int peer,
                     int tag);
  at::Tensor to_device(const at::Tensor& t) const;
  comm::Communicator& activations_;
  comm::Communicator& gradients_;
  int stage_, pp_;
  model::LayerStack model_;
  std::vector<int64_t> input_shape_, output_shape_;
  std::string schedule_;
  StageStats stats_;
  c10::ScalarType compute_type_ = c10::ScalarType::Float;
  c10::Device device_ = c10::Device(c10::DeviceType::CPU);
};

}  // namespace trident::parallel
