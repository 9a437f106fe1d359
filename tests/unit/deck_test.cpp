#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "config/deck.hpp"
#include "train/same_deck.hpp"
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
      "run.name", "run.output_dir", "run.seed", "run.epochs", "run.max_steps", "run.log_every", "run.eval_every_steps", "run.eval_samples", "run.device",
      "run.threads", "run.fail_timeout_s", "run.requeue_lock_wait_s", "run.check_memory", "run.peak_tflops",
      "run.cuda_graph", "data.path", "data.prefetch", "data.check_finite",
      "data.verify_checksums",
      "model.kind", "model.hidden", "model.layers", "model.heads", "model.d_model", "model.seq_len", "model.vocab",
      "model.recompute", "parallel.dp", "parallel.pp",
      "parallel.boundaries", "parallel.balance", "parallel.zero", "parallel.schedule", "parallel.virtual_stages", "parallel.backend", "parallel.bucket_mb", "optim.name", "optim.lr",
      "optim.lr_schedule", "optim.warmup_steps", "optim.min_lr", "optim.weight_decay", "optim.momentum",
      "optim.beta1", "optim.beta2", "optim.eps", "optim.global_batch", "optim.micro_batch", "optim.max_micro_batch",
      "optim.clip_grad_norm",
      "optim.precision", "checkpoint.every_steps", "checkpoint.every_minutes", "checkpoint.keep_last", "checkpoint.async"};
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

// A '#' begins a comment at the start of a line or after a blank; inside a value it is the
// value's (it used to cut data.path = d#1.h5 to "d" without a word). A section name is trimmed,
// and a key may be written section.key before any section, as --set writes it.
TEST(Deck, CommentsBeginAtALineStartOrAfterABlank) {
  const auto deck = parse_deck_text(
      "# a comment\n  # an indented one\noptim.momentum = 0.5\n[ run ]  # run's keys\nname = exp#3\t# tab\n"
      "[data]\npath = runs/#3/d#1.h5 # a comment\n",
      "x.ini", {}, nullptr);
  EXPECT_EQ(deck.run.name, "exp#3");
  EXPECT_EQ(deck.data.path, "runs/#3/d#1.h5");
  EXPECT_DOUBLE_EQ(deck.optim.momentum, 0.5);
  // Each value holding a '#' is noted (read as a comment before), naming its line.
  ASSERT_EQ(deck.notes.size(), 2u);
  EXPECT_EQ(deck.notes[0].rfind("x.ini:5: run.name = 'exp#3': the '#' is part of the value", 0), 0u) << deck.notes[0];
  EXPECT_EQ(deck.notes[1].rfind("x.ini:7: data.path = 'runs/#3/d#1.h5'", 0), 0u) << deck.notes[1];
  // "3e-4#x" is not a number: said, with the rule, not read as 3e-4.
  const auto msg = bad_input_message([] { parse_deck_text("[optim]\nlr = 3e-4#x\n", "x.ini", {}); });
  EXPECT_NE(msg.find("x.ini:2: optim.lr = '3e-4#x' is not a finite number (a '#' begins a comment only"),
            std::string::npos)
      << msg;
  // A section header followed by a comment with no blank between; a section.key before any
  // section is named by its line in a rule's message.
  const auto header = parse_deck_text("[optim]# the optimizer\nlr = 0.25\n", "x.ini", {});
  EXPECT_DOUBLE_EQ(header.optim.lr, 0.25);
  EXPECT_TRUE(header.notes.empty());
  EXPECT_NE(validation_message("# a deck\noptim.lr = -1\n").find("test.ini:2: optim.lr"), std::string::npos)
      << validation_message("# a deck\noptim.lr = -1\n");
}

