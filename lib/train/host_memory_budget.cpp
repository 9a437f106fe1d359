#include "train/host_memory_budget.hpp"

#include <c10/core/Allocator.h>
#include <fmt/format.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "core/memory_limit.hpp"
#include "train/plan_text.hpp"

namespace trident::train {

namespace {

// Smaller allocations (biases, LayerNorm weights) are not checked: each check reads
// /proc/self/status, and together they are a sliver of a layer.
constexpr size_t kCheckedFrom = size_t{64} << 10;
// SetAllocator replaces the allocator only at a priority at least the current one's (0 for the
// default CPU allocator); the highest takes it whatever registered it, and gives it back. (The
// slot keeps that priority: a later SetAllocator of a lower one would be ignored. Nothing in
// trident or LibTorch's CPU path sets it after start-up.)
constexpr uint8_t kPriority = UINT8_MAX;

}  // namespace

// Wraps the host allocator in place: the checked allocation, then the same allocator's memory.
// Every storage made while it is installed keeps it as its allocator (for a resize), so it
// outlives the HostMemoryBudget: disarmed (budget 0), it only passes allocations on.
struct HostMemoryBudget::Guard final : c10::Allocator {
  Guard(c10::Allocator* inner, int64_t budget, int shared_among, std::string text)
      : inner(inner), budget(budget), shared_among(std::max(shared_among, 1)), text(std::move(text)) {}

  // This process's own resident memory and its part of the pages it shares with the others; 0
  // when /proc cannot be read.
  int64_t held() const {
    const ResidentMemory resident = resident_memory();
    return resident.anonymous > 0 ? resident.anonymous + resident.shared / shared_among : 0;
  }

  void check(size_t n) const {
    const int64_t limit = budget.load(std::memory_order_relaxed);
    if (n < kCheckedFrom || limit <= 0) return;
    const auto wanted = static_cast<int64_t>(n);
    if (held() + wanted <= limit) return;
    // Blocks freed into malloc's heap stay resident until handed back, and would be used again.
    release_free_heap();
    const int64_t now = held();
    if (now == 0 || now + wanted <= limit) return;  // nothing known, or room after all
    throw HostMemoryExceeded(fmt::format("{} more would take the {} this process holds past {}", size_text(wanted),
                                         size_text(now), text));
  }

  // LibTorch 2.3 made allocate non-const and added copy_data and is_simple_data_ptr (1.13 and
  // 2.11 are the two built here).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override {
    check(n);
    return inner->allocate(n);
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { inner->copy_data(dest, src, count); }
  bool is_simple_data_ptr(const c10::DataPtr& data_ptr) const override { return inner->is_simple_data_ptr(data_ptr); }
#else
  c10::DataPtr allocate(size_t n) const override {
    check(n);
    return inner->allocate(n);
  }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return inner->raw_deleter(); }

  c10::Allocator* inner;
  std::atomic<int64_t> budget;
  int shared_among;
  std::string text;
};

HostMemoryBudget::HostMemoryBudget(int64_t budget_bytes, int shared_among, std::string budget_text) {
  if (budget_bytes <= 0) return;
  guard_ = new Guard(c10::GetAllocator(c10::DeviceType::CPU), budget_bytes, shared_among, std::move(budget_text));
  // Kept for good (see the destructor), where a leak checker sees it as reachable.
  static auto* const kept = new std::vector<Guard*>;
  kept->push_back(guard_);
  c10::SetAllocator(c10::DeviceType::CPU, guard_, kPriority);
}

HostMemoryBudget::~HostMemoryBudget() {
  if (!guard_) return;
  c10::SetAllocator(c10::DeviceType::CPU, guard_->inner, kPriority);
  guard_->budget.store(0, std::memory_order_relaxed);  // kept, disarmed: the storages made meanwhile point at it
}

}  // namespace trident::train
