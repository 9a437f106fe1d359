#pragma once
// The GPT model's pieces that tests and the FLOP count need outside gpt.cpp.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

#include "model/describe_model.hpp"

namespace trident::model {

// Causal self-attention of q, k, v [batch, heads, T, head_dim] -> [batch, heads, T, head_dim]:
// softmax(q k^T / sqrt(head_dim), keys after the query masked) v. `causal_attention` uses
// LibTorch's fused scaled_dot_product_attention (flash / memory-efficient kernels) on 2.x and
// the explicit version on 1.13, which lacks it.
at::Tensor causal_attention_explicit(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
// What `causal_attention` keeps for the backward with the LibTorch trident is built against, on
// any device (model/describe_model.hpp).
AttentionKeeps attention_keeps();

// x W^T + b (fp32 weight and bias) as the GPT's blocks run it: through at::linear, not
// torch::nn::Linear's forward, whose functional form multiplies and then adds the bias in place
// (under autocast an fp32 bias into a bf16 product, in a mixed-type elementwise kernel 30x slower
// than a plain add: benchmarks/README.md, the H100 profile); at::linear casts the bias too and
// cuBLAS adds it in the product's epilogue. On the GPU under bf16/fp16 autocast, where
// mixed_linear_applies (an output width the column-sum kernel takes), with its backward written
// out: the weight's gradient comes out of the product in fp32, and the bias's is summed into fp32
// by trident's kernel (kernels/column_sums.hpp), not by ATen's bf16 reduction and then a cast.
bool mixed_linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
at::Tensor mixed_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// The GPT's MLP, gelu_tanh(x W_in^T + b_in) W_out^T + b_out (fp32 weights and biases): on the
// GPU under bf16/fp16 autocast, where gelu_mlp_applies (mixed_linear_applies for both layers,
// widths that are multiples of 8), the GELU runs in the epilogues of cuBLASLt's products
// (kernels/gelu_matmul.hpp) instead of in passes of its own forward and backward; elsewhere
// mixed_linear, ATen's gelu, mixed_linear.
bool gelu_mlp_applies(const at::Tensor& x, const at::Tensor& w_in, const at::Tensor& b_in, const at::Tensor& w_out,
                      const at::Tensor& b_out);
at::Tensor gelu_mlp(const at::Tensor& x, const at::Tensor& w_in, const at::Tensor& b_in, const at::Tensor& w_out,
                    const at::Tensor& b_out);

// residual + gelu_mlp(x, ...), the transformer block's last step. Where gelu_mlp applies and the
// residual is fp32 rows of the output's shape, 16-byte aligned: in fp32 out of the MLP's second
// product, which adds the residual and the fp32 bias in its epilogue
// (kernels::residual_bias_matmul) and so skips the output's rounding to 16 bits and the add's pass
// of its own (a mixed fp32 + bf16 add, 0.58 ms of a 32 ms GPT-2 small step on the H200). Elsewhere,
// or with TRIDENT_MLP_RESIDUAL_IN_PRODUCT=0 (read at each call: tests switch it), the add.
bool residual_gelu_mlp_applies(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& w_in,
                               const at::Tensor& b_in, const at::Tensor& w_out, const at::Tensor& b_out);
at::Tensor residual_gelu_mlp(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& w_in,
                             const at::Tensor& b_in, const at::Tensor& w_out, const at::Tensor& b_out);

// LayerNorm over the last dimension (fp32 weight and bias of that width) as the GPT runs it: on
// the GPU under bf16/fp16 autocast, fp32 rows straight into the 16-bit type, in trident's kernels
// (kernels/layer_norm.hpp), where mixed_layer_norm_applies (widths that are multiples of 128 up
// to 1024, contiguous and 16-byte aligned); elsewhere ATen's layer_norm, which returns fp32.
bool mixed_layer_norm_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
at::Tensor mixed_layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);

// {h, LayerNorm(h)} with h = x + branch (branch: a 16-bit layer output of x's shape; undefined:
// h is x), as mixed_layer_norm of x + branch gives them, with the same bits. Where
// residual_layer_norm_applies (mixed_layer_norm_applies, and a contiguous 8-byte aligned branch
// in autocast's type) the add runs in the LayerNorm's kernels, and backward adds the gradient
// reaching h along the stream into the LayerNorm's own input gradient there (the branch's
// 16-bit copy of it too), rather than in passes of autograd's engine.
bool residual_layer_norm_applies(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                 const at::Tensor& bias);
std::pair<at::Tensor, at::Tensor> residual_layer_norm(const at::Tensor& x, const at::Tensor& branch,
                                                      const at::Tensor& weight, const at::Tensor& bias, double eps);

// Training FLOPs per token (forward + backward) of a GPT, the convention of the PaLM paper's
// MFU: 6 N for the weight matmuls, N the parameters excluding the token and position
// embeddings (lookups, not matmuls; the untied head is counted), plus 12 L T d for attention's
// two matmuls (q k^T and scores v) over the full T x T square.
double gpt_flops_per_token(int64_t matmul_parameters, int64_t layers, int64_t seq_len, int64_t d_model);

}  // namespace trident::model
