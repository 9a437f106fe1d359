#pragma once
// The GPT model's pieces that tests and the FLOP count need outside gpt.cpp.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace trident::model {

// Causal self-attention of q, k, v [batch, heads, T, head_dim] -> [batch, heads, T, head_dim]:
// softmax(q k^T / sqrt(head_dim), keys after the query masked) v. `causal_attention` uses
// LibTorch's fused scaled_dot_product_attention (flash / memory-efficient kernels) on 2.x and
// the explicit version on 1.13, which lacks it.
at::Tensor causal_attention_explicit(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// Training FLOPs per token (forward + backward) of a GPT, the convention of the PaLM paper's
// MFU: 6 N for the weight matmuls, N the parameters excluding the token and position
// embeddings (lookups, not matmuls; the untied head is counted), plus 12 L T d for attention's
// two matmuls (q k^T and scores v) over the full T x T square.
double gpt_flops_per_token(int64_t matmul_parameters, int64_t layers, int64_t seq_len, int64_t d_model);

}  // namespace trident::model