// The deck a checkpoint keeps (deck_to_ini) reads back to the same values, ' #' in them included:
// a resume compares them with its own deck and lists every key that differs.
TEST(Deck, AWrittenDeckReadsBackTheSameValues) {
  auto deck = parse_deck_text("", "x.ini", {"run.name=exp #3", "data.path=d#1.h5", "model.hidden=32, 16"});
  const auto written = config::parse_written_deck(config::deck_to_ini(deck), "ckpt.h5");
  EXPECT_EQ(written.run.name, "exp #3");
  EXPECT_EQ(written.data.path, "d#1.h5");
  EXPECT_EQ(config::changed_keys(written, deck), std::vector<std::string>{});
  // A user's deck with the same text reads ' #3' as a comment: that is why the two differ.
  EXPECT_EQ(parse_deck_text(config::deck_to_ini(deck), "x.ini", {}).run.name, "exp");
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
  EXPECT_NE(msg.find("deck.ini:3: optim.lr = 'fast' is not a finite number"), std::string::npos) << msg;
  const auto msg2 = bad_input_message([] { parse_deck_text("[run]\nseed = 1.5\n", "deck.ini", {}); });
  EXPECT_NE(msg2.find("run.seed = '1.5' is not an integer"), std::string::npos) << msg2;
}

TEST(Deck, SyntaxErrorAndDuplicateKey) {
  EXPECT_NE(bad_input_message([] { parse_deck_text("[run]\nthis line has no equals sign\n", "d.ini", {}); })
                .find("d.ini:2: syntax error: the line 'this line has no equals sign' is not 'key = value'"),
            std::string::npos);
  // Boost's own message for this line never finishes substituting it into itself.
  EXPECT_NE(bad_input_message([] { parse_deck_text("[run]\nx %invalid_line% y\n", "d.ini", {}); })
                .find("the line 'x %invalid_line% y'"),
            std::string::npos);
  EXPECT_NE(bad_input_message([] { parse_deck_text("[run]\nseed = 1\nseed = 2\n", "d.ini", {}); })
                .find("d.ini:3: key 'run.seed' is given more than once (first on line 2)"),
            std::string::npos);
}

