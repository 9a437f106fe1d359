// cuBLASLt products with a GELU epilogue (kernels/gelu_matmul.hpp). cuBLASLt is column-major: a
// row-major [r, c] matrix is its [c, r] column-major transpose, so y = x w^T (row-major
// [rows, out]) is computed as y^T = w x^T, [out, rows] column-major: A = w read transposed (its
// column-major form is [in, out]), B = x as it is ([in, rows]); the bias runs along D's rows
// (out), as the epilogue adds it. Backward, grad^T = w2^T g^T, [out, rows]: A = w2 as it is
// ([out, width] column-major), B = g as it is ([width, rows]). The pre-activation matrix has D's
// layout in both (leading dimension out).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "comm/cuda_check.hpp"
#include "kernels/gelu_matmul.hpp"

namespace trident::kernels {

namespace {

constexpr int64_t kWorkspaceBytes = 32 << 20;  // what cuBLAS itself sets aside on Hopper
constexpr uint32_t kAlignment = 16;           // the least that callers guarantee, and ask for

[[noreturn]] void fail_cublaslt(cublasStatus_t status, const char* call, const char* file, int line) {
  fatal_one(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
            cublasLtGetStatusName(status) + ": " + cublasLtGetStatusString(status));
}

#define CUBLASLT_CHECK(call)                                                             \
  do {                                                                                   \
    const cublasStatus_t trident_lt_rc_ = (call);                                        \
    if (trident_lt_rc_ != CUBLAS_STATUS_SUCCESS) fail_cublaslt(trident_lt_rc_, #call, __FILE__, __LINE__); \
  } while (0)

cublasLtHandle_t handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t created = nullptr;
    CUBLASLT_CHECK(cublasLtCreate(&created));
    return created;
  }();
  return h;
}

cudaDataType_t data_type(HalfType type) { return type == HalfType::bf16 ? CUDA_R_16BF : CUDA_R_16F; }

// D [m, n] (column-major, leading dimension m) = op(A) op(B) with the epilogue, A [k, m] read
// transposed (transpose_a) or [m, k], B [n, k] read transposed (transpose_b) or [k, n]; `aux`
// null or the pre-activation (D's layout); `bias` null, or [m] (added), or for BGRADB [n] (the
// bias gradient written, fp32 like D: BGRADB is asked for with an fp32 D only). D in the 16-bit
// type, or fp32 (float_d).
struct Product {
  HalfType type;
  cublasLtEpilogue_t epilogue;
  bool transpose_a;
  int64_t m, n, k;
  const void *a, *b, *bias;
  void *d, *aux, *workspace;
  int device;
  cudaStream_t stream;
  bool transpose_b = false, float_d = false;
  const void* c = nullptr;  // added to the product (beta 1), D's type and layout; or none (beta 0)
};

// One descriptor set for one call (host objects, microseconds), destroyed on the way out.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  ~Descriptors() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <typename T>
void set(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof(value)));
}

cublasStatus_t launch(const Product& p, const Descriptors& desc, const cublasLtMatmulAlgo_t& algo) {
  const float alpha = 1.f, beta = p.c ? 1.f : 0.f;
  return cublasLtMatmul(handle(), desc.op, &alpha, p.a, desc.a, p.b, desc.b, &beta, p.c ? p.c : p.d, desc.d, p.d,
                        desc.d, &algo, p.workspace, kWorkspaceBytes, p.stream);
}

// TRIDENT_LT_FASTEST=1 (read when a shape is first seen): each shape's product is timed once with
// each of the heuristic's first 16 candidates, their times printed to stderr, and the fastest kept
// for the run, where the heuristic's first is used otherwise. Exploratory, to measure: a timed
// choice can differ between runs, and so the bits of the training (a resume would not match the
// run it continues), which the heuristic's fixed choice does not. Not while a graph is captured.
bool fastest_wanted(cudaStream_t stream) {
  const char* on = std::getenv("TRIDENT_LT_FASTEST");
  if (!on || std::string(on) != "1") return false;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  return capture == cudaStreamCaptureStatusNone;
}

template <typename T>
T config_value(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  T value{};
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written);
  return value;
}

