// The GPT model against independent computations: attention against loops in double precision,
// causality of the whole model, its parameter count against the closed formula; a stage built
// alone or partitioned (ZeRO-3) and the output shapes the builders declare (every model kind)
// against the whole model; parallel.balance = time's layer timing (one layer at a time); recomputed
// blocks (model.recompute) against stored ones; and the token datasets against the bytes of the
// text they were made from.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "config/deck.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "core/hdf5.hpp"
#include "data/prepare.hpp"
#include "core/memory_limit.hpp"
#include "model/gpt.hpp"
#include "model/layer_timing.hpp"
#include "model/loss.hpp"
#include "model/model.hpp"
#include "optim/precision.hpp"
#include "train/host_memory_budget.hpp"
#include "../remove_tree.hpp"

using namespace trident;

namespace {

// softmax over s <= t of q_t . k_s / sqrt(d), then the weighted sum of v_s: one query at a time.
torch::Tensor attention_by_loops(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  auto out = torch::zeros_like(q);
  const int64_t batch = q.size(0), heads = q.size(1), t_len = q.size(2), dim = q.size(3);
  auto qa = q.accessor<double, 4>(), ka = k.accessor<double, 4>(), va = v.accessor<double, 4>();
  auto oa = out.accessor<double, 4>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < t_len; ++t) {
        std::vector<double> w(static_cast<size_t>(t + 1));
        double top = -1e300, total = 0;
        for (int64_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (int64_t i = 0; i < dim; ++i) dot += qa[b][h][t][i] * ka[b][h][s][i];
          w[static_cast<size_t>(s)] = dot / std::sqrt(static_cast<double>(dim));
          top = std::max(top, w[static_cast<size_t>(s)]);
        }
        for (auto& x : w) total += (x = std::exp(x - top));
        for (int64_t s = 0; s <= t; ++s)
          for (int64_t i = 0; i < dim; ++i) oa[b][h][t][i] += w[static_cast<size_t>(s)] / total * va[b][h][s][i];
      }
  return out;
}

config::Deck gpt_deck() {
  config::Deck d;
  d.model.kind = "gpt";
  d.model.layers = 3;
  d.model.heads = 4;
  d.model.d_model = 32;
  d.model.seq_len = 16;
  return d;
}

// A small model of every kind with an input it takes (odd image sizes: the cnn's poolings floor).
std::vector<std::pair<config::Deck, model::InputSpec>> every_model_kind() {
  auto mlp = gpt_deck(), cnn = gpt_deck();
  mlp.model.kind = "mlp";
  mlp.model.hidden = "24,12,8";
  cnn.model.kind = "cnn";
  return {{gpt_deck(), {{16}, 50, true}}, {mlp, {{1, 9, 7}, 10}}, {cnn, {{3, 13, 10}, 6}}};
}

// <tmp>/trident-unit-<pid>/name; the folder is removed when the test program exits.
std::string scratch(const std::string& name) {
  struct Folder {
    std::filesystem::path path = std::filesystem::temp_directory_path() / ("trident-unit-" + std::to_string(::getpid()));
    ~Folder() { trident::test_support::remove_tree(path.string()); }
  };
  static Folder folder;
  std::filesystem::create_directories(folder.path);
  return (folder.path / name).string();
}

}  // namespace

TEST(GptAttention, ExplicitMatchesLoopsInDoublePrecision) {
  torch::manual_seed(3);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  const auto q = torch::randn({2, 3, 7, 5}, opts), k = torch::randn({2, 3, 7, 5}, opts), v = torch::randn({2, 3, 7, 5}, opts);
  const auto expected = attention_by_loops(q, k, v);
  EXPECT_LT((model::causal_attention_explicit(q, k, v) - expected).abs().max().item<double>(), 1e-12);
}

// On LibTorch 2.x causal_attention is the fused kernel; it must agree with the explicit form.
TEST(GptAttention, TheKernelInUseMatchesTheExplicitForm) {
#if TORCH_VERSION_MAJOR < 2
  GTEST_SKIP() << "LibTorch " << TORCH_VERSION << ": causal_attention is the explicit form itself";
#endif
  torch::manual_seed(4);
  const auto q = torch::randn({2, 4, 33, 8}), k = torch::randn({2, 4, 33, 8}), v = torch::randn({2, 4, 33, 8});
  EXPECT_LT((model::causal_attention(q, k, v) - model::causal_attention_explicit(q, k, v)).abs().max().item<double>(),
            1e-5);
}

