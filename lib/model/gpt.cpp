#include "model/gpt.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/utils.h>
#include <torch/version.h>

#include <cmath>
#include <limits>

#include "model/model.hpp"

namespace trident::model {

at::Tensor causal_attention_explicit(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t t = q.size(-2);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).mul_(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  const at::Tensor future = at::ones({t, t}, q.options().dtype(at::kBool)).triu_(1);
  scores.masked_fill_(future, -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), v);
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
  return causal_attention_explicit(q, k, v);
#endif
}

double gpt_flops_per_token(int64_t matmul_parameters, int64_t layers, int64_t seq_len, int64_t d_model) {
  return 6.0 * static_cast<double>(matmul_parameters) +
         12.0 * static_cast<double>(layers) * static_cast<double>(seq_len) * static_cast<double>(d_model);
}

namespace {

// x W^T + b through at::linear, not torch::nn::Linear's forward: the C++ frontend's functional
// linear multiplies and then adds the bias in place, which under autocast adds an fp32 bias into
// a bf16 product in a mixed-type elementwise kernel (benchmarks/README.md, the H100 profile);
// at::linear casts the bias too and lets cuBLAS add it in the matrix product's epilogue.
torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return at::linear(x, layer->weight, layer->bias);
}

// Token ids [batch, T] -> token embedding + position embedding [batch, T, d_model].
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t vocab, int64_t seq_len, int64_t d_model)
      : token(register_module("token", torch::nn::Embedding(vocab, d_model))),
        position(register_module("position", torch::nn::Embedding(seq_len, d_model))) {}
  torch::Tensor forward(const torch::Tensor& tokens) {
    const auto positions = torch::arange(tokens.size(1), tokens.options().dtype(torch::kLong));
    return token(tokens) + position(positions);
  }
  torch::nn::Embedding token, position;
};
TORCH_MODULE(Embedding);

// One pre-LayerNorm transformer block: x + attention(norm(x)), then x + mlp(norm(x)), the MLP
// 4 d_model wide with tanh-approximated GELU (GPT-2's).
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t d_model, int64_t heads)
      : heads_(heads),
        attn_norm(register_module("attn_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})))),
        qkv(register_module("qkv", torch::nn::Linear(d_model, 3 * d_model))),
        attn_out(register_module("attn_out", torch::nn::Linear(d_model, d_model))),
        mlp_norm(register_module("mlp_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})))),
        mlp_in(register_module("mlp_in", torch::nn::Linear(d_model, 4 * d_model))),
        mlp_out(register_module("mlp_out", torch::nn::Linear(4 * d_model, d_model))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
    // [b, t, 3d] -> q, k, v [b, heads, t, head_dim], views of the projection. unbind along the
    // [b, t, 3, heads, head_dim] axis of the three: its backward stacks the three gradients
    // straight into the projection's layout in one copy (three selects would each fill a zero
    // tensor and add into it; unbinding a permuted view would need a second copy back).
    const auto qkv_heads = linear(qkv, attn_norm(x)).view({b, t, 3, heads_, d / heads_}).unbind(2);
    const auto y = causal_attention(qkv_heads[0].transpose(1, 2), qkv_heads[1].transpose(1, 2),
                                    qkv_heads[2].transpose(1, 2))
                       .transpose(1, 2)
                       .reshape({b, t, d});
    auto h = x + linear(attn_out, y);
    return h + linear(mlp_out, at::gelu(linear(mlp_in, mlp_norm(h)), "tanh"));
  }

 private:
  int64_t heads_;

 public:
  torch::nn::LayerNorm attn_norm;
  torch::nn::Linear qkv, attn_out;
  torch::nn::LayerNorm mlp_norm;
  torch::nn::Linear mlp_in, mlp_out;
};
TORCH_MODULE(Block);

}  // namespace

// embed, block1..blockL, head (final LayerNorm + untied linear to the vocabulary): L + 2
// layers for a pipeline to cut. Logits [batch, T, vocab].
void build_gpt(const config::Deck& deck, const InputSpec& input, const LayerSink& emit) {
  const auto& m = deck.model;
  const int64_t vocab = input.classes, d = m.d_model;
  // GPT-2's initialisation: N(0, 0.02) weights, zero biases, and the projections that add into
  // the residual stream scaled by 1/sqrt(2L) so its variance does not grow with depth. Each
  // layer is initialised as soon as it is built, before the next draws its numbers.
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(m.layers));
  const int64_t t = input.sample_shape.at(0);
  const auto initialised = [&](std::string name, torch::nn::Sequential module, std::vector<int64_t> output_shape) {
    torch::NoGradGuard no_grad;
    for (const auto& p : module->named_parameters()) {
      const auto& key = p.key();
      if (key.find("norm.") != std::string::npos) continue;  // LayerNorm keeps ones and zeros
      if (key.size() >= 4 && key.compare(key.size() - 4, 4, "bias") == 0) {
        p.value().zero_();
      } else {
        const bool residual = key.find("attn_out.") != std::string::npos || key.find("mlp_out.") != std::string::npos;
        p.value().normal_(0.0, residual ? residual_std : 0.02);
      }
    }
    return Layer{std::move(name), std::move(module), std::move(output_shape)};
  };
  torch::nn::Sequential embed;
  embed->push_back("embedding", Embedding(vocab, m.seq_len, d));
  emit(initialised("embed", embed, {t, d}));
  for (int64_t l = 1; l <= m.layers; ++l) {
    torch::nn::Sequential block;
    block->push_back("block", Block(d, m.heads));
    emit(initialised("block" + std::to_string(l), block, {t, d}));
  }
  torch::nn::Sequential head;
  head->push_back("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  head->push_back("linear", torch::nn::Linear(torch::nn::LinearOptions(d, vocab).bias(false)));
  emit(initialised("head", head, {t, vocab}));
}

}  // namespace trident::model
