#include "train/memory_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <type_traits>

#include "comm/cuda_runtime.hpp"
#include "comm/world.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/memory_limit.hpp"
#include "parallel/plan.hpp"
#include "train/plan_text.hpp"
#include "train/trainer_state.hpp"

namespace trident::train {

namespace {

// "rank 3", "ranks 0, 1", "ranks 0-3", "ranks 0, 2, 5-7" (ranks in increasing order).
std::string ranks_text(const std::vector<int>& ranks) {
  std::string runs;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j == i + 1) j = i;  // two in a row read better as "0, 1"
    runs += (i ? ", " : "") + (j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]));
    i = j + 1;
  }
  return (ranks.size() == 1 ? "rank " : "ranks ") + runs;
}

// Each limit's total need at `zero` (with what the ranks hold already: `held`), by limit id.
std::map<uint64_t, int64_t> needs_by_limit(const std::vector<MemoryClaim>& claims, int zero, bool held = false) {
  std::map<uint64_t, int64_t> total;
  for (const auto& c : claims) total[c.limit_id] += c.need_bytes[static_cast<size_t>(zero)] + (held ? c.held_bytes : 0);
  return total;
}

bool every_limit_holds_with_room(const std::vector<MemoryClaim>& claims, int zero) {
  const auto total = needs_by_limit(claims, zero, /*held=*/true);
  for (const auto& c : claims)
    if (c.limit_bytes > 0 && total.at(c.limit_id) > c.limit_bytes) return false;
  return true;
}

// "the node's 62.80 GiB (/proc/meminfo MemTotal)", "the 640.00 MiB its cgroup allows (/sys/...)".
std::string host_limit_text(const MemoryLimit& limit) {
  return limit.key == "MemTotal" ? fmt::format("the node's {} ({})", size_text(limit.bytes), limit.source)
                                 : fmt::format("the {} its cgroup allows ({})", size_text(limit.bytes), limit.source);
}

// What shrinks the activations a stage of this deck holds: under gpipe (pp > 1) every micro-batch
// of a step is held, so not the micro-batch's size but the schedule or the global batch.
std::string what_shrinks_activations(const config::Deck& deck) {
  std::string ways = deck.parallel.pp > 1 && deck.parallel.schedule == "gpipe"
                         ? "parallel.schedule = 1f1b (pp - stage micro-batches in flight where gpipe holds all a step "
                           "has), a smaller optim.global_batch"
                         : "a smaller optim.micro_batch";
  if (deck.model.kind == "gpt" && !deck.model.recompute) ways += " or model.recompute = true";
  return ways;
}

}  // namespace

HostShare host_memory_share(const config::Deck& deck, const Connection& conn) {
  if (!deck.run.check_memory) return {};  // the same deck on every rank: all skip the collective alike
  const MemoryLimit limit = host_memory_limit();
  const uint64_t mine = limit.bytes > 0 ? comm::fingerprint_of(limit.key) : 0;
  const std::vector<unsigned char> gathered = comm::gather_on_node(conn.world, &mine, sizeof mine);
  std::vector<uint64_t> ids(static_cast<size_t>(conn.world.local_size));
  std::memcpy(ids.data(), gathered.data(), gathered.size());
  if (limit.bytes <= 0) return {};
  const auto sharing = static_cast<int>(std::count(ids.begin(), ids.end(), mine));
  const int64_t share = limit.bytes / sharing;
  return {share, sharing, sharing == 1 ? host_limit_text(limit)
                              : fmt::format("{}, its share (1 of {} ranks on {}) of {}", size_text(share), sharing,
                                            conn.world.host, host_limit_text(limit))};
}

