#include "parallel/grad_sync.hpp"

namespace trident::parallel {

std::unique_ptr<GradSync> make_grad_sync(const config::Deck& deck, optim::FlatParams& flat, model::LayerStack& model,
                                         comm::Communicator& dp_comm) {
  switch (deck.parallel.zero) {
    case 1: return make_zero1(flat, dp_comm, deck.parallel.bucket_mb);
    case 2: return make_zero2(flat, dp_comm, deck.parallel.bucket_mb);
    case 3: return make_zero3(flat, model, dp_comm);
    default: return make_ddp(flat, dp_comm, deck.parallel.bucket_mb);
  }
}

int64_t expected_state_bytes(int zero, int64_t numel, int dp, int64_t k) {
  // Partitions differ by at most one element; rank 0's, ceil(numel / dp), is the largest.
  auto per_rank = [&](int64_t bytes_per_param) { return bytes_per_param * ((numel + dp - 1) / dp); };
  switch (zero) {
    case 1: return 8 * numel + per_rank(k);
    case 2: return 4 * numel + per_rank(4 + k);
    case 3: return per_rank(8 + k);
    default: return (8 + k) * numel;
  }
}

}  // namespace trident::parallel