// The candidate that ran the product fastest (mean of 5 runs after one), each one's time printed.
cublasLtMatmulAlgo_t fastest(const Product& p, const Descriptors& desc,
                             const std::vector<cublasLtMatmulHeuristicResult_t>& candidates) {
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  const double flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  size_t best = 0;
  float best_ms = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const auto& algo = candidates[i].algo;
    if (launch(p, desc, algo) != CUBLAS_STATUS_SUCCESS) continue;
    constexpr int kRuns = 5;
    CUDA_CHECK(cudaEventRecord(start, p.stream));
    for (int r = 0; r < kRuns; ++r) CUBLASLT_CHECK(launch(p, desc, algo));
    CUDA_CHECK(cudaEventRecord(stop, p.stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    ms /= kRuns;
    std::fprintf(stderr,
                 "cublaslt candidate: epilogue %d m %lld n %lld k %lld: #%zu algo %d tile %d stages %d split-k %d: "
                 "%.1f us, %.0f TFLOP/s\n",
                 static_cast<int>(p.epilogue), static_cast<long long>(p.m), static_cast<long long>(p.n),
                 static_cast<long long>(p.k), i, config_value<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID),
                 static_cast<int>(config_value<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID)),
                 static_cast<int>(config_value<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID)),
                 config_value<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), 1e3 * ms, flops / (ms * 1e9));
    if (best_ms < 0 || ms < best_ms) best = i, best_ms = ms;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::fprintf(stderr, "cublaslt candidate: epilogue %d m %lld n %lld k %lld: #%zu kept\n", static_cast<int>(p.epilogue),
               static_cast<long long>(p.m), static_cast<long long>(p.n), static_cast<long long>(p.k), best);
  return candidates[best].algo;
}

// The heuristic's first choice (or the fastest, above), once per shape: asking costs tens of
// microseconds of host time, 24 times a GPT-2 small step. None where cuBLASLt has no algorithm for
// it (also remembered).
std::optional<cublasLtMatmulAlgo_t> algorithm(const Product& p, const Descriptors& desc) {
  using Key = std::tuple<int, int, int, int, int, int, int64_t, int64_t, int64_t, int>;
  static std::mutex mutex;
  static std::map<Key, std::optional<cublasLtMatmulAlgo_t>> chosen;
  const Key key{static_cast<int>(p.type), static_cast<int>(p.epilogue), p.transpose_a ? 1 : 0, p.transpose_b ? 1 : 0,
                p.float_d ? 1 : 0, p.c ? 1 : 0, p.m, p.n, p.k, p.device};
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto found = chosen.find(key); found != chosen.end()) return found->second;
  cublasLtMatmulPreference_t preference = nullptr;
  CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                       sizeof(workspace));
  for (const auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(preference, attribute, &kAlignment, sizeof(kAlignment));
  const bool timed = fastest_wanted(p.stream);
  std::vector<cublasLtMatmulHeuristicResult_t> results(timed ? 16 : 1);
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle(), desc.op, desc.a, desc.b, desc.d, desc.d,
                                                               preference, static_cast<int>(results.size()),
                                                               results.data(), &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) CUBLASLT_CHECK(status);
  std::optional<cublasLtMatmulAlgo_t> algo;
  if (status == CUBLAS_STATUS_SUCCESS && found > 0) {
    results.resize(static_cast<size_t>(found));
    algo = timed && found > 1 ? fastest(p, desc, results) : results[0].algo;
  }
  chosen.emplace(key, algo);
  return algo;
}

// The product, or false (nothing queued) where cuBLASLt has no algorithm for it.
bool try_run(const Product& p) {
  const cudaDataType_t type = data_type(p.type);
  Descriptors desc;
  CUBLASLT_CHECK(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(p.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N));
  set(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(p.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N));
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(p.epilogue));
  if (p.bias) set(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  if (p.bias && p.float_d)  // an fp32 bias (read, or BGRADB's written): D's type, the default, said outright
    set(desc.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_32F));
  if (p.aux) {
    set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
    set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.m);
  }
  if (p.transpose_a)
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&desc.a, type, p.k, p.m, p.k));
  else
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&desc.a, type, p.m, p.k, p.m));
  if (p.transpose_b)
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&desc.b, type, p.n, p.k, p.n));
  else
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&desc.b, type, p.k, p.n, p.k));
  CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&desc.d, p.float_d ? CUDA_R_32F : type, p.m, p.n, p.m));
  const std::optional<cublasLtMatmulAlgo_t> algo = algorithm(p, desc);
  if (!algo) return false;
  CUBLASLT_CHECK(launch(p, desc, *algo));
  return true;
}

void run(const Product& p) {
  if (!try_run(p))
    fatal_one("gelu_matmul: cuBLASLt has no algorithm for epilogue " + std::to_string(p.epilogue) + " at m " +
              std::to_string(p.m) + ", n " + std::to_string(p.n) + ", k " + std::to_string(p.k));
}

std::atomic<int64_t> weight_bias_products{0}, residual_products{0};

void check(bool ok, const char* what, int64_t rows, int64_t in, int64_t out) {
  if (!ok)
    fatal_one(std::string(what) + ": rows " + std::to_string(rows) + ", widths " + std::to_string(in) + " and " +
              std::to_string(out) + ": needs multiples of 8 and 16-byte aligned matrices");
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kAlignment == 0; }

}  // namespace