TEST(GptModel, LayerListAndParameterCountMatchTheFormula) {
  const auto deck = gpt_deck();
  const int64_t vocab = 50, d = 32, t = 16, layers = 3;
  torch::manual_seed(0);
  auto model = model::build(deck, {{t}, vocab, true});
  std::vector<std::string> names;
  for (const auto& l : model->layers()) names.push_back(l.name);
  EXPECT_EQ(names, (std::vector<std::string>{"embed", "block1", "block2", "block3", "head"}));
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  // embeddings V d + T d; per block 2 LayerNorms (4 d), qkv (3 d^2 + 3 d), attention output
  // (d^2 + d), MLP (4 d^2 + 4 d, 4 d^2 + d); final LayerNorm 2 d; untied head d V.
  EXPECT_EQ(params, vocab * d + t * d + layers * (12 * d * d + 13 * d) + 2 * d + d * vocab);
  const auto described = model::describe_layers(model, {{t}, vocab, true});
  EXPECT_EQ(described.front().output_shape, (std::vector<int64_t>{t, d}));
  EXPECT_EQ(described.back().output_shape, (std::vector<int64_t>{t, vocab}));
  int64_t described_params = 0;
  for (const auto& layer : described) described_params += layer.parameter_count();
  EXPECT_EQ(described_params, params);
  EXPECT_EQ(described[1].parameters.front().name.rfind("block1.", 0), 0u);
}

// The plan (trident plan, and trident train at pp > 1) takes the model's layers, parameters,
// buffers and output shapes from model::describe_model, which builds nothing: for every model kind
// and a spread of shapes it must be exactly what describe_layers finds in the built model. (The
// training checks the same on each run's model; this covers shapes no shipped deck has.)
TEST(ModelBuilders, TheDescriptionFromTheDeckIsTheBuiltModel) {
  std::vector<std::pair<config::Deck, model::InputSpec>> cases = every_model_kind();
  for (const std::string hidden : {"", "5", "300,7"}) {
    config::Deck mlp = gpt_deck();
    mlp.model.kind = "mlp";
    mlp.model.hidden = hidden;
    for (const model::InputSpec& input : {model::InputSpec{{1, 28, 28}, 10}, model::InputSpec{{7}, 3}})
      cases.push_back({mlp, input});
  }
  config::Deck cnn = gpt_deck();
  cnn.model.kind = "cnn";
  for (const model::InputSpec& input : {model::InputSpec{{1, 28, 28}, 10}, model::InputSpec{{2, 4, 5}, 2}})
    cases.push_back({cnn, input});
  for (const auto& [layers, d, heads, seq, t, vocab] :
       std::vector<std::tuple<int, int, int, int, int64_t, int64_t>>{{1, 48, 3, 8, 8, 257}, {2, 64, 8, 32, 20, 7}}) {
    config::Deck gpt = gpt_deck();
    gpt.model.layers = layers;
    gpt.model.d_model = d;
    gpt.model.heads = heads;
    gpt.model.seq_len = seq;
    cases.push_back({gpt, model::InputSpec{{t}, vocab, true}});
  }
  for (const auto& [deck, input] : cases) {
    torch::manual_seed(7);
    auto whole = model::build(deck, input);
    const auto built = model::describe_layers(whole, input);
    const auto described = model::describe_model(deck, input);
    ASSERT_EQ(described.size(), built.size()) << deck.model.kind;
    for (size_t l = 0; l < built.size(); ++l) EXPECT_EQ(model::layer_difference(built[l], described[l]), "");
  }
  // A model whose size passes int64 is refused, naming the keys (LibTorch refused it when the plan
  // built the model; summed in int64 it would wrap).
  config::Deck huge = gpt_deck();
  huge.model.kind = "mlp";
  huge.model.hidden = "3037000500,3037000500";
  try {
    model::describe_model(huge, {{1, 28, 28}, 10});
    ADD_FAILURE() << "a model past int64 was described";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("model.hidden = 3037000500,3037000500) is too large"), std::string::npos)
        << e.what();
  }
  // And the comparison sees a difference: a parameter's shape, a buffer, the output.
  auto [deck, input] = every_model_kind()[2];  // the cnn: parameters and buffers
  const auto described = model::describe_model(deck, input);
  auto changed = described[0];
  changed.parameters[0].shape[1] += 1;
  EXPECT_NE(model::layer_difference(changed, described[0]).find("block1.conv.weight [32, 4, 3, 3]"), std::string::npos);
  changed = described[0];
  changed.buffers.pop_back();
  EXPECT_NE(model::layer_difference(changed, described[0]).find("buffers"), std::string::npos);
  changed = described[2];
  changed.output_shape = {7};
  EXPECT_NE(model::layer_difference(changed, described[2]).find("outputs [7]"), std::string::npos);
}

