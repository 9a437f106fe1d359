#include "train/same_deck.hpp"

#include <fmt/format.h>

#include <vector>

#include "comm/world.hpp"
#include "core/error.hpp"

namespace trident::train {

std::string deck_difference(const std::string& root_deck_text, const std::string& root_resume,
                            const config::Deck& mine, const std::string& my_resume) {
  std::vector<std::string> differences;
  if (config::deck_to_ini(mine) != root_deck_text) {
    std::vector<std::string> problems;  // rank 0's text is a deck it validated: none expected
    const config::Deck root = config::parse_deck_text(root_deck_text, "rank 0's deck", {}, &problems);
    for (const auto& change : config::changed_keys(root, mine)) differences.push_back(change);
    if (differences.empty()) differences.push_back("the resolved decks' texts");  // a value the text does not carry back
  }
  if (my_resume != root_resume) differences.push_back(fmt::format("--resume {} -> {}", root_resume, my_resume));
  if (differences.empty()) return "";
  std::string list;
  for (const auto& d : differences) list += (list.empty() ? "" : ", ") + d;
  return list;
}

void agree_on_deck(MPI_Comm comm, const config::Deck& deck, const std::string& resume) {
  const std::string root_deck = comm::broadcast(comm, config::deck_to_ini(deck));
  const std::string root_resume = comm::broadcast(comm, resume);
  const std::string difference = deck_difference(root_deck, root_resume, deck, resume);
  int rank = 0, length = 0;
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Get_processor_name(host, &length));
  comm::agree_or_throw(
      comm, difference.empty()
                ? ""
                : fmt::format("the ranks read different decks: {} has {} (rank 0's value -> its own). Every rank must "
                              "run the same deck, --set and --resume: was the deck edited while the job started, or "
                              "does a node have another copy?",
                              fmt::format("rank {} on {}", rank, host), difference));
}

}  // namespace trident::train
