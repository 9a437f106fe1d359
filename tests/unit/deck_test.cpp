#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "config/deck.hpp"
#include "core/error.hpp"

using namespace trident;
using config::parse_deck_text;

namespace {

// The message of the BadInput that `f` throws ("" if it does not throw).
template <typename F>
std::string bad_input_message(F f) {
  try {
    f();
  } catch (const BadInput& e) {
    return e.what();
  }
  return "";
}

std::string validation_message(const std::string& text, int world = 2) {
  return bad_input_message([&] {
    const auto deck = parse_deck_text(text, "test.ini", {});
    config::validate_or_throw(deck, {world, false});
  });
}

}  // namespace

// Pins the deck's keys: adding or renaming a key must update this list, the docs and the
// decks in inputs/ together.
TEST(Deck, KeysArePinnedAndEachHasHelp) {
  const std::vector<std::string> expected{
      "run.name", "run.output_dir", "run.seed", "run.epochs", "run.max_steps", "run.log_every", "run.device",
      "run.threads", "run.fail_timeout_s", "run.peak_tflops", "data.path", "data.prefetch", "data.check_finite",
      "model.kind", "model.hidden", "model.layers", "model.heads", "model.d_model", "model.seq_len", "model.vocab",
      "parallel.dp", "parallel.pp",
      "parallel.boundaries", "parallel.zero", "parallel.schedule", "parallel.backend", "parallel.bucket_mb", "optim.name", "optim.lr",
      "optim.lr_schedule", "optim.warmup_steps", "optim.min_lr", "optim.weight_decay", "optim.momentum",
      "optim.beta1", "optim.beta2", "optim.eps", "optim.global_batch", "optim.micro_batch", "optim.clip_grad_norm",
      "optim.precision", "checkpoint.every_steps", "checkpoint.every_minutes", "checkpoint.keep_last"};
  std::vector<std::string> actual;
  for (const auto& f : config::deck_fields()) {
    actual.push_back(f.name());
    EXPECT_GE(f.help.size(), 10u) << f.name() << " has no help text";
    EXPECT_NE(config::deck_help().find(f.key), std::string::npos);
  }
  EXPECT_EQ(actual, expected);
}

TEST(Deck, DefaultsAreValidOnOneRank) {
  const auto deck = parse_deck_text("", "empty.ini", {});
  EXPECT_TRUE(config::validate(deck, {1, false}).empty());
  EXPECT_EQ(deck.optim.global_batch, 256);
  EXPECT_EQ(deck.run.output_dir, "runs/trident");  // ${name} expanded
}

TEST(Deck, ValuesCommentsAndOverrides) {
  const auto deck = parse_deck_text(
      "[run]\nname = abc   # a comment\nseed = 7\n[optim]\nlr = 3e-4\n", "x.ini",
      {"optim.lr=1e-2", "run.output_dir=out/${name}/here", "model.hidden = 32, 16"});
  EXPECT_EQ(deck.run.name, "abc");
  EXPECT_EQ(deck.run.seed, 7);
  EXPECT_DOUBLE_EQ(deck.optim.lr, 1e-2);  // --set wins over the file
  EXPECT_EQ(deck.run.output_dir, "out/abc/here");
  EXPECT_EQ(config::hidden_sizes(deck), (std::vector<int64_t>{32, 16}));
}

TEST(Deck, UnknownKeyNamesKeyLineAndFile) {
  const auto msg = bad_input_message([] { parse_deck_text("[optim]\nlr = 1\nlrr = 2\n", "deck.ini", {}); });
  EXPECT_NE(msg.find("deck.ini:3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown key 'optim.lrr'"), std::string::npos) << msg;
}

TEST(Deck, UnknownSectionIsAnUnknownKey) {
  const auto msg = bad_input_message([] { parse_deck_text("[optimizer]\nlr = 1\n", "deck.ini", {}); });
  EXPECT_NE(msg.find("unknown key 'optimizer.lr'"), std::string::npos) << msg;
}

