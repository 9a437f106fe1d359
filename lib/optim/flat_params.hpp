#pragma once
// All parameters of a model in one contiguous buffer, and all gradients in another, laid out
// alike. The model's parameters and their .grad become views into them, so the optimizer runs
// a handful of vector ops over the whole model and the gradient all-reduce works in place.
#include <torch/nn/module.h>

#include <string>
#include <vector>

namespace trident::optim {

struct ParamSlot {
  std::string name;
  int64_t offset = 0, numel = 0;
  std::vector<int64_t> shape;
  torch::Tensor param;  // the model's parameter (a view into FlatParams::params)
};

class FlatParams {
 public:
  // Buffers on `device`; the model's parameters are copied in from wherever they are (the host,
  // as built), one tensor at a time, each freed once copied: never two whole copies at once. A
  // stage may have none.
  // `flat_gradients` false (ZeRO-2 and 3, which keep only their gradient partition): no
  // whole-model gradient buffer, which they would free at once, is allocated (4 bytes a parameter
  // less at start-up), and each .grad stays undefined.
  // `params_on_host` (ZeRO-3, which moves only its partition to the device and then releases
  // `params`): `params` is laid out on the host, so the device never holds the whole stage.
  FlatParams(torch::nn::Module& model, torch::Device device, bool flat_gradients = true, bool params_on_host = false);
  torch::TensorOptions options;  // fp32 on `device`: every buffer laid out like these
  torch::Tensor params;  // [numel], fp32 (on the host when params_on_host)
  torch::Tensor grads;   // [numel], fp32; never reset to undefined, only zeroed (undefined without flat_gradients)
  std::vector<ParamSlot> slots;

  int64_t numel() const { return numel_; }  // also once ZeRO-3 has released `params`
  std::vector<int64_t> numels() const;
  void zero_grad() { grads.zero_(); }

 private:
  int64_t numel_ = 0;
};

}  // namespace trident::optim
