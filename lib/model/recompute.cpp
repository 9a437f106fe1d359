#include "model/recompute.hpp"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/autograd.h>

#include <atomic>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "optim/precision.hpp"

namespace trident::model {

namespace {

std::atomic<int64_t> recomputed{0};

// Inputs: x, the layer's parameters, then what is not a tensor; backward returns one gradient
// for each, in that order (undefined where none). custom_function runs forward with autograd off,
// so nothing inside the layer is recorded: the node keeps x (and the parameters, through their
// edges) alone.
class RecomputedLayer : public torch::autograd::Function<RecomputedLayer> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, at::TensorList params,
                            torch::nn::SequentialImpl* layer) {
    ctx->save_for_backward({x});
    // The layer, by address: saved_data holds IValues only, and the module outlives every step's
    // graph (recomputed_forward's contract; the stacks and their slices share it).
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    ctx->saved_data["autocast"] = static_cast<int64_t>(optim::active_autocast_type(x.is_cuda()));
    ctx->saved_data["params"] = static_cast<int64_t>(params.size());
    // Autocast's cache of cast weights off for this forward: casts made here record no autograd
    // edge, and a later use of the same weight under the same autocast scope with autograd on
    // (the recomputation, were backward called inside the scope) would take them and give the
    // weight no gradient.
    const bool caching = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    at::Tensor y;
    try {
      y = layer->forward(x);
    } catch (...) {
      at::autocast::set_autocast_cache_enabled(caching);
      throw;
    }
    at::autocast::set_autocast_cache_enabled(caching);
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const at::Tensor saved = ctx->get_saved_variables()[0];
    auto* layer = reinterpret_cast<torch::nn::SequentialImpl*>(ctx->saved_data["layer"].toInt());
    const auto autocast = static_cast<c10::ScalarType>(ctx->saved_data["autocast"].toInt());
    const auto param_count = static_cast<size_t>(ctx->saved_data["params"].toInt());
    // The layer again, recorded this time, from a leaf copy of its input; then the gradients of
    // its output with respect to what asked for one.
    at::Tensor x = saved.detach().requires_grad_(ctx->needs_input_grad(0));
    at::Tensor y;
    const std::vector<at::Tensor> params = layer->parameters();
    TRIDENT_CHECK(params.size() == param_count,
                  "recomputed layer: its parameters changed between forward and backward");
    {
      torch::AutoGradMode recording(true);
      const optim::AutocastScope autocast_scope(autocast, saved.is_cuda());
      y = layer->forward(x);
    }
    recomputed.fetch_add(1, std::memory_order_relaxed);
    std::vector<at::Tensor> wanted;
    std::vector<size_t> slot;  // where each of `wanted`'s gradients goes in the result
    if (ctx->needs_input_grad(0)) {
      wanted.push_back(x);
      slot.push_back(0);
    }
    for (size_t p = 0; p < params.size(); ++p)
      if (ctx->needs_input_grad(1 + p) && params[p].requires_grad()) {
        wanted.push_back(params[p]);
        slot.push_back(1 + p);
      }
    torch::autograd::variable_list result(1 + params.size() + 1);  // + the layer's pointer
    if (wanted.empty() || !y.requires_grad()) return result;
    const auto grads = torch::autograd::grad({y}, wanted, {grad_outputs[0]}, /*retain_graph=*/false,
                                             /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t i = 0; i < grads.size(); ++i) {
      // Every parameter of a block takes part in its forward: one without a gradient here would
      // be a recomputation that did not reach it, not a zero gradient.
      TRIDENT_CHECK(grads[i].defined() || slot[i] == 0,
                    "recomputed layer: parameter " + std::to_string(slot[i] - 1) + " got no gradient");
      result[slot[i]] = grads[i];
    }
    return result;
  }
};

}  // namespace

int64_t recomputations() { return recomputed.load(std::memory_order_relaxed); }

at::Tensor recomputed_forward(const torch::nn::Sequential& layer, const at::Tensor& x) {
  const std::vector<at::Tensor> params = layer->parameters();
  return RecomputedLayer::apply(x, at::TensorList(params), layer.ptr().get());
}

}  // namespace trident::model
