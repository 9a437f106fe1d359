#include "optim/flat_params.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/error.hpp"
#include "core/memory_limit.hpp"

namespace trident::optim {

void FlatParams::lay_out(torch::nn::Module& model, torch::Device device) {
  int64_t total = 0;
  for (const auto& item : model.named_parameters()) {
    const auto& p = item.value();
    slots.push_back({item.key(), total, p.numel(), p.sizes().vec(), p});
    total += p.numel();
  }
  numel_ = total;
  options = torch::TensorOptions().dtype(torch::kFloat).device(device);
}

FlatParams::FlatParams(torch::nn::Module& model, torch::Device device, torch::Tensor partition, int64_t partition_begin)
    : own_partition(std::move(partition)), own_partition_begin(partition_begin) {
  lay_out(model, device);
  TRIDENT_CHECK(own_partition.device().is_cpu() && own_partition.dim() == 1 && partition_begin >= 0 &&
                    partition_begin + own_partition.numel() <= numel_,
                fmt::format("FlatParams: a partition of {} elements from {} of a layout of {}", own_partition.numel(),
                            partition_begin, numel_));
}

FlatParams::FlatParams(torch::nn::Module& model, torch::Device device, bool flat_gradients) {
  lay_out(model, device);
  params = torch::empty({numel_}, options);
  if (flat_gradients) grads = torch::zeros({numel_}, options);
  torch::NoGradGuard no_grad;
  int64_t freed_on_host = 0;  // since the heap was last trimmed
  for (auto& slot : slots) {
    auto flat = params.narrow(0, slot.offset, slot.numel);
    flat.copy_(slot.param.reshape({-1}));
    if (slot.param.device().is_cpu()) freed_on_host += slot.param.nbytes();
    slot.param.set_data(flat.view(slot.shape));  // the copied tensor is freed (nothing else holds it)
    // Freed into malloc's heap, the copies would add up to a second resident copy of the stage.
    if (freed_on_host >= (int64_t{64} << 20)) {
      release_free_heap();
      freed_on_host = 0;
    }
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
