#pragma once
// Under a cgroup memory limit (SLURM's task/cgroup plugin, a container) an allocation past the
// limit is not refused: it is granted, and the process is OOM-killed (SIGKILL, no message) as
// its pages are touched. While a HostMemoryBudget lives, every host allocation LibTorch makes of
// 64 KiB or more is first checked against a budget of this process's resident memory, and one
// that would pass it throws HostMemoryExceeded instead, which the model's build turns into bad
// input naming the deck's keys. Used where every rank of a node builds the same thing at once
// (the whole model at pp = 1), so that each rank's share of the limit is its budget, and what it
// holds is its own memory and its part of the pages the ranks share (the libraries' code, which a
// cgroup charges once: an OOM kill came with 317 MB of anonymous memory under a 320 MiB cap).
// Torch-free.
#include <cstdint>
#include <new>
#include <string>

namespace trident::train {

// What a host allocation past the budget throws: a std::bad_alloc (the model's build reports
// allocation failures as bad input) whose what() gives the sizes and the budget.
class HostMemoryExceeded : public std::bad_alloc {
 public:
  explicit HostMemoryExceeded(std::string text) : text_(std::move(text)) {}
  const char* what() const noexcept override { return text_.c_str(); }

 private:
  std::string text_;
};

class HostMemoryBudget {
 public:
  // budget_bytes <= 0: nothing is checked. `shared_among`: the ranks whose shared pages are
  // charged once to the limit the budget is a share of. `budget_text` says what the budget is
  // ("128.00 MiB, its share of ..."), for the message.
  HostMemoryBudget(int64_t budget_bytes, int shared_among, std::string budget_text);
  // LibTorch's host allocator is the one before it again. (The checking allocator itself is kept,
  // disarmed, for good: the tensors made meanwhile keep it as their storage's allocator.)
  ~HostMemoryBudget();
  HostMemoryBudget(const HostMemoryBudget&) = delete;
  HostMemoryBudget& operator=(const HostMemoryBudget&) = delete;

 private:
  struct Guard;
  Guard* guard_ = nullptr;  // never deleted (see the destructor)
};

}  // namespace trident::train
