// libFuzzer target: the deck parser and validator on arbitrary text. The input is a deck; after
// a line "--", each further line is a --set override. Bad decks must end in BadInput (exit 2
// with a message), never in a crash, a hang, another exception, or undefined behaviour (the
// target is built with ASan and UBSan: tests/fuzz/run.sh).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "config/deck.hpp"
#include "core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto split = input.find("\n--\n");
  const std::string text = input.substr(0, split);
  std::vector<std::string> overrides;
  if (split != std::string::npos) {
    std::istringstream rest(input.substr(split + 4));
    for (std::string line; std::getline(rest, line);) overrides.push_back(line);
  }
  try {
    const auto deck = trident::config::parse_deck_text(text, "fuzz.ini", overrides);
    for (int world : {1, 2, 3, 8}) {
      trident::config::Environment env;
      env.world_size = world;
      (void)trident::config::validate(deck, env);
    }
    (void)trident::config::deck_to_ini(deck);
  } catch (const trident::BadInput&) {
    // the expected way for a bad deck to end
  }
  return 0;
}
