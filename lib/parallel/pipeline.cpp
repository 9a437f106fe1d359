#include "parallel/pipeline.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "core/timer.hpp"
#include "model/loss.hpp"
#include "optim/precision.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/plan.hpp"
#include "parallel/split_backward.hpp"

namespace trident::parallel {

namespace {

// A compute phase's time, less the communication the gradient strategy waited for inside it
// (ZeRO-3's layer gathers in the forward and backward hooks), which its exposed_comm_seconds
// counts: the phases of report.json's time_s do not overlap.
class ComputeTimer {
 public:
  ComputeTimer(double& phase, const GradSync& sync) : phase_(phase), sync_(sync), comm_before_(sync.exposed_comm_seconds()) {}
  ~ComputeTimer() { phase_ += watch_.seconds() - (sync_.exposed_comm_seconds() - comm_before_); }
  ComputeTimer(const ComputeTimer&) = delete;
  ComputeTimer& operator=(const ComputeTimer&) = delete;

 private:
  double& phase_;
  const GradSync& sync_;
  double comm_before_;
  Stopwatch watch_;
};

// Tags keep activations and gradients of different micro-batches (and chunks: the receiver's)
// apart on the pp communicators.
int activation_tag(int micro, int chunk, int chunks) { return 2 * (micro * chunks + chunk); }
int gradient_tag(int micro, int chunk, int chunks) { return 2 * (micro * chunks + chunk) + 1; }

std::vector<int64_t> with_batch(int64_t n, const std::vector<int64_t>& sample_shape) {
  std::vector<int64_t> shape{n};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  return shape;
}
}  // namespace

std::vector<PipelineChunk> stage_chunks(const Plan& plan, int stage, const model::LayerStack& stage_model) {
  std::vector<PipelineChunk> chunks;
  size_t first = 0;
  for (int c = 0; c < plan.virtual_stages(); ++c) {
    const auto [begin, end] = plan.chunk_layers(stage, c);
    const auto count = static_cast<size_t>(end - begin);
    chunks.push_back({plan.virtual_stages() == 1 ? stage_model : model::slice(stage_model, first, first + count),
                      plan.chunk_input_shape(stage, c), plan.chunk_output_shape(stage, c)});
    first += count;
  }
  return chunks;
}

Pipeline::Pipeline(comm::Communicator& activations, comm::Communicator& gradients, int stage, int pp,
                   std::vector<PipelineChunk> chunks, std::string schedule)
    : activations_(activations), gradients_(gradients), stage_(stage), pp_(pp), chunks_(std::move(chunks)),
      schedule_(std::move(schedule)) {}

at::Tensor Pipeline::forward(int chunk, const at::Tensor& x) {
  optim::AutocastScope autocast(compute_type_, device_.is_cuda());
  // Stage boundaries stay fp32 whatever the layers computed in (the pipeline's buffers are). The
  // last stage's logits stay as computed: model::cross_entropy reads bf16/fp16 ones in fp32
  // slices, and a whole fp32 copy of a GPT's logits would be its largest tensor.
  const at::Tensor y = chunks_[static_cast<size_t>(chunk)].layers->forward(x);
  return last_chunk(chunk) ? y : y.to(at::kFloat);
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
  if (graph_) return run_graphed_step(micro_batches, micro_batch, next_batch, sync, loss_factor, forward_s);
  Stopwatch step;
  const double compute_before = forward_s + backward_s;
  const int v = chunks();
  const auto slots = static_cast<size_t>(micro_batches * v);  // one per (micro-batch, chunk)
  std::vector<at::Tensor> inputs(slots), outputs(slots), labels(slots), losses(slots), output_grads(slots);
  std::vector<std::unique_ptr<SplitBackward>> split(slots);  // between an input and a weight gradient
  // Sends in flight, each keeping what it reads from being freed or reused until it completes
  // (comm::Communicator::send_async), dropped once test() finds it complete: a stage holds what
  // it sent only that long, not to the step's end (1F1B's pp - stage micro-batches, whatever the
  // step's number). test() never waits: a wait here could deadlock with a neighbour sending too.
  std::vector<std::unique_ptr<comm::Work>> sends;
  const auto drop_completed_sends = [&sends] {
    sends.erase(std::remove_if(sends.begin(), sends.end(), [](const auto& s) { return s->test(); }), sends.end());
  };
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));
  int alive = 0;
  std::vector<OpTiming> timeline;
  const std::vector<ScheduleOp> ops = make_schedule(schedule_, PipelineShape{pp_, micro_batches, v}, stage_);
  // Which backward the gradient strategy hears of. One chunk: each micro-batch's (its hooks fire
  // there; "last" on the last micro-batch's). Several: each chunk's parameters get their step's
  // last gradients in that chunk's last backward, and another chunk's backwards (of other
  // micro-batches) come between those ops; the strategy is armed at the first of them and counts
  // only their gradients, so each chunk's buckets go out as its last backward ends, overlapping
  // the backwards still to run, while the ops between only accumulate.
  std::vector<size_t> last_of_chunk(static_cast<size_t>(v), 0);
  for (size_t k = 0; k < ops.size(); ++k)
    if (ops[k].kind == OpKind::Backward || ops[k].kind == OpKind::BackwardWeight)
      last_of_chunk[static_cast<size_t>(ops[k].chunk)] = k;
  const size_t first_last = *std::min_element(last_of_chunk.begin(), last_of_chunk.end());
  const auto tell_strategy = [&](size_t k, const ScheduleOp& op) {
    if (v == 1) {
      sync.before_backward(op.micro == micro_batches - 1);
      return;
    }
    if (k == first_last) sync.before_backward(true);
    if (k >= first_last) sync.count_gradients(k == last_of_chunk[static_cast<size_t>(op.chunk)]);
  };
  for (size_t k = 0; k < ops.size(); ++k) {
    const ScheduleOp& op = ops[k];
    const int c = op.chunk;
    const auto i = static_cast<size_t>(op.micro * v + c);
    const auto& chunk = chunks_[static_cast<size_t>(c)];
    const double op_start = step.seconds();
    switch (op.kind) {
      case OpKind::RecvActivation:
        inputs[i] = receive(activations_, chunk.input_shape, micro_batch, previous_rank(), activation_tag(op.micro, c, v))
                        .requires_grad_(true);
        break;
      case OpKind::Forward: {
        if (first_chunk(c) || last_chunk(c)) {
          auto batch = next_batch();
          if (first_chunk(c)) inputs[i] = to_device(batch.inputs);
          if (last_chunk(c)) labels[i] = to_device(batch.labels);
        }
        ComputeTimer t(forward_s, sync);
        outputs[i] = forward(c, inputs[i]);
        if (last_chunk(c)) {
          losses[i] = model::cross_entropy(outputs[i], labels[i], /*mean=*/true);
          loss_sum += losses[i].detach().to(at::kDouble);
        }
        stats_.peak_alive = std::max(stats_.peak_alive, ++alive);
        break;
      }
      case OpKind::SendActivation:  // to the next virtual stage: the next rank, or rank 0's next chunk
        sends.push_back(
            activations_.send_async(outputs[i].detach(), next_rank(), activation_tag(op.micro, last() ? c + 1 : c, v)));
        break;
      case OpKind::RecvGradient:
        output_grads[i] = receive(gradients_, chunk.output_shape, micro_batch, next_rank(), gradient_tag(op.micro, c, v));
        break;
      case OpKind::Backward: {
        ComputeTimer t(backward_s, sync);
        tell_strategy(k, op);
        if (last_chunk(c)) (losses[i] * loss_factor).backward();
        else outputs[i].backward(output_grads[i]);
        outputs[i] = losses[i] = output_grads[i] = labels[i] = at::Tensor();
        if (first_chunk(c)) inputs[i] = at::Tensor();  // the batch: no gradient to send back
        --alive;
        break;
      }
      case OpKind::BackwardInput: {  // the parameters' gradients wait for BackwardWeight
        ComputeTimer t(backward_s, sync);
        if (last_chunk(c)) {
          const at::Tensor scaled = losses[i] * loss_factor;
          split[i] = std::make_unique<SplitBackward>(scaled, at::ones_like(scaled), inputs[i]);
        } else {
          split[i] = std::make_unique<SplitBackward>(outputs[i], output_grads[i], inputs[i]);
        }
        outputs[i] = losses[i] = output_grads[i] = labels[i] = at::Tensor();
        break;
      }
      case OpKind::BackwardWeight: {
        ComputeTimer t(backward_s, sync);
        tell_strategy(k, op);  // the gradient hooks fire here
        split[i]->weight_gradients([&sync](const std::vector<at::Tensor>& params) { sync.before_weight_gradients(params); });
        split[i].reset();
        if (first_chunk(c)) inputs[i] = at::Tensor();
        --alive;
        break;
      }
      case OpKind::SendGradient:  // to the previous virtual stage: the previous rank's, or the last rank's previous chunk
        sends.push_back(
            gradients_.send_async(inputs[i].grad(), previous_rank(), gradient_tag(op.micro, first() ? c - 1 : c, v)));
        inputs[i] = at::Tensor();
        break;
    }
    if (is_compute(op.kind) && pp_ > 1 && !device_.is_cuda())
      timeline.push_back({static_cast<int>(op.kind), op.micro, op.chunk, op_start, step.seconds()});
    drop_completed_sends();
  }
  stats_.last_step = std::move(timeline);
  {
    ScopedTimer blocked(stats_.blocked_s);
    for (auto& s : sends) s->wait();
  }
  count_step(step.seconds(), forward_s + backward_s - compute_before, micro_batch);
  return loss_sum;
}