std::string memory_shortfall(const std::vector<MemoryClaim>& claims, size_t self, int zero, const std::string& host,
                             const std::string& limit_text, const std::string& needs_text,
                             const std::string& activation_remedy) {
  const MemoryClaim& me = claims.at(self);
  if (me.limit_bytes <= 0) return "";
  const int64_t need = needs_by_limit(claims, zero).at(me.limit_id);
  if (need <= me.limit_bytes) return "";
  std::vector<int> sharing;
  int64_t held = 0, activations = 0;  // what they hold already; what their layers keep
  for (const auto& c : claims)
    if (c.limit_id == me.limit_id) {
      sharing.push_back(c.rank);
      held += c.held_bytes;
      activations += c.activation_bytes;
    }
  const bool one = sharing.size() == 1;
  std::string message = fmt::format(
      "the model does not fit in memory: {} on {} {} at least {}{} for {} at parallel.zero = {}, more than {} (a lower "
      "bound: {} and the libraries' own memory come on top).",
      ranks_text(sharing), host, one ? "needs" : "need", size_text(need), one ? "" : " together", needs_text, zero,
      limit_text, activations > 0 ? "the backward's gradients" : "activations");
  // Worth naming where the state alone would overdraw the limit by no more than they add.
  if (activations > 0 && activations >= need - me.limit_bytes && !activation_remedy.empty())
    message += fmt::format(" {} of it {} what the layers keep for the backward, which no ZeRO stage shrinks: {} would.",
                           size_text(activations), one ? "is" : "is, together,", activation_remedy);
  // The higher stages at which every limit of the node holds with what its ranks hold already on
  // top, with this limit's figure.
  std::string stages, figures;
  for (int z = zero + 1; z <= 3; ++z)
    if (every_limit_holds_with_room(claims, z)) {
      stages += (stages.empty() ? "" : " / ") + std::to_string(z);
      figures += (figures.empty() ? "" : " / ") + size_text(needs_by_limit(claims, z).at(me.limit_id));
    }
  if (!stages.empty())
    return message + fmt::format(" At parallel.zero = {} it would be at least {}{}{} (trident plan shows each rank's share).",
                                 stages, figures, one ? "" : " together",
                                 held > 0 ? fmt::format(", room left for the {} {} already", size_text(held),
                                                        one ? "it holds" : "they hold")
                                          : "");
  return message + " No ZeRO stage fits it on these ranks: spread the model over more ranks (ZeRO shards it over "
                   "parallel.dp, a pipeline cuts it over parallel.pp) or make it smaller.";
}

void check_memory_fits(const config::Deck& deck, const Connection& conn, const parallel::Plan& plan) {
  if (!deck.run.check_memory) return;  // the same deck on every rank: all skip the collective alike
  const bool on_gpu = conn.cuda_index >= 0;
  const int stage = conn.topology->stage();
  MemoryClaim mine;
  mine.rank = conn.world.rank;
  std::string limit_text, needs_text;
  const std::string state_text = fmt::format("the fp32 model state (parameters, gradients, {} state of model.kind = {})",
                                             deck.optim.name, deck.model.kind);
  int64_t activation = 0;
  if (on_gpu) {
    // Every rank's state lives on its GPU, and at least one micro-batch of its stage's outputs
    // waits there between forward and backward (2 bytes an element under bf16 / fp16).
    try {
      const std::string uuid = comm::cuda_device_uuid(conn.cuda_index);
      mine.limit_id = comm::fingerprint_of(uuid);
      mine.limit_bytes = comm::cuda_total_memory_bytes(conn.cuda_index);
      limit_text = fmt::format("the {} of GPU {} ({})", size_text(mine.limit_bytes), uuid,
                               comm::cuda_device_name(conn.cuda_index));
    } catch (const std::exception& e) {  // not checked; every rank still joins the gather below
      mine.limit_bytes = 0;
      log::warn("memory check skipped on {}: {}", conn.world.host, e.what());
    }
    activation = deck.optim.precision == "fp32" ? plan.output_bytes(stage) : plan.output_bytes(stage) / 2;
    needs_text = state_text + " and one micro-batch of stage outputs";
  } else {
    const MemoryLimit limit = host_memory_limit();
    mine.limit_id = comm::fingerprint_of(limit.key);
    mine.limit_bytes = limit.bytes;
    limit_text = host_limit_text(limit);
    needs_text = state_text;
    mine.held_bytes = resident_anonymous_bytes();
    // LibTorch's fp32 layers keep what the plan says (ActivationMemory per layer, PipelineMemory as
    // a schedule's micro-batches grow); a 16-bit run on the CPU runs autocast's layers, which the
    // plan does not size.
    if (deck.optim.precision == "fp32") {
      activation = mine.activation_bytes = plan.held_activation_bytes(stage) + plan.recompute_bytes(stage);
      needs_text += " and what the layers keep for the backward of the micro-batches in flight";
    }
  }
  for (int z = 0; z <= 3; ++z)
    mine.need_bytes[static_cast<size_t>(z)] =
        parallel::zero_state_bytes(z, plan.stage_parameters(stage), plan.dp(), plan.optimizer_bytes_per_parameter())
            .total() +
        activation;

  // The ranks of one node are the ones that can share a limit.
  static_assert(std::is_trivially_copyable_v<MemoryClaim>);
  const std::vector<unsigned char> gathered = comm::gather_on_node(conn.world, &mine, sizeof mine);
  std::vector<MemoryClaim> claims(static_cast<size_t>(conn.world.local_size));
  std::memcpy(claims.data(), gathered.data(), gathered.size());
  comm::agree_or_throw(conn.world.comm,
                       memory_shortfall(claims, static_cast<size_t>(conn.world.local_rank), plan.zero(), conn.world.host,
                                        limit_text, needs_text, what_shrinks_activations(deck)));
}

}  // namespace trident::train
