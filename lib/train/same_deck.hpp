#pragma once
// Every rank of a run reads the deck itself (srun starts each task on its own node): a deck
// edited while the job starts, a per-node copy that differs, or an MPMD launch with different
// --set would otherwise train a mix of models, fault far from the cause, or hang in a collective
// the ranks do not all call.
#include <mpi.h>

#include <string>
#include <utility>
#include <vector>

#include "config/deck.hpp"

namespace trident::train {

// The resolved deck and --resume of every rank against rank 0's: bad input (exit 2) on every
// rank naming the first rank that differs, its keys and both values. Collective over `comm`.
void agree_on_deck(MPI_Comm comm, const config::Deck& deck, const std::string& resume);

// Every resolved deck key's value, then --resume, as (key, value) in deck order.
std::vector<std::pair<std::string, std::string>> deck_and_resume_values(const config::Deck& deck,
                                                                        const std::string& resume);
// The keys whose values differ, as "key rank0 -> mine, ..." ("" when none).
std::string deck_difference(const std::vector<std::pair<std::string, std::string>>& rank0,
                            const std::vector<std::pair<std::string, std::string>>& mine);

}  // namespace trident::train