bool gelu_matmul_supports(int64_t rows, int64_t in, int64_t out) {
  return rows > 0 && in > 0 && out > 0 && in % 8 == 0 && out % 8 == 0 && rows <= INT32_MAX && in <= INT32_MAX &&
         out <= INT32_MAX;
}

int64_t gelu_matmul_workspace_bytes() { return kWorkspaceBytes; }

void bias_gelu_matmul(HalfType type, const void* x, const void* w, const void* bias, int64_t rows, int64_t in,
                      int64_t out, void* y, void* pre, void* workspace, int device, void* stream) {
  check(gelu_matmul_supports(rows, in, out) && aligned(x) && aligned(w) && aligned(bias) && aligned(y) &&
            aligned(pre) && aligned(workspace),
        "bias_gelu_matmul", rows, in, out);
  run({type, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, /*transpose_a=*/true, out, rows, in, w, x, bias, y, pre, workspace,
       device, static_cast<cudaStream_t>(stream)});
}

void gelu_grad_matmul(HalfType type, const void* g, const void* w2, const void* pre, int64_t rows, int64_t width,
                      int64_t out, void* grad_pre, void* workspace, int device, void* stream) {
  check(gelu_matmul_supports(rows, width, out) && aligned(g) && aligned(w2) && aligned(pre) && aligned(grad_pre) &&
            aligned(workspace),
        "gelu_grad_matmul", rows, width, out);
  run({type, CUBLASLT_EPILOGUE_DGELU, /*transpose_a=*/false, out, rows, width, w2, g, nullptr, grad_pre,
       const_cast<void*>(pre), workspace, device, static_cast<cudaStream_t>(stream)});
}

// y^T [out, rows] (column-major, leading dimension out) = w x^T + bias + residual^T: A = w read
// transposed, B = x as it is, as bias_gelu_matmul's; C = residual, D = y, both fp32.
void residual_bias_matmul(HalfType type, const void* x, const void* w, const float* bias, const float* residual,
                          int64_t rows, int64_t in, int64_t out, float* y, void* workspace, int device, void* stream) {
  check(gelu_matmul_supports(rows, in, out) && aligned(x) && aligned(w) && aligned(bias) && aligned(residual) &&
            aligned(y) && aligned(workspace),
        "residual_bias_matmul", rows, in, out);
  // y over the residual would be right once, but not under TRIDENT_LT_FASTEST's repeated runs.
  if (static_cast<const void*>(y) == static_cast<const void*>(residual))
    fatal_one("residual_bias_matmul: y must not be the residual's buffer");
  Product p{type, CUBLASLT_EPILOGUE_BIAS, /*transpose_a=*/true, out, rows, in, w, x, bias, y, /*aux=*/nullptr,
            workspace, device, static_cast<cudaStream_t>(stream)};
  p.float_d = true;
  p.c = residual;
  run(p);
  residual_products.fetch_add(1, std::memory_order_relaxed);
}

int64_t residual_bias_matmuls() { return residual_products.load(std::memory_order_relaxed); }

// k = rows = 1 is left out: cuBLASLt's bias gradient has been seen wrong there (OneFlow avoids
// BGRADB at k == 1 for that reason).
bool weight_bias_grad_matmul_supports(int64_t rows, int64_t in, int64_t out) {
  return rows >= 2 && gelu_matmul_supports(rows, in, out);
}

// grad_w^T [in, out] (column-major, leading dimension in) = x^T g: A = x as it is ([in, rows]
// column-major), B = g read transposed (its column-major form is [out, rows]); BGRADB sums B
// over k (the rows) into grad_b [out], D's columns.
bool weight_bias_grad_matmul(HalfType type, const void* g, const void* x, int64_t rows, int64_t in, int64_t out,
                             float* grad_w, float* grad_b, void* workspace, int device, void* stream) {
  if (!(weight_bias_grad_matmul_supports(rows, in, out) && aligned(g) && aligned(x) && aligned(grad_w) &&
        aligned(grad_b) && aligned(workspace)))
    return false;
  Product p{type, CUBLASLT_EPILOGUE_BGRADB, /*transpose_a=*/false, in, out, rows, x, g, grad_b, grad_w,
            /*aux=*/nullptr, workspace, device, static_cast<cudaStream_t>(stream)};
  p.transpose_b = true;
  p.float_d = true;
  if (!try_run(p)) return false;
  weight_bias_products.fetch_add(1, std::memory_order_relaxed);
  return true;
}

int64_t weight_bias_grad_matmuls() { return weight_bias_products.load(std::memory_order_relaxed); }

}  // namespace trident::kernels
