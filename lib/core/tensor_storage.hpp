#pragma once
// A tensor's memory released and allocated again under it: the tensor, its views and what autograd
// saved from them keep their shapes while no memory backs them (ZeRO-3's parameters between the
// gathers; a partitioned build's parameters before ZeRO-3 takes them over). And the hash ranks
// compare to know they hold the same values.
#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>

#include <cstdint>
#include <functional>
#include <string_view>

namespace trident {

inline void release_storage(at::Tensor& t) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  impl->set_nbytes(0);
}

inline void allocate_storage(at::Tensor& t) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<size_t>(t.numel()) * t.element_size();
  impl->set_data_ptr_noswap(impl->allocator()->allocate(bytes));
  impl->set_nbytes(bytes);
}

// `hash` with a contiguous host tensor's bytes mixed in (order matters).
inline uint64_t hash_with(uint64_t hash, const at::Tensor& t) {
  const std::string_view bytes(static_cast<const char*>(t.data_ptr()), t.nbytes());
  return (hash * 1000003u) ^ std::hash<std::string_view>{}(bytes);
}

}  // namespace trident