// A pipeline stage is built alone (no rank holds the whole model): its layers must get exactly
// the weights and buffers the whole model gives them from the same seed, whichever layers are
// kept, for every model kind.
TEST(ModelBuilders, AStageBuiltAloneHasTheWholeModelsWeights) {
  for (const auto& [deck, input] : every_model_kind()) {
    torch::manual_seed(7);
    auto whole = model::build(deck, input);
    const auto described = model::describe_layers(whole, input);
    const int last = static_cast<int>(described.size()) - 1;
    for (const std::vector<int>& keep : {std::vector<int>{0, 1}, {1, last}, {last}, {0, last}}) {
      torch::manual_seed(7);
      auto stage = model::build_layers(deck, input, keep);
      ASSERT_EQ(stage->layers().size(), keep.size());
      for (size_t i = 0; i < keep.size(); ++i) {
        const auto& mine = stage->layers()[i];
        const auto& reference = whole->layers()[static_cast<size_t>(keep[i])];
        EXPECT_EQ(mine.name, reference.name);
        auto a = mine.module->parameters(), b = reference.module->parameters();
        for (const auto& t : mine.module->buffers()) a.push_back(t);
        for (const auto& t : reference.module->buffers()) b.push_back(t);
        ASSERT_EQ(a.size(), b.size());
        for (size_t p = 0; p < a.size(); ++p)
          EXPECT_TRUE(torch::equal(a[p], b[p])) << deck.model.kind << " " << mine.name << " tensor " << p;
      }
    }
    EXPECT_ANY_THROW(model::build_layers(deck, input, {last, 1}));
  }
}

// ZeRO-3's partitioned build (model::build_layers_partitioned): the partitions of a stage, laid
// end to end, are that stage's parameters as build_layers gives them from the same seed, in the
// flat buffer's order, for ranges that cut through tensors, split evenly or are empty; the stage
// keeps every parameter's name and shape with no memory behind it, and its buffers' values.
TEST(ModelBuilders, PartitionsOfAStageAreItsParametersEndToEnd) {
  for (const auto& [deck, input] : every_model_kind()) {
    const int last = static_cast<int>(model::describe_model(deck, input).size()) - 1;
    for (const std::vector<int>& keep : {std::vector<int>{0, 1, last}, {last}}) {
      torch::manual_seed(11);
      auto reference = model::build_layers(deck, input, keep);
      std::vector<torch::Tensor> flat;
      for (const auto& p : reference->parameters()) flat.push_back(p.reshape({-1}));
      const auto expected = torch::cat(flat);
      const int64_t n = expected.numel();
      for (const std::vector<int64_t>& cuts : {std::vector<int64_t>{0, n}, {0, 1, n / 3, n / 3, n - 5, n}}) {
        std::vector<torch::Tensor> pieces;
        uint64_t first_hash = 0;
        for (size_t c = 0; c + 1 < cuts.size(); ++c) {
          torch::manual_seed(11);
          auto part = model::build_layers_partitioned(deck, input, keep, cuts[c], cuts[c + 1]);
          EXPECT_EQ(part.begin, cuts[c]);
          ASSERT_EQ(part.partition.numel(), cuts[c + 1] - cuts[c]);
          pieces.push_back(part.partition);
          if (c == 0) first_hash = part.content_hash;
          EXPECT_EQ(part.content_hash, first_hash) << "the hash depends on the range";
          const auto mine = part.model->named_parameters(), theirs = reference->named_parameters();
          ASSERT_EQ(mine.size(), theirs.size());
          for (size_t p = 0; p < mine.size(); ++p) {
            EXPECT_EQ(mine[p].key(), theirs[p].key());
            EXPECT_EQ(mine[p].value().sizes(), theirs[p].value().sizes());
            EXPECT_EQ(mine[p].value().storage().nbytes(), 0u) << mine[p].key() << " still holds its values";
          }
          const auto buffers = part.model->buffers(), reference_buffers = reference->buffers();
          ASSERT_EQ(buffers.size(), reference_buffers.size());
          for (size_t b = 0; b < buffers.size(); ++b) EXPECT_TRUE(torch::equal(buffers[b], reference_buffers[b]));
        }
        EXPECT_TRUE(torch::equal(torch::cat(pieces), expected)) << deck.model.kind << " cut in " << cuts.size() - 1;
      }
      torch::manual_seed(12);  // another seed draws other weights: another hash
      const auto other = model::build_layers_partitioned(deck, input, keep, 0, 0);
      torch::manual_seed(11);
      EXPECT_NE(other.content_hash, model::build_layers_partitioned(deck, input, keep, 0, 0).content_hash);
      EXPECT_ANY_THROW(model::build_layers_partitioned(deck, input, keep, 0, n + 1));
      // Left for a checkpoint: nothing drawn, every element NaN until it is filled.
      const auto undrawn = model::build_layers_partitioned(deck, input, keep, 1, n, /*draw_weights=*/false);
      EXPECT_TRUE(undrawn.partition.isnan().all().item<bool>()) << deck.model.kind;
      EXPECT_EQ(undrawn.content_hash, 0u);
    }
  }
}

