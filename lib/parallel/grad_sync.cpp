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

}  // namespace trident::parallel
