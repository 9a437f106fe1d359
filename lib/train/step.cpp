#include "train/step.hpp"

#include <torch/torch.h>

#include <cmath>
#include <cstdlib>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"

namespace trident::train {

namespace {

// Batch-norm running statistics: each dp replica updates them from its own micro-batches, so
// at the end of every step they are replaced by their mean over the replicas (one all-reduce of
// the stage's float buffers, flattened). Every replica then holds the same statistics at every
// step boundary, whatever happens there: a save or an evaluation reads them and changes
// nothing, so a run that saved follows the same path, bit for bit, as one that did not, and
// the saved model is the model every rank evaluates. (DDP instead broadcasts rank 0's buffers
// before each forward, dropping the other replicas' statistics.)
void average_buffers_over_replicas(Trainer::State& s) {
  if (s.conn.dp_comm->size() == 1) return;
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> buffers;
  for (auto& b : s.stage.model->buffers())
    if (b.is_floating_point()) buffers.push_back(b);
  if (buffers.empty()) return;  // the same on every replica: they hold the same stage
  std::vector<at::Tensor> flat_views;
  for (auto& b : buffers) flat_views.push_back(b.reshape({-1}).to(at::kFloat));
  at::Tensor flat = at::cat(flat_views);
  s.conn.dp_comm->all_reduce_sum(flat);
  flat.div_(s.conn.dp_comm->size());
  int64_t offset = 0;
  for (auto& b : buffers) {
    b.copy_(flat.narrow(0, offset, b.numel()).view(b.sizes()));
    offset += b.numel();
  }
}

// Fault injection for the fp16 tests: TRIDENT_TEST_GRADIENT_OVERFLOW=STEP puts an Inf into this
// rank's gradients of that (1-based) step, as an overflowing fp16 backward would.
void overflow_if_asked(at::Tensor& grads, int64_t step) {
  const char* spec = std::getenv("TRIDENT_TEST_GRADIENT_OVERFLOW");  // read each time: tests set it per run
  if (spec && std::atoll(spec) == step && grads.numel() > 0) grads.narrow(0, 0, 1).fill_(INFINITY);
}

// The gradients' global squared norm, on the device in fp64: summed over the ZeRO partitions of
// the dp group and over the stages, so every rank has the same number.
at::Tensor global_squared_norm(Trainer::State& s, const at::Tensor& grads) {
  // One pass over the gradients (pow then sum would be two, and a buffer the size of them).
  at::Tensor squared_norm = at::linalg_vector_norm(grads, 2).to(at::kDouble).square();
  if (s.stage.grad_sync->sharded()) s.conn.dp_comm->all_reduce_sum(squared_norm);
  if (s.conn.topology->pp() > 1) s.conn.pp_comm->all_reduce_sum(squared_norm);
  return squared_norm;
}

// `found_later`: the device found it, and the host learns it at a later step.
std::string diverged_message(int64_t step, double norm, double loss, bool found_later) {
  return fmt::format("step {}: the gradient norm is {} (loss {} on this rank); {}; lower optim.lr or check the data "
                     "(data.check_finite = true)",
                     step, norm, loss,
                     found_later ? "the parameters were not updated from that step on and no checkpoint was written since"
                                 : "the parameters were not updated and no checkpoint was written for this step");
}

// The step's update with the decisions on the host: one copy of the norm and the loss per step.
void update_deciding_on_host(Trainer::State& s, int64_t step, const at::Tensor& summed_loss, double lr,
                             StepTally& tally) {
  at::Tensor params = s.stage.grad_sync->optimizer_params(), grads = s.stage.grad_sync->optimizer_grads();
  const double scale = s.stage.scaler ? s.stage.scaler->scale() : 1.0;  // the scale this step's backward used
  overflow_if_asked(grads, step);
  const at::Tensor squared_norm = global_squared_norm(s, grads);
  const at::Tensor on_host = at::stack({squared_norm, summed_loss}).cpu();
  double squares = on_host[0].item<double>();
  const double step_loss = on_host[1].item<double>() / static_cast<double>(s.stage.plan->accumulation());
  double grad_norm = 0;
  // fp16: an overflow in the scaled gradients skips the step and lowers the scale; every rank
  // sees the same global sum, so all skip together.
  if (s.stage.scaler && !s.stage.scaler->update(std::isfinite(squares))) {
    log::info("step {}: fp16 gradients overflowed; step skipped, loss scale now {}", step, s.stage.scaler->scale());
  } else {
    if (s.stage.scaler) squares /= scale * scale;
    // Every rank has the same global sum, so all stop here together, before the update and
    // before any checkpoint could store damaged weights.
    if (!std::isfinite(squares)) throw Diverged(diverged_message(step, std::sqrt(squares), step_loss, false));
    if (s.stage.optimizer->divides_gradients(params)) {
      // The fused kernel unscales and clips as it reads the gradients: one divisor, as the
      // device path's (optim/device_step.cpp), so that both give the same bits.
      grad_norm = optim::global_norm(squares);
      const double divisor = scale * optim::clip_divisor(grad_norm, s.deck.optim.clip_grad_norm);
      s.stage.optimizer->step(params, grads, lr, at::full({}, divisor, params.options().dtype(at::kFloat)));
    } else {
      if (s.stage.scaler) grads.div_(scale);
      grad_norm = optim::clip_by_global_norm(grads, squares, s.deck.optim.clip_grad_norm);
      s.stage.optimizer->step(params, grads, lr);
    }
  }
  tally.last_loss = step_loss;
  tally.last_norm = grad_norm;
  tally.epoch_loss_sum += step_loss;
}

// The same update with the decisions on the device (optim/device_step.hpp): no host wait.
void update_deciding_on_device(Trainer::State& s, int64_t step, const at::Tensor& summed_loss, double lr) {
  at::Tensor params = s.stage.grad_sync->optimizer_params(), grads = s.stage.grad_sync->optimizer_grads();
  overflow_if_asked(grads, step);
  const optim::DeviceDecision decided = s.device_step->decide(global_squared_norm(s, grads), summed_loss, step);
  s.stage.optimizer->step_unless(params, grads, lr, decided.skip, decided.grad_divisor);
}

}  // namespace

// TRIDENT_TEST_STEP_DECISIONS = host | device: tests run both ways on the CPU over the same
// (fused) optimizer kernels and compare them bit for bit. Unset: on the device where it pays.
std::string forced_step_decisions() {
  const char* forced = std::getenv("TRIDENT_TEST_STEP_DECISIONS");
  return forced ? forced : "";
}

// Where a step's decisions are made: on a GPU the host would otherwise wait for the device once
// a step; that needs the fused optimizer kernels, which skip on a device flag (LibTorch >= 2.4).
void choose_step_decisions(Trainer::State& s) {
  const std::string forced = forced_step_decisions();
  const bool on_device =
      forced.empty() ? s.conn.torch_device.is_cuda() && optim::fused_optimizers_built() : forced == "device";
  if (on_device)
    s.device_step = std::make_unique<optim::DeviceStep>(at::TensorOptions().device(s.conn.torch_device),
                                                        s.deck.optim.clip_grad_norm, s.stage.plan->accumulation(), s.stage.scaler.get());
}

// The device's decisions reach the host: the tally for the log, and a divergence stops the run
// here, before anything is logged or saved.
void read_device_step(Trainer::State& s, StepTally& tally) {
  const optim::DeviceStepReading r = s.device_step->read();
  if (r.diverged_step > 0) throw Diverged(diverged_message(r.diverged_step, r.diverged_norm, r.diverged_loss, true));
  if (r.skipped_steps > tally.skipped_steps)
    log::info("fp16 gradients overflowed in {} step(s) since the last report; those steps were skipped, loss scale "
              "now {}",
              r.skipped_steps - tally.skipped_steps, s.stage.scaler->scale());
  tally.last_loss = r.last_loss;
  tally.last_norm = r.last_norm;
  tally.epoch_loss_sum = r.loss_sum;
  tally.skipped_steps = r.skipped_steps;
}

void train_step(Trainer::State& s, int64_t step, data::Prefetcher* loader, StepTally& tally) {
  // Each micro-batch's mean loss counts 1 / (micro-batches per step x replicas) of the step's;
  // fp16's scale is a device scalar when the device decides, otherwise the host's.
  const double loss_scale = 1.0 / static_cast<double>(s.stage.plan->accumulation() * s.conn.topology->dp());
  const at::Tensor loss_factor =
      s.device_step && s.stage.scaler
          ? s.device_step->loss_factor(loss_scale)
          : at::full({}, loss_scale * (s.stage.scaler ? s.stage.scaler->scale() : 1.0), at::TensorOptions().device(s.conn.torch_device));
  const at::Tensor summed_loss =
      s.stage.pipeline->run_step(static_cast<int>(s.stage.plan->accumulation()), s.stage.plan->micro_batch(), [&] { return loader->next(); },
                           *s.stage.grad_sync, loss_factor, s.times.forward, s.times.backward);
  s.stage.grad_sync->finish();
  // A background save copies the parameters and optimizer state while this step's forward and
  // backward run; the update must not change them before it has (checkpoint.hpp, BackgroundSave).
  if (s.background_save) {
    Stopwatch watch;
    s.background_save->wait_for_snapshot();
    const double waited = watch.seconds();
    s.times.checkpoint += waited;
    s.background_copy_wait_s += waited;
    s.copy_wait_in_steps_s += waited;
  }
  const double lr = s.stage.schedule.at(step);
  ScopedTimer t(s.times.optimizer);
  torch::NoGradGuard no_grad;
  if (s.device_step)
    update_deciding_on_device(s, step + 1, summed_loss, lr);
  else
    update_deciding_on_host(s, step + 1, summed_loss, lr, tally);
  s.stage.grad_sync->after_step();
  average_buffers_over_replicas(s);
}

}  // namespace trident::train