// Each layer draws from a seed of its own (model.hpp): layers of the same shape must still get
// different weights, another run.seed other weights, and the same seed the same ones.
TEST(ModelBuilders, LayersOfOneShapeDrawDifferentWeights) {
  const auto deck = gpt_deck();
  const model::InputSpec input{{16}, 50, true};
  const auto qkv = [](const model::LayerStack& model, size_t layer) {
    return model->layers()[layer].module->named_parameters()["block.qkv.weight"];
  };
  torch::manual_seed(7);
  const auto a = model::build(deck, input);
  torch::manual_seed(7);
  const auto same = model::build(deck, input);
  torch::manual_seed(8);
  const auto other = model::build(deck, input);
  EXPECT_FALSE(torch::equal(qkv(a, 1), qkv(a, 2)));
  EXPECT_FALSE(torch::equal(qkv(a, 2), qkv(a, 3)));
  EXPECT_TRUE(torch::equal(qkv(a, 2), qkv(same, 2)));
  EXPECT_FALSE(torch::equal(qkv(a, 2), qkv(other, 2)));
  // GPT-2's initialisation still: N(0, 0.02) over the 3 x 32 x 32 weights of a projection.
  EXPECT_NEAR(qkv(a, 1).std().item<double>(), 0.02, 0.002);
  EXPECT_NEAR(qkv(a, 1).mean().item<double>(), 0.0, 0.002);
}

// The plan takes each layer's output shape from its builder (no forward of the whole model):
// for every model kind it must be the shape a forward of two samples gives.
TEST(ModelBuilders, DeclaredOutputShapesAreTheForwardsOnes) {
  for (const auto& [deck, input] : every_model_kind()) {
    torch::manual_seed(0);
    auto declared = model::build(deck, input);
    std::vector<model::Layer> plain;  // the same layers, shapes left to a forward
    for (auto layer : declared->layers()) {
      EXPECT_FALSE(layer.output_shape.empty()) << deck.model.kind << " " << layer.name;
      layer.output_shape.clear();
      plain.push_back(layer);
    }
    model::LayerStack forwarded(std::move(plain));
    const auto a = model::describe_layers(declared, input), b = model::describe_layers(forwarded, input);
    ASSERT_EQ(a.size(), b.size());
    for (size_t l = 0; l < a.size(); ++l)
      EXPECT_EQ(a[l].output_shape, b[l].output_shape) << deck.model.kind << " " << a[l].name;
  }
}

// parallel.balance = time's timing (model::time_layers): one time per layer the builder makes,
// each positive, for every model kind.
TEST(LayerTiming, OneTimePerLayerOfEveryModelKind) {
  for (const auto& [deck, input] : every_model_kind()) {
    const auto layers = model::describe_model(deck, input);
    torch::manual_seed(1);
    const auto seconds = model::time_layers(deck, input, 2, torch::kCPU, torch::kFloat, 2);
    ASSERT_EQ(seconds.size(), layers.size()) << deck.model.kind;
    for (size_t l = 0; l < seconds.size(); ++l)
      EXPECT_GT(seconds[l], 0.0) << deck.model.kind << " " << layers[l].name;
  }
}

