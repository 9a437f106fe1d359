#include "optim/flat_params.hpp"

#include <torch/torch.h>

namespace trident::optim {

FlatParams::FlatParams(torch::nn::Module& model, torch::Device device, bool flat_gradients) {
  int64_t total = 0;
  for (const auto& item : model.named_parameters()) {
    const auto& p = item.value();
    slots.push_back({item.key(), total, p.numel(), p.sizes().vec(), p});
    total += p.numel();
  }
  numel_ = total;
  options = torch::TensorOptions().dtype(torch::kFloat).device(device);
  params = torch::empty({total}, options);
  if (flat_gradients) grads = torch::zeros({total}, options);
  torch::NoGradGuard no_grad;
  for (auto& slot : slots) {
    auto flat = params.narrow(0, slot.offset, slot.numel);
    flat.copy_(slot.param.reshape({-1}));
    slot.param.set_data(flat.view(slot.shape));
    // Autograd accumulates into an existing .grad in place, so gradients land in `grads`.
    if (flat_gradients) slot.param.mutable_grad() = grads.narrow(0, slot.offset, slot.numel).view(slot.shape);
  }
}

std::vector<int64_t> FlatParams::numels() const {
  std::vector<int64_t> v;
  for (const auto& s : slots) v.push_back(s.numel);
  return v;
}

}  // namespace trident::optim
