#include "train/same_deck.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)

#include <utility>
#include <vector>

#include "comm/world.hpp"
#include "core/error.hpp"

namespace trident::train {

namespace {

using Values = std::vector<std::pair<std::string, std::string>>;

// Every resolved key's value and --resume, as NUL-separated text (no value holds a NUL): ranks
// compare it byte for byte, and a difference is listed from it without parsing a deck again.
std::string serialized(const Values& values) {
  std::string text;
  for (const auto& [key, value] : values) text += key + '\0' + value + '\0';
  return text;
}

Values deserialized(const std::string& text) {
  Values values;
  size_t at = 0;
  while (at < text.size()) {
    const size_t key_end = text.find('\0', at), value_end = text.find('\0', key_end + 1);
    if (key_end == std::string::npos || value_end == std::string::npos) break;
    values.emplace_back(text.substr(at, key_end - at), text.substr(key_end + 1, value_end - key_end - 1));
    at = value_end + 1;
  }
  return values;
}

}  // namespace

Values deck_and_resume_values(const config::Deck& deck, const std::string& resume) {
  Values values = config::deck_values(deck);
  values.emplace_back("--resume", resume);
  return values;
}

std::string deck_difference(const Values& rank0, const Values& mine) {
  return fmt::format("{}", fmt::join(config::changed_values(rank0, mine), ", "));
}

void agree_on_deck(MPI_Comm comm, const config::Deck& deck, const std::string& resume) {
  const Values mine = deck_and_resume_values(deck, resume);
  const std::string text = serialized(mine);
  const std::string rank0 = comm::broadcast(comm, text);
  int rank = 0, length = 0;
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Get_processor_name(host, &length));
  comm::agree_or_throw(
      comm, text == rank0
                ? ""
                : fmt::format("the ranks read different decks: rank {} on {} has {} (rank 0's value -> its own). Every "
                              "rank must run the same deck, --set and --resume: was the deck edited while the job "
                              "started, does a node have another copy, or is it a pipe (<(...)), which only one rank can "
                              "read?",
                              rank, host, deck_difference(deserialized(rank0), mine)));
}

}  // namespace trident::train
