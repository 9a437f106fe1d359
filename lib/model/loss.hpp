#pragma once
// Cross-entropy of logits [n, classes] against labels [n], or of per-position logits
// [n, T, vocab] against next tokens [n, T] (a GPT), each target weighted alike; the mean or the
// sum over targets.
//
// fp32 logits go through torch's cross_entropy. bf16/fp16 logits (the last layer under autocast)
// are never copied to fp32 whole: GPT-2's logits for 16 × 1024 tokens are 3.3 GB in fp32, and
// torch's cross_entropy would also keep its fp32 log-softmax of that size for backward. Instead
// the loss is computed a slice of rows at a time in fp32 (log-sum-exp and the label's logit), and
// backward rebuilds softmax - one_hot slice by slice from the saved low-precision logits and the
// per-row log-sum-exp: what stays alive is the logits themselves plus 4 bytes a row.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace trident::model {

// On the GPU, bf16/fp16 logits go through trident's fused kernels instead (kernels/cross_entropy.hpp):
// the same quantities, one pass over the logits each way.
bool fused_cross_entropy_applies(const at::Tensor& logits);

// `slice_elements`: fp32 elements per slice of low-precision logits (rows × classes; at least a row).
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& labels, bool mean,
                         int64_t slice_elements = int64_t{1} << 25);

}  // namespace trident::model