void Pipeline::count_step(double step_s, double compute_s, int64_t micro_batch) {
  stats_.compute_s += compute_s;
  stats_.step_s += step_s;
  stats_.activation_bytes = 0;
  for (const auto& ch : chunks_) {
    int64_t bytes = 4 * micro_batch;
    for (auto d : ch.output_shape) bytes *= d;
    stats_.activation_bytes = std::max(stats_.activation_bytes, bytes);
  }
}

bool Pipeline::replay_micro_steps() {
  if (pp_ != 1 || chunks() != 1) return false;
  // The eager path's Forward and Backward ops of one chunk that is the whole model.
  graph_ = make_micro_step_graph(
      [this](const at::Tensor& inputs, const at::Tensor& labels, const at::Tensor& loss_factor) {
        const at::Tensor loss = model::cross_entropy(forward(0, inputs), labels, /*mean=*/true);
        (loss * loss_factor).backward();
        return loss.detach();
      },
      /*warmup=*/2);
  return graph_ != nullptr;
}

// run_step's ops at pp 1, each micro-step's forward and backward through graph_.
at::Tensor Pipeline::run_graphed_step(int micro_batches, int64_t micro_batch,
                                      const std::function<data::MicroBatch()>& next_batch, GradSync& sync,
                                      const at::Tensor& loss_factor, double& forward_s) {
  Stopwatch step;
  const double compute_before = forward_s;
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));
  for (int m = 0; m < micro_batches; ++m) {
    const data::MicroBatch batch = next_batch();
    sync.before_backward(m == micro_batches - 1);
    ComputeTimer t(forward_s, sync);
    loss_sum += graph_->run(to_device(batch.inputs), to_device(batch.labels), loss_factor);
  }
  stats_.peak_alive = std::max(stats_.peak_alive, 1);
  stats_.last_step.clear();
  count_step(step.seconds(), forward_s - compute_before, micro_batch);
  return loss_sum;
}

// Forward only, chunk after chunk: from rank 0 through every rank, back to rank 0's next chunk.
std::pair<double, double> Pipeline::evaluate(int64_t n, const std::function<data::MicroBatch()>& read) {
  torch::NoGradGuard no_grad;
  at::Tensor x, labels;
  if (first() || last()) {
    auto batch = read();
    if (first()) x = to_device(batch.inputs);
    if (last()) labels = to_device(batch.labels);
  }
  const int v = chunks();
  for (int c = 0; c < v; ++c) {
    const auto& chunk = chunks_[static_cast<size_t>(c)];
    if (!first_chunk(c)) x = receive(activations_, chunk.input_shape, n, previous_rank(), activation_tag(0, c, v));
    x = forward(c, x);
    if (!last_chunk(c)) activations_.send(x.contiguous(), next_rank(), activation_tag(0, last() ? c + 1 : c, v));
  }
  if (!last()) return {0.0, 0.0};
  const double loss = model::cross_entropy(x, labels, /*mean=*/false).item<double>();
  return {loss, x.argmax(-1).eq(labels).sum().item<double>()};
}

}  // namespace trident::parallel
