#include "parallel/pipeline.hpp"

#include <torch/torch.h>

#include "core/timer.hpp"
#include "model/loss.hpp"
#include "optim/precision.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/split_backward.hpp"

namespace trident::parallel {

namespace {
// Tags keep activations and gradients of different micro-batches apart on the pp communicator.
int activation_tag(int micro) { return 2 * micro; }
int gradient_tag(int micro) { return 2 * micro + 1; }

std::vector<int64_t> with_batch(int64_t n, const std::vector<int64_t>& sample_shape) {
  std::vector<int64_t> shape{n};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  return shape;
}
}  // namespace

Pipeline::Pipeline(comm::Communicator& activations, comm::Communicator& gradients, int stage, int pp,
                   model::LayerStack stage_model, std::vector<int64_t> input_shape, std::vector<int64_t> output_shape,
                   std::string schedule)
    : activations_(activations), gradients_(gradients), stage_(stage), pp_(pp), model_(std::move(stage_model)), input_shape_(std::move(input_shape)),
      output_shape_(std::move(output_shape)), schedule_(std::move(schedule)) {}

at::Tensor Pipeline::forward(const at::Tensor& x) {
  optim::AutocastScope autocast(compute_type_, device_.is_cuda());
  // Stage boundaries stay fp32 whatever the layers computed in (the pipeline's buffers are). The
  // last stage's logits stay as computed: model::cross_entropy reads bf16/fp16 ones in fp32
  // slices, and a whole fp32 copy of a GPT's logits would be its largest tensor.
  const at::Tensor y = model_->forward(x);
  return last() ? y : y.to(at::kFloat);
}

// non_blocking: from pinned memory (data/loader.hpp pins batches meant for a GPU) the copy runs
// on the stream while the host goes on; from the CPU to the CPU it is the tensor itself.
at::Tensor Pipeline::to_device(const at::Tensor& t) const { return t.to(device_, /*non_blocking=*/true); }

at::Tensor Pipeline::receive(comm::Communicator& comm, const std::vector<int64_t>& sample_shape, int64_t n, int peer,
                             int tag) {
  at::Tensor t = at::empty(with_batch(n, sample_shape), at::TensorOptions().dtype(at::kFloat).device(device_));
  ScopedTimer blocked(stats_.blocked_s);
  comm.recv(t, peer, tag);
  return t;
}

at::Tensor Pipeline::run_step(int micro_batches, int64_t micro_batch, const std::function<data::MicroBatch()>& next_batch,
                          GradSync& sync, const at::Tensor& loss_factor, double& forward_s, double& backward_s) {
  Stopwatch step;
  const double compute_before = forward_s + backward_s;
  const auto m = static_cast<size_t>(micro_batches);
  std::vector<at::Tensor> inputs(m), outputs(m), labels(m), losses(m), output_grads(m);
  std::vector<std::unique_ptr<SplitBackward>> split(m);  // between a micro-batch's input and weight gradients
  std::vector<std::unique_ptr<comm::Work>> sends;
  std::vector<at::Tensor> in_flight;  // what the sends read from, alive until they complete
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));
  int alive = 0;
  std::vector<OpTiming> timeline;
  for (const auto& op : make_schedule(schedule_, PipelineShape{pp_, micro_batches, 1}, stage_)) {
    const auto i = static_cast<size_t>(op.micro);
    const double op_start = step.seconds();
    switch (op.kind) {
      case OpKind::RecvActivation:
        inputs[i] =
            receive(activations_, input_shape_, micro_batch, stage_ - 1, activation_tag(op.micro)).requires_grad_(true);
        break;
      case OpKind::Forward: {
        if (first() || last()) {
          auto batch = next_batch();
          if (first()) inputs[i] = to_device(batch.inputs);
          if (last()) labels[i] = to_device(batch.labels);
        }
        ScopedTimer t(forward_s);
        outputs[i] = forward(inputs[i]);
        if (last()) {
          losses[i] = model::cross_entropy(outputs[i], labels[i], /*mean=*/true);
          loss_sum += losses[i].detach().to(at::kDouble);
        }
        stats_.peak_alive = std::max(stats_.peak_alive, ++alive);
        break;
      }
      case OpKind::SendActivation:
        in_flight.push_back(outputs[i].detach());
        sends.push_back(activations_.send_async(in_flight.back(), stage_ + 1, activation_tag(op.micro)));
        break;
      case OpKind::RecvGradient:
        output_grads[i] = receive(gradients_, output_shape_, micro_batch, stage_ + 1, gradient_tag(op.micro));
        break;
      case OpKind::Backward: {
        ScopedTimer t(backward_s);
        sync.before_backward(op.micro == micro_batches - 1);  // every schedule ends on the last micro-batch
        if (last()) (losses[i] * loss_factor).backward();
        else outputs[i].backward(output_grads[i]);
        outputs[i] = losses[i] = output_grads[i] = labels[i] = at::Tensor();
        --alive;
        break;
      }
      case OpKind::BackwardInput: {  // the parameters' gradients wait for BackwardWeight
        ScopedTimer t(backward_s);
        if (last()) {
          const at::Tensor scaled = losses[i] * loss_factor;
          split[i] = std::make_unique<SplitBackward>(scaled, at::ones_like(scaled), inputs[i]);
        } else {
          split[i] = std::make_unique<SplitBackward>(outputs[i], output_grads[i], inputs[i]);
        }
        outputs[i] = losses[i] = output_grads[i] = labels[i] = at::Tensor();
        break;
      }
      case OpKind::BackwardWeight: {
        ScopedTimer t(backward_s);
        // The gradient hooks fire here, so this is the backward the strategy hears of.
        sync.before_backward(op.micro == micro_batches - 1);
        split[i]->weight_gradients();
        split[i].reset();
        --alive;
        break;
      }
      case OpKind::SendGradient:
        in_flight.push_back(inputs[i].grad());
        sends.push_back(gradients_.send_async(in_flight.back(), stage_ - 1, gradient_tag(op.micro)));
        inputs[i] = at::Tensor();
        break;
    }
    const bool compute = op.kind == OpKind::Forward || op.kind == OpKind::Backward || op.kind == OpKind::BackwardInput ||
                         op.kind == OpKind::BackwardWeight;
    if (compute && !device_.is_cuda())
      timeline.push_back({static_cast<int>(op.kind), op.micro, op.chunk, op_start, step.seconds()});
  }
  stats_.last_step = std::move(timeline);
  {
    ScopedTimer blocked(stats_.blocked_s);
    for (auto& s : sends) s->wait();
  }
  stats_.compute_s += forward_s + backward_s - compute_before;
  stats_.step_s += step.seconds();
  int64_t bytes = 4;
  for (auto d : output_shape_) bytes *= d;
  stats_.activation_bytes = bytes * micro_batch;
  return loss_sum;
}

std::pair<double, double> Pipeline::evaluate(int64_t n, const std::function<data::MicroBatch()>& read) {
  torch::NoGradGuard no_grad;
  at::Tensor x, labels;
  if (first() || last()) {
    auto batch = read();
    if (first()) x = to_device(batch.inputs);
    if (last()) labels = to_device(batch.labels);
  }
  if (!first()) x = receive(activations_, input_shape_, n, stage_ - 1, activation_tag(0));
  const at::Tensor y = forward(x);
  if (!last()) {
    activations_.send(y.contiguous(), stage_ + 1, activation_tag(0));
    return {0.0, 0.0};
  }
  const double loss = model::cross_entropy(y, labels, /*mean=*/false).item<double>();
  return {loss, y.argmax(-1).eq(labels).sum().item<double>()};
}

}  // namespace trident::parallel
