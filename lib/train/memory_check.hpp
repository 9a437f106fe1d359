#pragma once
// Before a run allocates its model state: can the ranks that share a memory limit (a cgroup, the
// node's memory, one GPU) hold what they certainly will? A deck that asks for more is bad input
// (exit 2) with the figures and the ZeRO stages that would fit, instead of an OOM kill or a CUDA
// out-of-memory error minutes into the job. Only lower bounds are compared: the fp32 model state
// the ZeRO paper counts; on the host of an fp32 run what the layers keep for the backward of the
// micro-batches the stage holds at once (trident plan's estimate: ActivationMemory finds each
// layer's in LibTorch's allocator reports to the byte, PipelineMemory how a stage's grows with a
// schedule's micro-batches), on a GPU one micro-batch of stage outputs (the plan's GPU estimate
// waits for a run on a GPU); never the backward's gradients or the libraries' own memory. A limit
// counts the swap its group may use.
// run.check_memory = false skips it.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace trident::config {
struct Deck;
}
namespace trident::parallel {
class Plan;
}

namespace trident::train {

struct Connection;

// One rank's draw on the limit it lives under.
struct MemoryClaim {
  int rank = 0;                         // in the job
  uint64_t limit_id = 0;                // ranks with the same id draw on the same limit
  int64_t limit_bytes = 0;              // 0: unknown, not checked
  std::array<int64_t, 4> need_bytes{};  // the least this rank holds at parallel.zero = 0, 1, 2, 3
  // Of each need: what the layers keep for the backward (no ZeRO stage shrinks it), when counted
  // (an fp32 run on the host).
  int64_t activation_bytes = 0;
  // What it holds already (host: the libraries' heap and the whole model as every rank builds
  // it): not a bound (part of it is freed), so it only keeps a stage with too thin a margin
  // from being offered.
  int64_t held_bytes = 0;
};

// What the ranks drawing on claims[self]'s limit lack at ZeRO stage `zero`: "" when their needs
// add up to no more than it. Else one message: the ranks, `limit_text` (what the limit is),
// the figures, and the higher stages at which every limit among `claims` holds with what the
// ranks hold already on top, or that none does (more ranks, pp, a smaller model). `needs_text`
// says what the need counts; where counted activations make the difference, `activation_remedy`
// (what would shrink them: "a smaller optim.micro_batch or model.recompute = true") follows their
// figure.
std::string memory_shortfall(const std::vector<MemoryClaim>& claims, size_t self, int zero, const std::string& host,
                             const std::string& limit_text, const std::string& needs_text,
                             const std::string& activation_remedy = "");

// What a rank may hold while every rank of its node builds the same thing at once (the whole
// model at pp = 1): its share of the host memory limit it lives under (limit / the ranks of the
// node under it), and the text that says so. {0, ""} when run.check_memory is false or no limit
// can be read. Collective over the node's ranks.
struct HostShare {
  int64_t bytes = 0;
  int ranks = 1;  // the node's ranks under the same limit
  std::string text;
};
HostShare host_memory_share(const config::Deck& deck, const Connection& conn);

// The check, collective over the run: each rank's claim on its host memory limit (CPU runs) or
// its GPU's memory (CUDA runs), gathered per node. BadInput with the lowest failing rank's message.
void check_memory_fits(const config::Deck& deck, const Connection& conn, const parallel::Plan& plan);

}  // namespace trident::train