TEST(Deck, WrongTypeNamesKeyAndExpectedType) {
  const auto msg = bad_input_message([] { parse_deck_text("[optim]\n\nlr = fast\n", "deck.ini", {}); });
  EXPECT_NE(msg.find("deck.ini:3: optim.lr = 'fast' is not a number"), std::string::npos) << msg;
  const auto msg2 = bad_input_message([] { parse_deck_text("[run]\nseed = 1.5\n", "deck.ini", {}); });
  EXPECT_NE(msg2.find("run.seed = '1.5' is not an integer"), std::string::npos) << msg2;
}

TEST(Deck, SyntaxErrorAndDuplicateKey) {
  EXPECT_NE(bad_input_message([] { parse_deck_text("[run]\nthis line has no equals sign\n", "d.ini", {}); })
                .find("syntax error"),
            std::string::npos);
  EXPECT_NE(bad_input_message([] { parse_deck_text("[run]\nseed = 1\nseed = 2\n", "d.ini", {}); })
                .find("more than once"),
            std::string::npos);
}

TEST(Deck, BadOverride) {
  EXPECT_NE(bad_input_message([] { parse_deck_text("", "d.ini", {"optim.nope=1"}); }).find("unknown key 'optim.nope'"),
            std::string::npos);
  EXPECT_NE(bad_input_message([] { parse_deck_text("", "d.ini", {"optim.lr"}); }).find("expected section.key=value"),
            std::string::npos);
}

TEST(Deck, OutOfRangeValues) {
  EXPECT_NE(validation_message("[optim]\nmicro_batch = 0\n").find("optim.micro_batch: 0 is out of range"),
            std::string::npos);
  EXPECT_NE(validation_message("[optim]\nname = adam\n").find("optim.name: 'adam' is not one of adamw | sgd"),
            std::string::npos);
  EXPECT_NE(validation_message("[optim]\nbeta2 = 1.0\n").find("optim.beta2"), std::string::npos);
  EXPECT_NE(validation_message("[parallel]\nzero = 5\n").find("parallel.zero: 5 is out of range"), std::string::npos);
}

TEST(Deck, LayoutMustMatchWorld) {
  const auto msg = validation_message("[parallel]\ndp = 4\n", 2);
  EXPECT_NE(msg.find("test.ini:2: parallel.dp: dp(4) x pp(1) = 4 != world size 2"), std::string::npos) << msg;
}

TEST(Deck, GlobalBatchMustSplitIntoMicroBatchesPerRank) {
  const auto msg = validation_message("[optim]\nglobal_batch = 100\nmicro_batch = 30\n", 2);
  EXPECT_NE(msg.find("test.ini:2: optim.global_batch: 100 is not divisible by optim.micro_batch(30) x dp(2) = 60"),
            std::string::npos)
      << msg;
  EXPECT_EQ(validation_message("[optim]\nglobal_batch = 100\nmicro_batch = 25\n", 4).find("divisible"),
            std::string::npos);
}

TEST(Deck, EveryBrokenRuleIsListed) {
  const auto deck = parse_deck_text("[optim]\nlr = -1\nmicro_batch = 0\n[run]\nlog_every = 0\n", "t.ini", {});
  const auto errors = config::validate(deck, {1, false});
  ASSERT_EQ(errors.size(), 3u);
}

TEST(Deck, MissingFile) {
  EXPECT_NE(bad_input_message([] { config::load_deck("/no/such/deck.ini", {}); })
                .find("/no/such/deck.ini: cannot open the file"),
            std::string::npos);
}

// Found by tests/fuzz: a run name containing "${name}" once expanded forever.
TEST(Deck, NameContainingThePlaceholderExpandsOnce) {
  const auto deck = config::parse_deck_text("[run]\nname = a${name}b\noutput_dir = x/${name}/${name}\n", "t.ini", {});
  EXPECT_EQ(deck.run.output_dir, "x/a${name}b/a${name}b");
}
