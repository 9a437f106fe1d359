#include "parallel/split_backward.hpp"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/error.hpp"

namespace trident::parallel {

namespace ag = torch::autograd;

namespace {

// Keeps the gradients arriving at a node the first time it runs (B), in the order nodes ran.
struct KeepGradients final : ag::FunctionPreHook {
  KeepGradients(ag::variable_list* kept, int* order, int* counter) : kept_(kept), order_(order), counter_(counter) {}
  ag::variable_list operator()(const ag::variable_list& grads) override {
    if (kept_->empty()) {
      *kept_ = grads;
      *order_ = (*counter_)++;
    }
    return grads;
  }
  ag::variable_list* kept_;
  int *order_, *counter_;
};

bool is_accumulator(const ag::Node* node) { return dynamic_cast<const ag::AccumulateGrad*>(node) != nullptr; }

}  // namespace

struct SplitBackward::Intermediate {
  std::shared_ptr<ag::Node> node;
  ag::variable_list grads;  // what arrived at the node in B
  int order = -1;           // when it ran in B
  ag::edge_list parameters;  // the accumulators below it, off the activation path
};

SplitBackward::~SplitBackward() = default;

SplitBackward::SplitBackward(const at::Tensor& root, const at::Tensor& root_grad, const at::Tensor& input) {
  const ag::Edge root_edge = ag::impl::gradient_edge(root);
  TRIDENT_CHECK(root_edge.is_valid(), "split backward: the stage's output takes no gradient");
  if (!input.defined() || !input.requires_grad()) {  // no B: W is the whole backward
    root_ = root;
    root_grad_ = root_grad;
    return;
  }
  const ag::Edge input_edge = ag::impl::gradient_edge(input);

  // Every node below the root, children before parents, and whether it leads to the input.
  std::vector<ag::Node*> post_order;
  std::unordered_map<ag::Node*, bool> leads_to_input;
  std::vector<std::pair<ag::Node*, size_t>> stack{{root_edge.function.get(), 0}};
  leads_to_input[root_edge.function.get()] = false;
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->next_edges().size()) {
      ag::Node* child = node->next_edges()[next++].function.get();
      if (child && leads_to_input.emplace(child, false).second) stack.push_back({child, 0});
      continue;
    }
    bool leads = node == input_edge.function.get();
    for (const auto& e : node->next_edges()) leads = leads || (e.function && leads_to_input[e.function.get()]);
    leads_to_input[node] = leads;
    post_order.push_back(node);
    stack.pop_back();
  }
  if (!leads_to_input[root_edge.function.get()]) {  // the output does not depend on the input
    root_ = root;
    root_grad_ = root_grad;
    return;
  }

  // The accumulators below a node of the parameter side (not leading to the input).
  std::unordered_map<ag::Node*, std::vector<ag::Node*>> accumulators_below;
  for (ag::Node* node : post_order) {
    if (leads_to_input[node]) continue;
    auto& below = accumulators_below[node];
    if (is_accumulator(node)) below.push_back(node);
    for (const auto& e : node->next_edges())
      if (e.function)
        for (ag::Node* a : accumulators_below[e.function.get()])
          if (std::find(below.begin(), below.end(), a) == below.end()) below.push_back(a);
  }
  // Intermediates: activation-path nodes with a parameter-side child. Each parameter must hang
  // below one of them only: W runs each intermediate on its own, and a parameter reached from
  // two would need the activation path between them, which W does not run.
  std::unordered_set<ag::Node*> claimed;
  for (ag::Node* node : post_order) {
    if (!leads_to_input[node] || node == input_edge.function.get()) continue;
    auto intermediate = std::make_unique<Intermediate>();
    // In graph order, each once: the order ZeRO-3 gathers in must be the same on every rank.
    std::vector<ag::Node*> mine;
    for (const auto& e : node->next_edges())
      if (e.function && !leads_to_input[e.function.get()])
        for (ag::Node* a : accumulators_below[e.function.get()])
          if (std::find(mine.begin(), mine.end(), a) == mine.end()) mine.push_back(a);
    for (ag::Node* a : mine) {
      TRIDENT_CHECK(claimed.insert(a).second,
                    "split backward: a parameter is used twice in one stage (tied weights); use parallel.schedule = 1f1b");
      intermediate->parameters.push_back(ag::Edge(a->shared_from_this(), 0));
    }
    if (intermediate->parameters.empty()) continue;
    intermediate->node = node->shared_from_this();
    intermediates_.push_back(std::move(intermediate));
  }
  for (auto& i : intermediates_)
    i->node->add_pre_hook(std::make_unique<KeepGradients>(&i->grads, &i->order, &reached_));

  // B: only the input's accumulator is asked for, so only the activation path runs.
  ag::Engine::get_default_engine().execute({root_edge}, {root_grad}, /*keep_graph=*/true, /*create_graph=*/false,
                                           /*accumulate_grad=*/true, {input_edge});
  // W in the order B reached the intermediates (the last layers' first, as a whole backward
  // would hand gradients to the buckets).
  std::sort(intermediates_.begin(), intermediates_.end(),
            [](const auto& a, const auto& b) { return a->order < b->order; });
}

void SplitBackward::weight_gradients(const std::function<void(const std::vector<at::Tensor>&)>& before) {
  auto& engine = ag::Engine::get_default_engine();
  if (root_.defined()) {
    engine.execute({ag::impl::gradient_edge(root_)}, {root_grad_}, false, false, true, {});
    root_ = root_grad_ = at::Tensor();
    return;
  }
  for (auto& i : intermediates_) {
    ag::edge_list roots;
    ag::variable_list grads;
    for (size_t k = 0; k < i->grads.size(); ++k)
      if (i->grads[k].defined()) {
        roots.emplace_back(i->node, static_cast<uint32_t>(k));
        grads.push_back(i->grads[k]);
      }
    // B did not reach it (its gradient was zero or never formed): its parameters get none,
    // as in a whole backward.
    if (roots.empty()) continue;
    if (before) {
      std::vector<at::Tensor> params;
      for (const auto& e : i->parameters) params.push_back(static_cast<ag::AccumulateGrad*>(e.function.get())->variable);
      before(params);
    }
    engine.execute(roots, grads, /*keep_graph=*/false, false, /*accumulate_grad=*/true, i->parameters);
  }
  intermediates_.clear();
}

}  // namespace trident::parallel