// It builds the layers one by one and holds at most two: under a host-memory budget that the
// whole model's parameters alone would pass (the rank that timed a pipelined model once built and
// held it all, outside any budget), the timing of a 12-block GPT runs: 19 MB of budget against
// 38 MB of parameters; a block is 3.2 MB, its gradients as much again.
TEST(LayerTiming, HoldsNoMoreThanTwoLayersOfTheModel) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under ASan freed memory stays resident (its quarantine): no budget of what the process holds";
#endif
  config::Deck deck = gpt_deck();
  deck.model.layers = 12;
  deck.model.d_model = 256;
  const model::InputSpec input{{16}, 64, true};
  int64_t parameters = 0;
  for (const auto& layer : model::describe_model(deck, input)) parameters += layer.parameter_count();
  const int64_t whole_bytes = parameters * 4;
  ASSERT_GT(whole_bytes, 32 << 20);
  // Once without a budget: the process's one-time costs (OpenBLAS's buffers, ~20 MB at its first
  // product) are then in what it holds before the budget is set.
  torch::manual_seed(1);
  (void)model::time_layers(deck, input, 2, torch::kCPU, torch::kFloat, 1);
  trident::release_free_heap();
  const trident::ResidentMemory resident = trident::resident_memory();
  const int64_t held = resident.anonymous + resident.shared;
  ASSERT_GT(held, 0);
  std::vector<double> seconds;
  {
    const train::HostMemoryBudget budget(held + whole_bytes / 2, 1, "half the model");
    EXPECT_THROW((void)torch::empty({parameters}), std::bad_alloc) << "the whole model's parameters fit the budget";
    torch::manual_seed(1);
    EXPECT_NO_THROW(seconds = model::time_layers(deck, input, 2, torch::kCPU, torch::kFloat, 1));
  }
  EXPECT_EQ(seconds.size(), static_cast<size_t>(deck.model.layers + 2));
}

TEST(GptModel, LogitsAtAPositionDependOnlyOnTokensUpToIt) {
  torch::manual_seed(1);
  auto model = model::build(gpt_deck(), {{16}, 50, true});
  model->eval();
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(50, {2, 16}, torch::kLong);
  auto changed = tokens.clone();
  changed.narrow(1, 9, 7).random_(50);
  const auto a = model->forward(tokens), b = model->forward(changed);
  EXPECT_EQ((a.narrow(1, 0, 9) - b.narrow(1, 0, 9)).abs().max().item<double>(), 0.0);
  EXPECT_GT((a.narrow(1, 9, 7) - b.narrow(1, 9, 7)).abs().max().item<double>(), 1e-4);
}

// model.recompute: between the embedding and the head the backward graph holds one node per block,
// which keeps the block's input alone (the stored blocks' graph holds each block's GELU, attention
// and the rest, with their activations), and the backward gives the very same loss and gradients,
// in fp32 and under bf16 autocast (whose recomputation must cast as the forward did).
TEST(GptModel, RecomputedBlocksGiveTheStoredBlocksGradients) {
  // One intra-op thread, as the trainer's tests run (run.threads = 1): with two, LibTorch 2.11's
  // bf16 CPU kernels gave two forwards of the same model and tokens different bits now and then on
  // a loaded machine (1 run in 20 with both cores busy; none in 40 with one thread).
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  struct Restore {
    int threads;
    ~Restore() { at::set_num_threads(threads); }
  } restore{threads};
  for (const bool bf16 : {false, true}) {
    std::vector<at::Tensor> losses;
    std::vector<std::vector<at::Tensor>> grads;
    for (const bool recompute : {false, true}) {
      auto deck = gpt_deck();
      deck.model.recompute = recompute;
      torch::manual_seed(3);
      auto model = model::build(deck, {{16}, 50, true});
      torch::manual_seed(5);
      const auto tokens = torch::randint(50, {4, 16}, torch::kLong), labels = torch::randint(50, {4, 16}, torch::kLong);
      at::Tensor loss;
      {
        const optim::AutocastScope autocast(bf16 ? at::kBFloat16 : at::kFloat, /*cuda=*/false);
        loss = model::cross_entropy(model->forward(tokens), labels, /*mean=*/true);
      }
      // The graph's nodes by name, each once.
      std::map<std::string, int> nodes;
      std::set<const torch::autograd::Node*> seen;
      std::vector<torch::autograd::Node*> todo{loss.grad_fn().get()};
      while (!todo.empty()) {
        torch::autograd::Node* node = todo.back();
        todo.pop_back();
        if (!node || !seen.insert(node).second) continue;
        ++nodes[node->name()];
        for (const auto& edge : node->next_edges()) todo.push_back(edge.function.get());
      }
      int recomputed = 0, gelu = 0;
      for (const auto& [name, count] : nodes) {
        if (name.find("RecomputedLayer") != std::string::npos) recomputed += count;
        if (name.find("Gelu") != std::string::npos) gelu += count;
      }
      EXPECT_EQ(recomputed, recompute ? 3 : 0) << "bf16 " << bf16;
      EXPECT_EQ(gelu, recompute ? 0 : 3) << "bf16 " << bf16 << ": a block's GELU in the graph";
      loss.backward();
      losses.push_back(loss.detach());
      grads.emplace_back();
      for (const auto& p : model->parameters()) grads.back().push_back(p.grad().clone());
    }
    EXPECT_TRUE(at::equal(losses[0], losses[1])) << "bf16 " << bf16;
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (size_t i = 0; i < grads[0].size(); ++i)
      EXPECT_TRUE(at::equal(grads[0][i], grads[1][i]))
          << "bf16 " << bf16 << ", parameter " << i << ": " << (grads[0][i] - grads[1][i]).abs().max().item<double>();
  }
}

