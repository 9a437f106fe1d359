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
  // `flat_gradients` false (ZeRO-2, which keeps only its gradient partition): no whole-model
  // gradient buffer, which it would free at once, is allocated (4 bytes a parameter less at
  // start-up), and each .grad stays undefined.
  FlatParams(torch::nn::Module& model, torch::Device device, bool flat_gradients = true);
  // ZeRO-3's, for a stage built partitioned (model::build_layers_partitioned): the model's
  // parameters hold no values and `partition` (on the host) holds this rank's elements of the
  // layout, from `partition_begin` on. Neither `params` nor `grads` is allocated: ZeRO-3 takes
  // the partition over (own_partition).
  FlatParams(torch::nn::Module& model, torch::Device device, torch::Tensor partition, int64_t partition_begin);
  torch::TensorOptions options;  // fp32 on `device`: every buffer laid out like these
  torch::Tensor params;  // [numel], fp32 (undefined when built from a partition)
  torch::Tensor grads;   // [numel], fp32; never reset to undefined, only zeroed (undefined without flat_gradients)
  // Elements [own_partition_begin, + own_partition.numel()) of the layout, on the host: what the
  // partition constructor was given, until ZeRO-3 takes it.
  torch::Tensor own_partition;
  int64_t own_partition_begin = 0;
  std::vector<ParamSlot> slots;

  int64_t numel() const { return numel_; }  // also where `params` is undefined (ZeRO-3)
  std::vector<int64_t> numels() const;
  void zero_grad() { grads.zero_(); }

 private:
  void lay_out(torch::nn::Module& model, torch::Device device);  // slots, numel_ and options
  int64_t numel_ = 0;
};

}  // namespace trident::optim
