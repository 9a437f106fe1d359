#pragma once
// A micro-batch's backward through a stage in two parts, for the zero-bubble schedules
// (arXiv 2401.10241): B, the gradient with respect to the stage's input, which the previous stage
// is waiting for, and W, the gradients with respect to the parameters, which nobody waits for.
//
// How, on an ordinary autograd graph: the graph's nodes that lead to the stage's input are the
// activation path. Where a parameter meets it (a linear's matmul, a norm's backward: the
// "intermediate" node) B runs the node for its activation half only (autograd skips outputs
// nobody asked for) and a pre-hook keeps the gradient that arrived there. W then runs each such
// node again from the kept gradient, asking only for the parameters below it, so no part of B is
// computed twice; the parameters' gradients accumulate into .grad through the same accumulators
// (and hooks: DDP buckets, ZeRO reduce-scatters) as a whole backward's. This is what
// torch.distributed.pipelining does in stage_backward_input / stage_backward_weight.
// A stage whose input takes no gradient (the first) has no B: W is its whole backward.
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

namespace trident::parallel {

class SplitBackward {
 public:
  // B: from `root` (the stage's output, or its scaled loss) with gradient `root_grad`, fills
  // `input`'s .grad; nothing when `input` is undefined or takes no gradient. Keeps the graph.
  SplitBackward(const at::Tensor& root, const at::Tensor& root_grad, const at::Tensor& input);
  ~SplitBackward();
  SplitBackward(const SplitBackward&) = delete;
  SplitBackward& operator=(const SplitBackward&) = delete;

  // W: the parameters' gradients, accumulated into their .grad; then the graph is released.
  // `before(params)` runs just before the gradients of `params` are computed (ZeRO-3 makes them
  // whole and gives them a gradient buffer there); not when W is the whole backward, whose
  // layer hooks do that as in any backward.
  void weight_gradients(const std::function<void(const std::vector<at::Tensor>&)>& before = {});

 private:
  struct Intermediate;
  at::Tensor root_, root_grad_;  // kept when W is the whole backward
  std::vector<std::unique_ptr<Intermediate>> intermediates_;
  int reached_ = 0;  // intermediates B has reached so far
};

}  // namespace trident::parallel