// Every broken line of a deck is listed with its number in one message, not only the first
// (Boost stops at the first): a section line without its bracket, a "key: value" line, a key
// before any section (with the section it belongs to), and each key of an unknown section.
TEST(Deck, EveryBrokenLineIsListedWithItsNumber) {
  const std::string msg = bad_input_message([] {
    parse_deck_text("lr = 1e-3\n[optim\nlr: 2e-3\n[optimizer]\nlr = 1\nmomentum = 0.9  # a comment\n[run]\nseed = 1\n",
                    "d.ini", {});
  });
  EXPECT_NE(msg.find("bad deck d.ini: 5 errors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("d.ini:1: key 'lr' comes before any [section] (it belongs under [optim])"), std::string::npos) << msg;
  EXPECT_NE(msg.find("d.ini:2: syntax error: the line '[optim'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("d.ini:3: syntax error: the line 'lr: 2e-3'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("d.ini:5: unknown key 'optimizer.lr'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("d.ini:6: unknown key 'optimizer.momentum'"), std::string::npos) << msg;
  // A fully named key before any section is read as Boost reads it.
  EXPECT_DOUBLE_EQ(parse_deck_text("optim.lr = 0.5\n[run]\nseed = 3\n", "d.ini", {}).optim.lr, 0.5);
}

// What a resume lists as changed since its checkpoint: every key whose value differs, in deck order.
TEST(Deck, ChangedKeysAreListedInDeckOrder) {
  const auto before = parse_deck_text("[run]\nseed = 1\n[optim]\nlr = 1e-3\n", "a.ini", {});
  const auto after = parse_deck_text("[run]\nseed = 7\n[optim]\nlr = 1e-3\n", "b.ini", {"optim.lr=2e-3"});
  EXPECT_EQ(config::changed_keys(before, after), (std::vector<std::string>{"run.seed 1 -> 7", "optim.lr 0.001 -> 0.002"}));
  EXPECT_TRUE(config::changed_keys(before, before).empty());
}

// Unknown keys, wrong types and broken rules of one deck (and its --set) come in one message, as
// train and plan give it: not one kind per attempt.
TEST(Deck, EveryProblemOfADeckInOneMessage) {
  const std::string msg = bad_input_message([] {
    std::vector<std::string> problems;
    const auto deck = parse_deck_text("[run]\nfoo = 1\nseed = abc\n[optim]\nlr = -1\n", "d.ini",
                                      {"parallel.zero=9"}, &problems);
    config::validate_or_throw(deck, {2, false}, problems);
  });
  EXPECT_NE(msg.find("bad deck d.ini: 4 errors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("d.ini:2: unknown key 'run.foo'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("d.ini:3: run.seed = 'abc' is not an integer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("optim.lr"), std::string::npos) << msg;
  EXPECT_NE(msg.find("parallel.zero"), std::string::npos) << msg;
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
  EXPECT_NE(validation_message("[parallel]\nschedule = interleaved\npp = 2\n")
                .find("parallel.virtual_stages: 1: the interleaved schedule needs at least 2 chunks per rank"),
            std::string::npos);
  EXPECT_NE(validation_message("[parallel]\nvirtual_stages = 2\n")
                .find("parallel.virtual_stages: 2: several chunks per rank need parallel.schedule = interleaved"),
            std::string::npos);
  EXPECT_EQ(validation_message("[parallel]\nschedule = interleaved\npp = 2\nvirtual_stages = 2\n"), "");
  EXPECT_EQ(validation_message("[parallel]\nzero = 3\nschedule = zb-h1\n"), "");
  // A fixed cut and a measured one cannot both hold.
  EXPECT_NE(validation_message("[parallel]\npp = 2\nboundaries = 3\nbalance = time\n")
                .find("test.ini:4: parallel.balance: 'time' balances a cut trident makes, but parallel.boundaries = '3' "
                      "fixes the cut: set one of the two"),
            std::string::npos);
  EXPECT_EQ(validation_message("[parallel]\npp = 2\nboundaries = 3\n"), "");
  EXPECT_EQ(validation_message("[parallel]\npp = 2\nbalance = time\n"), "");
}

// model.recompute runs a GPT's transformer blocks again in the backward: for another model it
// would do nothing.
TEST(Deck, RecomputeNeedsAGpt) {
  EXPECT_NE(validation_message("[model]\nrecompute = true\n")
                .find("model.recompute: recomputes a GPT's transformer blocks; model.kind = cnn has none"),
            std::string::npos);
  EXPECT_EQ(validation_message("[model]\nkind = gpt\nrecompute = true\n"), "");
  EXPECT_EQ(validation_message("[model]\nkind = gpt\nrecompute = true\n[parallel]\npp = 2\nschedule = zb-h1\n"), "");
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

// micro_batch = auto: the largest divisor of global_batch / dp up to max_micro_batch, so the
// shipped decks (global 128) run at 1, 2, 4 and 8 ranks with the global batch fixed.
TEST(Deck, AutoMicroBatchIsTheLargestDivisorOfTheRanksShareUpToTheCap) {
  const auto deck = parse_deck_text("[optim]\nglobal_batch = 128\n", "t.ini", {});
  EXPECT_EQ(deck.optim.micro_batch, "auto");
  const std::vector<std::pair<int, int64_t>> expected{{1, 64}, {2, 64}, {4, 32}, {8, 16}, {16, 8}, {128, 1}};
  for (const auto& [world, micro] : expected) {
    EXPECT_TRUE(config::validate(deck, {world, false}).empty()) << "world " << world;
    EXPECT_EQ(config::resolved_micro_batch(deck, world), micro) << "world " << world;
  }
  // Not a power of two: 96 / dp 4 = 24 -> 24; 96 / dp 1 = 96 -> 48 (96 = 2 x 48, 48 <= 64).
  const auto odd = parse_deck_text("[optim]\nglobal_batch = 96\n", "t.ini", {});
  EXPECT_EQ(config::resolved_micro_batch(odd, 4), 24);
  EXPECT_EQ(config::resolved_micro_batch(odd, 1), 48);
  const auto capped = parse_deck_text("[optim]\nglobal_batch = 96\nmax_micro_batch = 10\n", "t.ini", {});
  EXPECT_EQ(config::resolved_micro_batch(capped, 1), 8);  // 96 = 12 x 8; 9 and 10 do not divide 96
  const auto prime = parse_deck_text("[optim]\nglobal_batch = 67\n", "t.ini", {});
  EXPECT_EQ(config::resolved_micro_batch(prime, 1), 1);  // 67 is prime and > 64
  // A fixed micro-batch is kept as written.
  EXPECT_EQ(config::resolved_micro_batch(parse_deck_text("[optim]\nmicro_batch = 8\n", "t.ini", {}), 4), 8);
}

TEST(Deck, AutoMicroBatchStillNeedsTheGlobalBatchToSplitOverTheReplicas) {
  const auto msg = validation_message("[optim]\nglobal_batch = 100\n", 8);
  EXPECT_NE(msg.find("test.ini:2: optim.global_batch: 100 is not divisible by dp(8)"), std::string::npos) << msg;
  EXPECT_NE(validation_message("[optim]\nmicro_batch = many\n").find("optim.micro_batch: 'many' must be auto or a "
                                                                     "positive integer"),
            std::string::npos);
  EXPECT_NE(validation_message("[optim]\nmax_micro_batch = 0\n").find("optim.max_micro_batch: 0 is out of range"),
            std::string::npos);
}

// Windows editors save a byte-order mark and CRLF line endings; both read like a plain deck.
TEST(Deck, ByteOrderMarkAndCrlfAreAccepted) {
  const std::string text = "[run]\r\nname = bom\r\nseed = 7\r\n[optim]\r\nlr = 0.5\r\n";
  for (const std::string& prefix : {std::string(), std::string("\xEF\xBB\xBF")}) {
    const auto deck = parse_deck_text(prefix + text, "win.ini", {});
    EXPECT_EQ(deck.run.name, "bom");
    EXPECT_EQ(deck.run.seed, 7);
    EXPECT_EQ(deck.optim.lr, 0.5);
    EXPECT_TRUE(config::validate(deck, {1, false}).empty());
  }
  // The mark is skipped only at the start: a line's position in messages is unchanged.
  const auto msg = validation_message("\xEF\xBB\xBF[optim]\r\nlr = -1\r\n");
  EXPECT_NE(msg.find("test.ini:2: optim.lr"), std::string::npos) << msg;
}

TEST(Deck, AFolderGivenAsTheDeckIsNamedAsSuch) {
  const std::string msg = bad_input_message([] { config::load_deck("/tmp", {}); });
  EXPECT_NE(msg.find("bad deck /tmp: it is a folder, not a deck file"), std::string::npos) << msg;
}

TEST(Deck, EveryBrokenRuleIsListed) {
  const auto deck =
      parse_deck_text("[optim]\nlr = -1\nmicro_batch = 0\n[run]\nlog_every = 0\neval_every_steps = -1\n", "t.ini", {});
  const auto errors = config::validate(deck, {1, false});
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_EQ(std::count_if(errors.begin(), errors.end(),
                          [](const std::string& e) {
                            return e.find("run.eval_every_steps: -1 is out of range (must be >= 0)") != std::string::npos;
                          }),
            1);
}

// run.eval_samples: each data-parallel replica evaluates a share of them, so fewer than dp would
// leave one out of the forwards whose ZeRO-3 gathers the others wait in (a hang).
TEST(Deck, EvaluationSamplesCoverEveryReplica) {
  EXPECT_NE(validation_message("[run]\neval_every_steps = 10\neval_samples = 3\n", 4)
                .find("run.eval_samples: 3 is fewer than the 4 data-parallel replicas"),
            std::string::npos);
  EXPECT_NE(validation_message("[run]\neval_samples = 1\n[parallel]\npp = 2\ndp = auto\n", 4)
                .find("run.eval_samples: 1 is fewer than the 2 data-parallel replicas"),
            std::string::npos);
  EXPECT_EQ(validation_message("[run]\neval_samples = 2\n[parallel]\npp = 2\n", 4), "") << "dp 2, 2 samples";
  EXPECT_EQ(validation_message("[run]\neval_samples = 0\n", 4), "") << "0: the whole split";
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

// inf and nan parse as numbers, but no key means anything by them: an infinite learning rate
// trained to a divergence, an infinite watchdog timeout aborted healthy runs at once.
TEST(Deck, NonFiniteNumbersAreRefused) {
  for (const char* value : {"inf", "-inf", "nan", "1e999"}) {
    const auto msg = bad_input_message([&] { parse_deck_text(std::string("[optim]\nlr = ") + value + "\n", "d.ini", {}); });
    EXPECT_NE(msg.find("d.ini:2: optim.lr = '" + std::string(value) + "' is not a finite number"), std::string::npos) << msg;
  }
  const auto msg = bad_input_message([] { parse_deck_text("", "d.ini", {"run.fail_timeout_s=inf"}); });
  EXPECT_NE(msg.find("--set run.fail_timeout_s=inf: run.fail_timeout_s is not a finite number"), std::string::npos) << msg;
}

TEST(Deck, ThreadsAndWatchdogTimeoutHaveLimits) {
  EXPECT_NE(validation_message("[run]\nthreads = 100000\n").find("run.threads: 100000 is out of range (at most 1024"),
            std::string::npos);
  EXPECT_EQ(validation_message("[run]\nthreads = 1024\n"), "");
  for (const char* bad : {"0.5", "0.0001", "2e6", "-1"})
    EXPECT_NE(validation_message(std::string("[run]\nfail_timeout_s = ") + bad + "\n")
                  .find("run.fail_timeout_s: " + std::string(bad == std::string("2e6") ? "2000000" : bad) +
                        " is out of range (0 = off, or 1 to 1e6 seconds)"),
              std::string::npos)
        << bad;
  for (const char* good : {"0", "1", "30", "1e6"})
    EXPECT_EQ(validation_message(std::string("[run]\nfail_timeout_s = ") + good + "\n"), "") << good;
  EXPECT_NE(validation_message("[run]\nrequeue_lock_wait_s = -1\n")
                .find("run.requeue_lock_wait_s: -1 is out of range (0 to 1e6 seconds)"),
            std::string::npos);
  EXPECT_EQ(validation_message("[run]\nrequeue_lock_wait_s = 0\n"), "");
  EXPECT_NE(validation_message("[run]\nmax_steps = 5\nepochs = -1\n").find("run.epochs: -1 is out of range"),
            std::string::npos);
}

// Integers past what the code keeps them in wrapped to other values: keep_last 2^32 became 0 and
// pruned every checkpoint (exit 0), virtual_stages 2^32 a division by zero, a boundary of 3e9 a
// std::stoi fault (tests/unit/pipeline_schedule_test.cpp); dp 2^62 x pp 4 overflowed the layout check.
TEST(Deck, CountsHaveUpperLimits) {
  const std::vector<std::pair<std::string, std::string>> refused{
      {"[checkpoint]\nkeep_last = 4294967296\n", "checkpoint.keep_last: 4294967296 is out of range (at most 2147483647)"},
      {"[data]\nprefetch = 1025\n", "data.prefetch: 1025 is out of range (at most 1024 micro-batches)"},
      {"[parallel]\npp = 2\nschedule = interleaved\nvirtual_stages = 4294967296\n",
       "parallel.virtual_stages: 4294967296 is out of range (at most 1024 chunks per rank)"},
      {"[parallel]\npp = 2\nboundaries = 99999999999999999999\n",
       "parallel.boundaries: 99999999999999999999 is out of range for a layer index"},
      {"[parallel]\ndp = 4611686018427387904\npp = 4\n", "parallel.pp: 4 pipeline stages, but the job has only 2 ranks"},
      {"[parallel]\ndp = 4611686018427387904\npp = 2\n", "parallel.dp: dp(4611686018427387904) x pp(2) > world size 2"},
      // micro x dp overflowed to 0 and the modulo by it killed every rank with SIGFPE.
      {"[parallel]\ndp = 4611686018427387904\n[optim]\nmicro_batch = 4\n",
       "parallel.dp: dp(4611686018427387904) x pp(1) = 4611686018427387904 != world size 2"},
      {"[optim]\nglobal_batch = 64\nmicro_batch = 4611686018427387904\n",
       "optim.micro_batch: 4611686018427387904 is more than a replica's share of the global batch: "
       "optim.global_batch(64) / dp(2) = 32"},
  };
  for (const auto& [text, expected] : refused)
    EXPECT_NE(validation_message(text).find(expected), std::string::npos) << text << validation_message(text);
  EXPECT_EQ(validation_message("[checkpoint]\nkeep_last = 2147483647\n"), "");
  EXPECT_EQ(validation_message("[data]\nprefetch = 1024\n"), "");
  // Within 64 bits an index is the model's to judge: cut_layers names it against its layer count.
  EXPECT_EQ(validation_message("[parallel]\npp = 2\nboundaries = 3000000000\n"), "");
}

TEST(Deck, HiddenWidthsWithAnEmptyItemAreRefused) {
  for (const char* hidden : {"16,", "16,,8", ",16", " 16 , "})
    EXPECT_NE(validation_message(std::string("[model]\nkind = mlp\nhidden = ") + hidden + "\n")
                  .find("must be a comma-separated list of positive widths"),
              std::string::npos)
        << hidden;
  EXPECT_EQ(validation_message("[model]\nkind = mlp\nhidden = 16, 8\n"), "");
}

TEST(Deck, UnknownVariableInOutputDirIsNamed) {
  const auto msg = validation_message("[run]\noutput_dir = runs/${nope}/x\n");
  EXPECT_NE(msg.find("test.ini:2: run.output_dir: 'runs/${nope}/x': '${nope}' is not a variable it knows"),
            std::string::npos)
      << msg;
  EXPECT_EQ(validation_message("[run]\nname = a\noutput_dir = runs/${name}/${run.name}\n"), "");
}

// What a shell would expand is refused, not made into folders named '$SCRATCH' or '~' in the
// working directory; a run named . or .. would write into runs/ or the working directory.
TEST(Deck, ShellWordsInOutputDirAndDotNamesAreRefused) {
  auto expect = [](const std::string& deck, const std::string& text) {
    const auto msg = validation_message(deck);
    EXPECT_NE(msg.find(text), std::string::npos) << msg;
  };
  expect("[run]\noutput_dir = $SCRATCH/runs/${name}\n",
         "test.ini:2: run.output_dir: '$SCRATCH/runs/trident': trident does not expand the environment ('$SCRATCH')");
  expect("[run]\noutput_dir = ~/runs\n", "test.ini:2: run.output_dir: '~/runs': trident does not expand '~'");
  expect("[run]\nname = ..\n", "test.ini:2: run.name: '..' is a folder's own name");
  expect("[run]\nname = .\n", "run.name: '.' is a folder's own name");
  expect("[run]\noutput_dir = runs/$(date)\n", "trident does not expand the environment ('$')");
  EXPECT_EQ(validation_message("[run]\nname = ...\noutput_dir = runs/a~b/${name}/$/x$-y\n"), "");
}

// Values the optimizer cannot use: weights scaled by 1 - lr x weight_decay <= 0 each step; an eps
// that is 0 in float32 (0/0 at a zero gradient, reported as divergence); a bucket size whose byte
// count overflows; a clip that makes float32's divisor infinite (every update 0); a peak that
// makes the MFU infinite.
TEST(Deck, OptimizerValuesThatCannotTrainAreRefused) {
  auto expect = [](const std::string& deck, const std::string& text) {
    const auto msg = validation_message(deck);
    EXPECT_NE(msg.find(text), std::string::npos) << msg;
  };
  expect("[optim]\nlr = 1e-3\nweight_decay = 5000\n", "optim.weight_decay: 5000 x optim.lr (0.001) = ");
  expect("[optim]\nlr = 1e-3\nweight_decay = 1000\n", "is 1 or more: each step would scale the weights by");
  expect("[optim]\nname = sgd\nlr = 0.1\nweight_decay = 10\n", "the L2 term alone would take each step past zero");
  expect("[optim]\neps = 1e-50\n", "optim.eps: 1e-50 is out of range (at least 1.17549e-38");
  expect("[parallel]\nbucket_mb = 1e13\n", "parallel.bucket_mb: 10000000000000 is out of range (more than 0, at most 1048576)");
  expect("[optim]\nclip_grad_norm = 1e-300\n", "optim.clip_grad_norm: 1e-300 is out of range (0 = off, or at least 1e-06");
  expect("[run]\npeak_tflops = 1e-300\n", "run.peak_tflops: 1e-300 is out of range (0 = the GPU's known peak, or at least 0.001");
  EXPECT_EQ(validation_message("[optim]\nclip_grad_norm = 0\n[run]\npeak_tflops = 0\n"), "") << "0: off, the known peak";
  EXPECT_EQ(validation_message("[optim]\nclip_grad_norm = 1e-6\n[run]\npeak_tflops = 0.001\n"), "") << "the bounds";
  EXPECT_EQ(validation_message("[optim]\nlr = 1e-3\nweight_decay = 0.1\neps = 1e-8\n[parallel]\nbucket_mb = 25\n"), "");
}

// A rule broken by a --set value names that --set, not a line of the deck that is not there.
TEST(Deck, RuleBrokenByAnOverrideNamesTheOverride) {
  const auto msg = bad_input_message([] {
    const auto deck = parse_deck_text("[optim]\nlr = 1e-3\n", "test.ini", {"optim.micro_batch=0"});
    config::validate_or_throw(deck, {1, false});
  });
  EXPECT_NE(msg.find("  --set optim.micro_batch=0: optim.micro_batch: 0 is out of range"), std::string::npos) << msg;
}

// A rule between two keys is reported on the first key's line; when a --set of the other broke it,
// that --set is named too (it read as the deck's own weight_decay line being wrong).
TEST(Deck, RuleBetweenKeysNamesTheOtherKeysOverride) {
  const auto message_of = [](const std::string& text, const std::vector<std::string>& sets) {
    return bad_input_message([&] {
      const auto deck = parse_deck_text(text, "test.ini", sets);
      config::validate_or_throw(deck, {1, false});
    });
  };
  // The deck's own values break it: its line, nothing more.
  const auto from_deck = message_of("[optim]\nlr = 1e-3\nweight_decay = 2000\n", {});
  EXPECT_NE(from_deck.find("test.ini:3: optim.weight_decay: 2000 x optim.lr (0.001) = 2 is 1 or more"), std::string::npos)
      << from_deck;
  EXPECT_EQ(from_deck.find("from --set"), std::string::npos) << from_deck;
  // lr from a --set: the weight_decay line, and the --set.
  const auto msg = message_of("[optim]\nlr = 1e-3\nweight_decay = 0.5\n", {"optim.lr=4"});
  EXPECT_NE(msg.find("test.ini:3: optim.weight_decay: 0.5 x optim.lr (4) = 2 is 1 or more"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(optim.lr from --set optim.lr=4)"), std::string::npos) << msg;
  // A key whose name starts with another's (optim.lr_schedule and optim.lr) is not that key.
  EXPECT_TRUE(config::names_key("optim.lr (4) is", "optim.lr"));
  EXPECT_TRUE(config::names_key("and optim.lr.", "optim.lr"));
  EXPECT_FALSE(config::names_key("optim.lr_schedule: 'x'", "optim.lr"));
  EXPECT_FALSE(config::names_key("xoptim.lr", "optim.lr"));
}

// Boost reads a value up to a NUL byte and dropped the rest silently; UTF-16 text has one after
// every ASCII letter.
TEST(Deck, NulBytesAreRefusedWithTheirLine) {
  const char raw[] = "[optim]\nlr = 1e-3\0junk\n";
  const std::string text(raw, sizeof(raw) - 1);
  const auto msg = bad_input_message([&] { parse_deck_text(text, "d.ini", {}); });
  EXPECT_NE(msg.find("d.ini:2: a NUL byte: a deck is UTF-8 text"), std::string::npos) << msg;
}

// A deck is read whole, and no more than 1 MiB of it: an endless device is not a deck.
TEST(Deck, EndlessFilesAreNotDecks) {
  EXPECT_NE(bad_input_message([] { config::load_deck("/dev/zero", {}); }).find("bad deck /dev/zero: larger than 1 MiB"),
            std::string::npos);
  EXPECT_EQ(bad_input_message([] { config::load_deck("/dev/null", {}); }), "");  // the empty deck
}

// What two ranks' decks differ in, listed from their values, not from a deck text parsed again (a
// '#' in a value would read as a comment there and list a key that is the same on both).
TEST(Deck, RanksDeckDifferenceListsOnlyTheKeysThatDiffer) {
  trident::config::Deck rank0, mine;
  rank0.data.path = mine.data.path = "d#1.h5";
  rank0.optim.lr = 1e-3;
  mine.optim.lr = 0.5;
  const auto a = trident::train::deck_and_resume_values(rank0, "auto");
  EXPECT_EQ(trident::train::deck_difference(a, a), "");
  EXPECT_EQ(trident::train::deck_difference(a, trident::train::deck_and_resume_values(mine, "auto")), "optim.lr 0.001 -> 0.5");
  EXPECT_EQ(trident::train::deck_difference(a, trident::train::deck_and_resume_values(rank0, "never")), "--resume auto -> never");
}
