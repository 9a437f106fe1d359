// CUDA graphs of a micro-step (parallel/micro_step_graph.hpp), after PyTorch's whole-network
// capture: warm-up on a side stream, capture there into the graph's own memory pool, replay on
// the stream the training loop runs on.
#include "parallel/micro_step_graph.hpp"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "core/log.hpp"

namespace trident::parallel {

namespace {

bool same_kind(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type();
}

// `waiter` goes on only once the work queued so far on `on` is done.
void wait_for(const c10::cuda::CUDAStream& waiter, const c10::cuda::CUDAStream& on) {
  at::cuda::CUDAEvent event;
  event.record(on);
  event.block(waiter);
}

// Work on `side` for this object's life, ordered after the ambient stream's work so far, and
// the ambient stream ordered after it again at the end (also when the work throws).
class OnSideStream {
 public:
  OnSideStream(const c10::cuda::CUDAStream& side, const c10::cuda::CUDAStream& ambient)
      : side_(side), ambient_(ambient) {
    wait_for(side_, ambient_);
    guard_.emplace(side_);
  }
  ~OnSideStream() {
    guard_.reset();
    wait_for(ambient_, side_);
  }
  OnSideStream(const OnSideStream&) = delete;
  OnSideStream& operator=(const OnSideStream&) = delete;

 private:
  c10::cuda::CUDAStream side_, ambient_;
  std::optional<c10::cuda::CUDAStreamGuard> guard_;
};

[[noreturn]] void capture_failed(const std::string& why) {
  fatal_one("run.cuda_graph: the micro-step could not be captured as a CUDA graph (set run.cuda_graph = false): " +
            why);
}

class CudaMicroStepGraph final : public MicroStepGraph {
 public:
  CudaMicroStepGraph(MicroStep step, int warmup) : step_(std::move(step)), warmup_(warmup) {}

  at::Tensor run(const at::Tensor& inputs, const at::Tensor& labels, const at::Tensor& loss_factor) override {
    if (eager_calls_ < warmup_) {
      ++eager_calls_;
      return on_side_stream(inputs, labels, loss_factor);
    }
    if (!graph_) capture(inputs, labels, loss_factor);
    if (!same_kind(inputs, inputs_) || !same_kind(labels, labels_) || !same_kind(loss_factor, factor_))
      return step_(inputs, labels, loss_factor).to(at::kDouble);
    inputs_.copy_(inputs, /*non_blocking=*/true);
    labels_.copy_(labels, /*non_blocking=*/true);
    factor_.copy_(loss_factor, /*non_blocking=*/true);
    graph_->replay();  // on the current stream, after those copies
    ++replays_;
    return loss_.to(at::kDouble);  // a copy: the next replay overwrites loss_
  }

  int64_t replays() const override { return replays_; }

 private:
  at::Tensor on_side_stream(const at::Tensor& inputs, const at::Tensor& labels, const at::Tensor& loss_factor) {
    const c10::cuda::CUDAStream ambient = c10::cuda::getCurrentCUDAStream(inputs.device().index());
    at::Tensor loss;
    {
      const OnSideStream on_side(side(inputs), ambient);
      loss = step_(inputs, labels, loss_factor).to(at::kDouble);
    }
    loss.record_stream(ambient);  // allocated on the side stream, read on the ambient one
    return loss;
  }

  const c10::cuda::CUDAStream& side(const at::Tensor& on) {
    if (!side_) side_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, on.device().index());
    return *side_;
  }

  // The capture only records the work: the replay that follows runs this micro-step.
  void capture(const at::Tensor& inputs, const at::Tensor& labels, const at::Tensor& loss_factor) {
    inputs_ = at::empty_like(inputs);
    labels_ = at::empty_like(labels);
    factor_ = at::empty_like(loss_factor);
    c10::cuda::device_synchronize();
    // The eager micro-steps' cached blocks go back to the driver, for the graph's pool to take:
    // otherwise both would stay reserved.
    c10::cuda::CUDACachingAllocator::emptyCache();
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    {
      c10::cuda::CUDAStreamGuard guard(side(inputs));
      // Thread-local: the data loader's thread may pin memory meanwhile, which a global capture
      // would refuse; the autograd engine's thread queues onto the captured stream either way.
      graph_->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        loss_ = step_(inputs_, labels_, factor_);
      } catch (const std::exception& e) {
        try {
          graph_->capture_end();
        } catch (const std::exception&) {  // the capture's own error: the step's says more
        }
        capture_failed(e.what());
      }
      // Where the step did something a capture cannot hold (a wait for the host, say), CUDA
      // refuses the graph here.
      try {
        graph_->capture_end();
      } catch (const std::exception& e) {
        capture_failed(e.what());
      }
    }
    log::info("run.cuda_graph: micro-step captured after {} eager ones; replayed from here on", eager_calls_);
  }

  MicroStep step_;
  int warmup_, eager_calls_ = 0;
  int64_t replays_ = 0;
  std::optional<c10::cuda::CUDAStream> side_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  at::Tensor inputs_, labels_, factor_, loss_;  // the captured arguments and result
};

}  // namespace

std::unique_ptr<MicroStepGraph> make_micro_step_graph(MicroStep step, int warmup) {
  return std::make_unique<CudaMicroStepGraph>(std::move(step), warmup);
}

}  // namespace trident::parallel
