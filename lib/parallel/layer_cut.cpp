#include "parallel/layer_cut.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)

#include <algorithm>
#include <limits>
#include <sstream>

#include "core/error.hpp"

namespace trident::parallel {

std::vector<int64_t> parse_boundaries(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.find_first_not_of(" \t") == std::string::npos) continue;
    out.push_back(std::stoll(item));
  }
  return out;
}

std::vector<int> cut_layers(const std::vector<int64_t>& layer_params, int pp, const std::vector<int64_t>& boundaries,
                            const std::string& pieces_text) {
  const int layers = static_cast<int>(layer_params.size());
  const std::string pieces = pieces_text.empty() ? fmt::format("parallel.pp = {} stages", pp) : pieces_text;
  if (layers < pp)
    fatal_all(fmt::format("parallel.pp: {} stages, but the model has only {} layers", pp, layers));
  if (!boundaries.empty()) {
    if (pp == 1)
      fatal_all(fmt::format("parallel.boundaries: {} cut the model into pipeline stages, but parallel.pp = 1 (no "
                            "pipeline): leave them out, or set parallel.pp = {}",
                            fmt::join(boundaries, ","), boundaries.size() + 1));
    if (static_cast<int>(boundaries.size()) != pp - 1)
      fatal_all(fmt::format("parallel.boundaries: {} given, but {} need {} (the first layer of each after the first)",
                            boundaries.size(), pieces, pp - 1));
    std::vector<int> first{0};
    for (int64_t b : boundaries) {
      if (b <= first.back() || b >= layers)
        fatal_all(fmt::format("parallel.boundaries: {} must increase and lie in 1..{} (the model has {} layers)", b,
                              layers - 1, layers));
      first.push_back(static_cast<int>(b));
    }
    return first;
  }
  // best[s][l]: the smallest possible largest stage when layers [0, l) form s stages.
  std::vector<int64_t> prefix(static_cast<size_t>(layers) + 1, 0);
  for (int l = 0; l < layers; ++l) prefix[l + 1] = prefix[l] + layer_params[static_cast<size_t>(l)];
  const int64_t inf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(static_cast<size_t>(pp) + 1, std::vector<int64_t>(static_cast<size_t>(layers) + 1, inf));
  std::vector<std::vector<int>> cut(best.size(), std::vector<int>(static_cast<size_t>(layers) + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= pp; ++s)
    for (int l = s; l <= layers; ++l)
      for (int k = s - 1; k < l; ++k) {
        if (best[s - 1][k] == inf) continue;
        const int64_t worst = std::max(best[s - 1][k], prefix[l] - prefix[k]);
        if (worst < best[s][l]) {
          best[s][l] = worst;
          cut[s][l] = k;
        }
      }
  std::vector<int> first(static_cast<size_t>(pp));
  for (int s = pp, l = layers; s > 0; --s) {
    l = cut[s][l];
    first[static_cast<size_t>(s - 1)] = l;
  }
  return first;
}

}  // namespace trident::parallel
