// ZeRO stage 3: parameters, gradients and optimizer state are all partitioned. Each rank keeps
// only its contiguous partition of the parameters. A layer's parameters are all-gathered into
// a buffer just before its forward and freed right after; gathered again when backward reaches
// the layer (a hook on the layer's output); its gradients land in a per-layer buffer that is
// reduce-scattered into the gradient partition and freed as soon as the layer's backward is done.
// While a layer computes, the gather of the next one (forward: the next layer with parameters;
// backward: the previous one) is already in flight, so at most two layers' parameters are whole
// at a time; a prefetch not used by the end of a backward is dropped before the optimizer step
// changes the partitions.
//
// "Freed" means the buffer's storage is released while its views (the parameters, and what
// autograd saved from them) stay in place; re-allocating the storage brings them all back.
#include <torch/torch.h>

#include <unordered_map>

#include "core/error.hpp"
#include "core/tensor_storage.hpp"
#include "core/timer.hpp"
#include "parallel/bucket_readiness.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/element_partition.hpp"

namespace trident::parallel {

namespace {

struct LayerSpan {
  int64_t first_param = 0, end_param = 0;  // slots
  int64_t begin = 0, end = 0;              // flat buffer
  at::Tensor params, grads;                // the gathered buffers (storage released when idle)
  bool params_live = false, grads_live = false;
};

class Zero3 final : public GradSync, public model::LayerHooks {
 public:
  Zero3(optim::FlatParams& flat, model::LayerStack& model, comm::Communicator& comm)
      : flat_(flat), model_(model), comm_(comm), partition_(flat.numel(), comm.size()) {
    range_ = partition_.range(comm.rank());
    // Layer l owns a contiguous run of slots: the next parameter_tensors_per_layer[l].
    size_t slot = 0;
    for (const size_t tensors : model::parameter_tensors_per_layer(model)) {
      LayerSpan span;
      span.first_param = static_cast<int64_t>(slot);
      span.begin = slot < flat.slots.size() ? flat.slots[slot].offset : flat.numel();
      slot += tensors;
      TRIDENT_CHECK(slot <= flat.slots.size(), "zero3: the layers own more parameters than the flat buffer holds");
      span.end_param = static_cast<int64_t>(slot);
      span.end = slot < flat.slots.size() ? flat.slots[slot].offset : flat.numel();
      layers_.push_back(span);
    }
    TRIDENT_CHECK(slot == flat.slots.size(), "zero3: parameters outside the model's layers");

    // The partition, built on the host (model::build_layers_partitioned), to the device. This
    // rank never held the whole stage.
    TRIDENT_CHECK(flat.own_partition.defined() && flat.own_partition_begin == range_.begin &&
                      flat.own_partition.numel() == range_.end - range_.begin,
                  "zero3: the partition the stage was built with is not this rank's");
    param_partition_ = flat.own_partition.to(flat.options);
    flat.own_partition = at::Tensor();
    grad_partition_ = at::zeros_like(param_partition_);
    torch::NoGradGuard no_grad;
    std::vector<Bucket> backward_order;  // readiness buckets: layers with parameters, last first
    for (size_t l = layers_.size(); l-- > 0;) {
      auto& span = layers_[l];
      if (span.end == span.begin) {  // parameters of no elements: empty ones on the device
        for (int64_t p = span.first_param; p < span.end_param; ++p) {
          auto& s = flat.slots[static_cast<size_t>(p)];
          s.param.set_data(at::empty(s.shape, flat.options));
        }
        continue;
      }
      // Views for the layer's parameters on the device; the storage, released at once, is
      // allocated and gathered into when the layer runs.
      span.params = at::empty({span.end - span.begin}, flat.options);
      span.grads = at::empty_like(span.params);
      for (int64_t p = span.first_param; p < span.end_param; ++p) {
        auto& s = flat.slots[static_cast<size_t>(p)];
        s.param.set_data(span.params.narrow(0, s.offset - span.begin, s.numel).view(s.shape));
        s.param.mutable_grad() = at::Tensor();
      }
      release_storage(span.params);
      release_storage(span.grads);
      for (int64_t p = span.first_param; p < span.end_param; ++p)
        layer_of_param_[flat.slots[static_cast<size_t>(p)].param.unsafeGetTensorImpl()] = l;
      layer_of_bucket_.push_back(l);
      backward_order.push_back({span.first_param, span.end_param, span.begin, span.end - span.begin});
    }
    readiness_ = std::make_unique<BucketReadiness>(flat, std::move(backward_order),
                                                   [this](size_t b) { reduce(layer_of_bucket_[b]); });
    model_->set_hooks(this);
  }

  ~Zero3() override { model_->set_hooks(nullptr); }

  std::string name() const override { return "zero3"; }

  // ---- forward: gather just in time (or take the prefetch), start the next one, free right after
  void before_layer(size_t l) override {
    gather(l);
    for (size_t next = l + 1; next < layers_.size(); ++next)
      if (has_params(next)) {
        prefetch(next);
        break;
      }
  }
  void after_layer(size_t l, torch::Tensor& output) override {
    auto& span = layers_[l];
    if (prefetch_) prefetch_->test();  // MPI moves a non-blocking collective on only when called
    if (span.end == span.begin) return;
    if (torch::GradMode::is_enabled() && output.requires_grad()) {
      // Runs when the gradient of this layer's output is ready, i.e. just before its backward.
      output.register_hook([this, l](const at::Tensor& grad) {
        prepare_backward(l);
        return grad;
      });
    }
    release_storage(span.params);
    span.params_live = false;
  }

