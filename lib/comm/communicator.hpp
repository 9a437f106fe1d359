#pragma once
// Collectives on tensors, behind one interface: an MPI backend (CPU tensors, always built)
// and, where CUDA LibTorch and NCCL are found, an NCCL backend (CUDA tensors). Every call is
// collective over the communicator's group unless it says otherwise; sums are in place.
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace trident::comm {

// A collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool test() = 0;  // true once complete; also drives progress
  virtual void wait() = 0;
};

// How reduce_numbers combines the ranks' values.
enum class Reduce { sum, max, min };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;

  virtual void all_reduce_sum(at::Tensor& tensor) = 0;
  virtual std::unique_ptr<Work> all_reduce_sum_async(at::Tensor& tensor) = 0;
  // `input` holds size() equal chunks; `output` (one chunk) gets the sum of chunk rank().
  virtual void reduce_scatter_sum(const at::Tensor& input, at::Tensor& output) = 0;
  // `output` holds size() chunks; chunk r is rank r's `input`.
  virtual void all_gather(const at::Tensor& input, at::Tensor& output) = 0;
  // Uneven variants (ZeRO partitions whose sizes differ): rank r's piece has counts[r] elements.
  // reduce_scatter_sum_v: `input` holds every piece back to back; `output` (counts[rank()]
  // elements) gets the sum over ranks of this rank's piece.
  virtual void reduce_scatter_sum_v(const at::Tensor& input, at::Tensor& output,
                                    const std::vector<int64_t>& counts) = 0;
  // all_gather_v: `output` gets every rank's piece back to back. `input` is this rank's piece;
  // when it already is the right slice of `output`, the gather is done in place.
  virtual void all_gather_v(const at::Tensor& input, at::Tensor& output, const std::vector<int64_t>& counts) = 0;
  // The same, started and left in flight (ZeRO-3's prefetch of the next layer): `output` must stay
  // alive and untouched until the Work completes.
  virtual std::unique_ptr<Work> all_gather_v_async(const at::Tensor& input, at::Tensor& output,
                                                   const std::vector<int64_t>& counts) = 0;
  virtual void broadcast(at::Tensor& tensor, int root) = 0;
  virtual void send(const at::Tensor& tensor, int peer, int tag) = 0;
  // Non-blocking send: `tensor` must stay unchanged until the Work completes. The caller may drop
  // it: the backend keeps it from being freed or reused until then (MPI: the Work holds it or its
  // host copy, until it completes; NCCL: the caching allocator's record_stream on its stream).
  virtual std::unique_ptr<Work> send_async(const at::Tensor& tensor, int peer, int tag) = 0;
  virtual void recv(at::Tensor& tensor, int peer, int tag) = 0;
  virtual void barrier() = 0;

  // Host numbers (flags, timings, totals a run agrees on), reduced in place over the group: every
  // rank gets the result. Blocking; seen by the fail-fast watchdog as an all-reduce.
  virtual void reduce_numbers(std::vector<double>& values, Reduce op) = 0;
  double reduce_number(double value, Reduce op) {
    std::vector<double> values{value};
    reduce_numbers(values, op);
    return values[0];
  }
};

}  // namespace trident::comm