TEST(TokenDataset, SamplesAreWindowsOfTheTextBytes) {
  // A folder like /usr/share/games/fortunes: a text file, a binary index, a symbolic link.
  const std::string dir = scratch("corpus"), out = scratch("corpus.h5");
  std::filesystem::create_directories(dir);
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  std::ofstream(dir + "/a") << text;
  std::ofstream(dir + "/a.dat") << std::string("x\0y", 3);
  std::filesystem::remove(dir + "/a.u8");
  std::filesystem::create_symlink("a", dir + "/a.u8");
  data::prepare_text(dir, 0.1, out);
  data::SplitReader train(out, "train", 8), test(out, "test", 8);
  EXPECT_TRUE(train.tokens());
  EXPECT_EQ(train.classes(), 256);
  EXPECT_EQ(train.size(), (900 - 1) / 8);  // the first 90% of the bytes
  EXPECT_EQ(test.size(), (100 - 1) / 8);
  torch::Tensor inputs, labels;
  train.read({5, 0, 111}, &inputs, &labels);
  ASSERT_EQ(inputs.sizes(), (std::vector<int64_t>{3, 8}));
  const int64_t rows[] = {5, 0, 111};
  for (int r = 0; r < 3; ++r)
    for (int64_t j = 0; j < 8; ++j) {
      EXPECT_EQ(inputs[r][j].item<int64_t>(), static_cast<unsigned char>(text[static_cast<size_t>(rows[r] * 8 + j)]));
      EXPECT_EQ(labels[r][j].item<int64_t>(), static_cast<unsigned char>(text[static_cast<size_t>(rows[r] * 8 + j + 1)]));
    }
  test.read({0}, &inputs, nullptr);
  EXPECT_EQ(inputs[0][0].item<int64_t>(), static_cast<unsigned char>(text[900]));
  EXPECT_EQ(train.find_bad_values(0, train.size()), "");
}

TEST(TokenDataset, ATokenAtOrAboveTheVocabularyIsFoundWithItsPosition) {
  const std::string out = scratch("random_tokens.h5");
  data::SyntheticTokensSpec spec;
  spec.train_tokens = 5000;
  spec.test_tokens = 100;
  spec.vocab = 1000;
  data::prepare_synthetic_tokens(spec, out);
  {
    // Claim a smaller vocabulary than the tokens use.
    hdf5::Hid file(H5Fopen(out.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    hdf5::write_int_attribute(file, "vocab", 10);
  }
  data::SplitReader train(out, "train", 32);
  EXPECT_EQ(train.classes(), 10);
  const std::string message = train.find_bad_values(0, train.size());
  EXPECT_NE(message.find("/train/tokens: token "), std::string::npos) << message;
  EXPECT_NE(message.find("outside [0, 10)"), std::string::npos) << message;
}