  // ---- a split backward's weight gradients (zb-h1): the layer whole and its gradient buffer
  // live again, whatever happened since the backward through its input (other micro-batches'
  // forwards free its parameters, an earlier weight gradient's reduce frees its buffer).
  void before_weight_gradients(const std::vector<at::Tensor>& params) override {
    for (const auto& p : params) {
      const auto it = layer_of_param_.find(p.unsafeGetTensorImpl());
      if (it != layer_of_param_.end()) prepare_backward(it->second);
    }
  }

  // ---- backward
  void count_gradients(bool counting) override { readiness_->set_counting(counting); }
  void before_backward(bool) override {
    readiness_->flush();
    readiness_->arm();
  }
  void finish() override {
    readiness_->flush();
    drop_prefetch();
  }

  at::Tensor optimizer_params() override { return param_partition_; }
  at::Tensor optimizer_grads() override { return grad_partition_; }
  bool sharded() const override { return true; }
  bool params_partitioned() const override { return true; }
  void after_step() override {  // the next forward gathers the new values
    drop_prefetch();
    grad_partition_.zero_();
  }

  at::Tensor full_params() override {
    at::Tensor full = at::empty({flat_.numel()}, flat_.options);
    for (const auto& span : layers_) {
      if (span.end == span.begin) continue;
      auto out = full.narrow(0, span.begin, span.end - span.begin);
      comm_.all_gather_v(own_piece(param_partition_, span), out, partition_.counts(span.begin, span.end));
    }
    return full;
  }
  StateBytes state_bytes() const override { return {param_partition_.numel() * 4, grad_partition_.numel() * 4, 0}; }

 private:
  // This rank's part of a layer, as a slice of a partition-sized buffer.
  at::Tensor own_piece(const at::Tensor& partition, const LayerSpan& span) const {
    const auto piece = partition_.intersect(span.begin, span.end, comm_.rank());
    return partition.narrow(0, piece.begin - range_.begin, piece.end - piece.begin);
  }

  bool has_params(size_t l) const { return layers_[l].end > layers_[l].begin; }

  void gather(size_t l) {
    auto& span = layers_[l];
    if (!has_params(l) || span.params_live) return;
    Stopwatch watch;
    ++gathers_;
    if (prefetch_ && prefetched_ == l) {
      prefetch_->wait();
      prefetch_.reset();
      ++gathers_prefetched_;
    } else {
      drop_prefetch();  // another layer's: complete it (every rank issues the same sequence)
      allocate_storage(span.params);
      comm_.all_gather_v(own_piece(param_partition_, span), span.params, partition_.counts(span.begin, span.end));
    }
    span.params_live = true;
    exposed_seconds_ += watch.seconds();
  }

  // Starts gathering layer l unless it is whole already or another prefetch is in flight.
  void prefetch(size_t l) {
    auto& span = layers_[l];
    if (prefetch_ || span.params_live) return;
    allocate_storage(span.params);
    prefetch_ = comm_.all_gather_v_async(own_piece(param_partition_, span), span.params,
                                         partition_.counts(span.begin, span.end));
    prefetched_ = l;
  }

  // Completes an unused prefetch and frees what it gathered.
  void drop_prefetch() {
    if (!prefetch_) return;
    prefetch_->wait();
    prefetch_.reset();
    if (!layers_[prefetched_].params_live) release_storage(layers_[prefetched_].params);
  }

  void prepare_backward(size_t l) {
    gather(l);
    for (size_t previous = l; previous-- > 0;)
      if (has_params(previous)) {
        prefetch(previous);
        break;
      }
    auto& span = layers_[l];
    if (span.grads_live) return;
    allocate_storage(span.grads);
    span.grads.zero_();
    for (int64_t p = span.first_param; p < span.end_param; ++p) {
      auto& s = flat_.slots[static_cast<size_t>(p)];
      s.param.mutable_grad() = span.grads.narrow(0, s.offset - span.begin, s.numel).view(s.shape);
    }
    span.grads_live = true;
  }

  void reduce(size_t l) {
    auto& span = layers_[l];
    prepare_backward(l);  // no-op unless the layer took no part in this backward (zero gradient)
    Stopwatch watch;
    const auto piece = partition_.intersect(span.begin, span.end, comm_.rank());
    at::Tensor received = at::empty({piece.end - piece.begin}, flat_.options);
    comm_.reduce_scatter_sum_v(span.grads, received, partition_.counts(span.begin, span.end));
    own_piece(grad_partition_, span).add_(received);
    for (int64_t p = span.first_param; p < span.end_param; ++p)
      flat_.slots[static_cast<size_t>(p)].param.mutable_grad() = at::Tensor();
    release_storage(span.grads);
    release_storage(span.params);
    span.grads_live = span.params_live = false;
    ++launched_total_;
    exposed_seconds_ += watch.seconds();
  }

  optim::FlatParams& flat_;
  model::LayerStack model_;  // a handle on the stage's module
  comm::Communicator& comm_;
  ElementPartition partition_;
  data::Range range_{0, 0};
  std::vector<LayerSpan> layers_;
  std::vector<size_t> layer_of_bucket_;
  std::unordered_map<const c10::TensorImpl*, size_t> layer_of_param_;
  at::Tensor param_partition_, grad_partition_;
  std::unique_ptr<BucketReadiness> readiness_;
  std::unique_ptr<comm::Work> prefetch_;  // the gather of layer prefetched_, in flight
  size_t prefetched_ = 0;
};

}  // namespace

std::unique_ptr<GradSync> make_zero3(optim::FlatParams& flat, model::LayerStack& model, comm::Communicator& dp_comm) {
  return std::make_unique<Zero3>(flat, model, dp_comm);
}

}  // namespace trident::parallel
