#include "config/deck.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <cctype>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.hpp"


namespace trident::config {

// ---- typed conversion of one value --------------------------------------------------------

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool parse_value(const std::string& text, std::string& out) {
  out = trim(text);
  return true;
}
bool parse_value(const std::string& text, int64_t& out) {
  const std::string t = trim(text);
  if (t.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(t.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  out = v;
  return true;
}
bool parse_value(const std::string& text, double& out) {
  const std::string t = trim(text);
  if (t.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  // inf and nan are numbers to strtod, but no key means anything by them (an infinite
  // learning rate, timeout or clipping threshold is a typo or a test of the parser).
  // errno's ERANGE is left aside: an underflow (1e-320) is the tiny number it reads as, and an
  // overflow reads as inf, refused here.
  if (*end != '\0' || !std::isfinite(v)) return false;
  out = v;
  return true;
}

bool parse_value(const std::string& text, bool& out) {
  const std::string t = trim(text);
  if (t == "true" || t == "on" || t == "yes" || t == "1") out = true;
  else if (t == "false" || t == "off" || t == "no" || t == "0") out = false;
  else return false;
  return true;
}

std::string to_text(const std::string& v) { return v; }
std::string to_text(bool v) { return v ? "true" : "false"; }
std::string to_text(int64_t v) { return std::to_string(v); }
std::string to_text(double v) { return fmt::format("{}", v); }

const char* type_word(const std::string*) { return "text"; }
const char* type_word(const int64_t*) { return "integer"; }
const char* type_word(const double*) { return "number"; }
const char* type_word(const bool*) { return "true or false"; }

struct FieldAccess {
  FieldInfo info;
  std::function<bool(Deck&, const std::string&)> set;  // false: not a value of the type
  std::function<std::string(const Deck&)> get;
};

const std::vector<FieldAccess>& accessors() {
  static const std::vector<FieldAccess> list = [] {
    std::vector<FieldAccess> v;
#define TRIDENT_DECK_ACCESS(section_, key_, type_, default_value, help_)                         \
  v.push_back(FieldAccess{                                                                       \
      FieldInfo{#section_, #key_, type_word(static_cast<const type_*>(nullptr)),                 \
                to_text(type_(default_value)), help_},                                           \
      [](Deck& d, const std::string& text) { return parse_value(text, d.section_.key_); },       \
      [](const Deck& d) { return to_text(d.section_.key_); }});
    TRIDENT_DECK_FIELDS(TRIDENT_DECK_ACCESS)
#undef TRIDENT_DECK_ACCESS
    return v;
  }();
  return list;
}

const FieldAccess* find_field(const std::string& name) {
  for (const auto& f : accessors())
    if (f.info.name() == name) return &f;
  return nullptr;
}

// What a value of the field's type is, for "X is not ...".
std::string a_value_of(const FieldAccess& field) {
  const std::string& type = field.info.type;
  if (type == "integer") return "an integer";
  if (type == "number") return "a finite number";
  if (type == "true or false") return "true or false (yes/no, on/off and 1/0 are read too)";
  return type;  // "text"
}

// Where a key's value came from in the deck file, for messages: "deck.ini:12" (the file alone for
// a key it does not set).
std::string where(const Deck& deck, const std::string& name) {
  const auto line = deck.lines.find(name);
  return line != deck.lines.end() ? fmt::format("{}:{}", deck.source, line->second) : deck.source;
}

// Where a line's comment begins (npos: none). In a user's deck, a '#' at the start of a line or
// after a blank: a value may hold one (data.path = runs/#3/data.h5, as in --set), where a '#'
// anywhere cut it short without a word (the path read as "runs/"). In a deck trident wrote
// (deck_to_ini, kept in each checkpoint), whole lines only: its values are written as they are, and
// one holding " #" must read back the same, or a resume would list it as changed.
enum class Comments { after_a_blank, whole_lines };
size_t comment_start(const std::string& line, Comments comments) {
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') continue;
    if (line[i] == '#') return i;  // (only blanks before it)
    if (comments == Comments::whole_lines) return std::string::npos;
    break;
  }
  for (size_t i = 1; i < line.size(); ++i)
    if (line[i] == '#' && (line[i - 1] == ' ' || line[i - 1] == '\t')) return i;
  return std::string::npos;
}

// Every line of a deck ("# comment", "[section]", "key = value", and "section.key = value" before
// any section, as --set writes it): the known keys' values as text, with their lines; each broken
// line is named with its number in `errors`, so one pass lists them all.
struct DeckLine {
  std::string name, value;
  int line;
};

std::vector<DeckLine> read_lines(const std::string& text, const std::string& source, Comments comments,
                                 std::vector<std::string>& errors) {
  std::vector<DeckLine> values;
  std::istringstream in(text);
  std::string line, section;
  std::map<std::string, int> first_line_of;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string t = trim(line.substr(0, comment_start(line, comments)));
    if (t.empty()) continue;
    // A section header ends at its ']': "[run]# note" is [run] (a name holds no '#').
    if (const auto close = t.find(']'); t.front() == '[' && close != std::string::npos && close + 1 < t.size() &&
                                        t[close + 1] == '#')
      t.resize(close + 1);
    if (t.front() == '[' && t.back() == ']') {
      section = trim(t.substr(1, t.size() - 2));  // ([ run ] is [run])
      continue;
    }
    const auto eq = t.find('=');
    if (eq == std::string::npos) {
      errors.push_back(fmt::format("{}:{}: syntax error: the line '{}' is not 'key = value', a [section] or a # comment",
                                   source, n, t));
      continue;
    }
    const std::string key = trim(t.substr(0, eq));
    const std::string name = section.empty() ? key : section + "." + key;
    if (find_field(name)) {
      const auto [first, inserted] = first_line_of.emplace(name, n);
      if (!inserted)
        errors.push_back(fmt::format("{}:{}: key '{}' is given more than once (first on line {})", source, n, name,
                                     first->second));
      else
        values.push_back({name, trim(t.substr(eq + 1)), n});
    } else if (section.empty()) {
      std::string home;  // the section a key of this name belongs to, when there is one
      for (const auto& f : accessors())
        if (f.info.key == key) home = home.empty() ? f.info.section : "?";
      errors.push_back(fmt::format("{}:{}: key '{}' comes before any [section]{}", source, n, key,
                                   home.empty() || home == "?" ? "" : fmt::format(" (it belongs under [{}])", home)));
    } else {
      errors.push_back(fmt::format("{}:{}: unknown key '{}' (trident train --help-deck lists every key)", source, n, name));
    }
  }
  return values;
}

[[noreturn]] void throw_all(const std::string& source, const std::vector<std::string>& errors) {
  std::string msg = fmt::format("bad deck {}: {} error{}", source, errors.size(), errors.size() > 1 ? "s" : "");
  for (const auto& e : errors) msg += "\n  " + e;
  throw BadInput(msg);
}

}  // namespace

const std::vector<FieldInfo>& deck_fields() {
  static const std::vector<FieldInfo> list = [] {
    std::vector<FieldInfo> v;
    for (const auto& f : accessors()) v.push_back(f.info);
    return v;
  }();
  return list;
}

// ---- reading -----------------------------------------------------------------------------

namespace {

Deck parse(const std::string& raw_text, const std::string& source, Comments comments,
           const std::vector<std::string>& overrides, std::vector<std::string>* problems) {
  Deck deck;
  deck.source = source;
  // A UTF-8 byte-order mark (Windows editors write one) is not part of the first line.
  static const std::string kByteOrderMark = "\xEF\xBB\xBF";
  const std::string text = raw_text.compare(0, kByteOrderMark.size(), kByteOrderMark) == 0
                               ? raw_text.substr(kByteOrderMark.size())
                               : raw_text;
  std::vector<std::string> errors;
  // Boost reads a value up to a NUL byte and drops the rest (lr = 1e-3<NUL>junk ran as 0.001);
  // a UTF-16 deck (Windows "Unicode") has one after every ASCII letter.
  if (const auto nul = text.find('\0'); nul != std::string::npos)
    throw_all(source, {fmt::format("{}:{}: a NUL byte: a deck is UTF-8 text (saved as UTF-16? save it as UTF-8)", source,
                                   1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(nul), '\n'))});

  // Every value is read as text and converted here, so a wrong type gets a message naming the
  // key, its line and the expected type.
  // A value with a '#' of its own says the rule: a '#' anywhere began a comment before.
  static const char* const kCommentRule = "a '#' begins a comment only at the start of a line or after a blank";
  for (const auto& [name, raw, line] : read_lines(text, source, comments, errors)) {
    deck.lines[name] = line;
    const bool holds_hash = raw.find('#') != std::string::npos;
    if (const FieldAccess* field = find_field(name); !field->set(deck, raw))
      errors.push_back(fmt::format("{}:{}: {} = '{}' is not {}{}", source, line, name, raw, a_value_of(*field),
                                   holds_hash ? fmt::format(" ({})", kCommentRule) : ""));
    else if (holds_hash && comments == Comments::after_a_blank)
      deck.notes.push_back(fmt::format("{}:{}: {} = '{}': the '#' is part of the value ({}; trident before 2026-11-26 "
                                       "read one anywhere as a comment)",
                                       source, line, name, raw, kCommentRule));
  }
  for (const auto& item : overrides) {
    const auto eq = item.find('=');
    const std::string name = trim(item.substr(0, eq));
    const FieldAccess* field = eq == std::string::npos ? nullptr : find_field(name);
    if (eq == std::string::npos) {
      errors.push_back(fmt::format("--set {}: expected section.key=value", item));
    } else if (!field) {
      errors.push_back(fmt::format("--set {}: unknown key '{}' (trident train --help-deck lists every key)", item, name));
    } else if (!field->set(deck, item.substr(eq + 1))) {
      errors.push_back(fmt::format("--set {}: {} is not {}", item, name, a_value_of(*field)));
    } else {
      deck.overridden[name] = item;
    }
  }
  if (problems) problems->insert(problems->end(), errors.begin(), errors.end());
  else if (!errors.empty()) throw_all(source, errors);

  // ${name} / ${run.name} in output_dir: one run folder per named run.
  for (const std::string token : {"${name}", "${run.name}"}) {
    // Searching on after the inserted name: a name that itself contains "${name}" (found by
    // tests/fuzz) would otherwise expand forever.
    for (auto pos = deck.run.output_dir.find(token); pos != std::string::npos;
         pos = deck.run.output_dir.find(token, pos + deck.run.name.size()))
      deck.run.output_dir.replace(pos, token.size(), deck.run.name);
  }
  return deck;
}

}  // namespace

Deck parse_deck_text(const std::string& text, const std::string& source, const std::vector<std::string>& overrides,
                     std::vector<std::string>* problems) {
  return parse(text, source, Comments::after_a_blank, overrides, problems);
}

Deck parse_written_deck(const std::string& text, const std::string& source) {
  return parse(text, source, Comments::whole_lines, {}, nullptr);
}

Deck load_deck(const std::string& path, const std::vector<std::string>& overrides, std::vector<std::string>* problems) {
  // An ifstream opens a folder and reads nothing from it: the deck would be empty and the run
  // would fail later, on a key the user never wrote.
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (fs::is_directory(status))
    throw BadInput(fmt::format("bad deck {}: it is a folder, not a deck file (trident train DECK.ini)", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadInput(fmt::format("bad deck {}: cannot open the file", path));
  // Decks are a few KB; /dev/zero or a dataset given by mistake would be read whole otherwise.
  // (A pipe is read as a deck: trident train <(sed ... deck.ini).)
  constexpr std::streamsize kMaxDeckBytes = 1 << 20;
  std::string text(static_cast<size_t>(kMaxDeckBytes) + 1, '\0');
  in.read(text.data(), kMaxDeckBytes + 1);
  text.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<std::streamsize>(text.size()) > kMaxDeckBytes)
    throw BadInput(fmt::format("bad deck {}: larger than 1 MiB, not a deck (trident train DECK.ini)", path));
  return parse_deck_text(text, path, overrides, problems);
}

// ---- validation ---------------------------------------------------------------------------

int64_t resolved_dp(const Deck& deck, int world_size) {
  if (deck.parallel.dp == "auto") return deck.parallel.pp > 0 ? world_size / deck.parallel.pp : world_size;
  int64_t dp = 0;
  return parse_value(deck.parallel.dp, dp) ? dp : 0;
}

int64_t resolved_micro_batch(const Deck& deck, int world_size) {
  int64_t micro = 0;
  if (deck.optim.micro_batch != "auto") return parse_value(deck.optim.micro_batch, micro) && micro >= 1 ? micro : 0;
  const int64_t dp = resolved_dp(deck, world_size);
  if (dp < 1 || deck.optim.global_batch < dp || deck.optim.global_batch % dp != 0) return 0;
  const int64_t per_rank = deck.optim.global_batch / dp;
  for (micro = std::min(per_rank, deck.optim.max_micro_batch); micro > 1; --micro)
    if (per_rank % micro == 0) break;
  return std::max<int64_t>(micro, 1);
}

std::vector<int64_t> hidden_sizes(const Deck& deck) {
  std::vector<int64_t> sizes;
  // getline drops an empty last item: "16," would read as "16", while "16,,8" is refused.
  if (trim(deck.model.hidden).empty() || trim(deck.model.hidden).back() == ',') return {};
  std::stringstream in(deck.model.hidden);
  std::string item;
  while (std::getline(in, item, ',')) {
    int64_t v = 0;
    if (!parse_value(item, v)) return {};
    sizes.push_back(v);
  }
  return sizes;
}

constexpr int64_t kMaxThreads = 1024;
// Counts kept as int (checkpoints kept, layer indices), and counts of things per rank that
// nobody needs more than a thousand of (micro-batches read ahead, pipeline chunks per rank): a
// larger value wrapped to another, or to 0, which pruned every checkpoint.
constexpr int64_t kMaxIntCount = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxPerRank = 1024;

std::vector<std::string> validate(const Deck& d, const Environment& env) {
  std::vector<std::string> errors;
  auto fail = [&](const std::string& key, const std::string& text) {
    errors.push_back(fmt::format("{}: {}", key, text));
  };
  auto one_of = [&](const std::string& key, const std::string& value, std::set<std::string> allowed) {
    if (allowed.count(value)) return true;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : " | ") + a;
    fail(key, fmt::format("'{}' is not one of {}", value, list));
    return false;
  };
  auto at_least = [&](const std::string& key, double value, double min) {
    if (value < min) fail(key, fmt::format("{} is out of range (must be >= {})", value, min));
  };
  auto at_most = [&](const std::string& key, int64_t value, int64_t max, const char* why) {
    if (value > max) fail(key, fmt::format("{} is out of range (at most {}{})", value, max, why));
  };

  if (d.run.name.empty() || !std::regex_match(d.run.name, std::regex("[A-Za-z0-9_.+-]+")))
    fail("run.name", fmt::format("'{}' must be non-empty and use only letters, digits and _ . + -", d.run.name));
  else if (d.run.name == "." || d.run.name == "..")  // runs/${name} would be runs/ or the working directory
    fail("run.name", fmt::format("'{}' is a folder's own name: give the run a name of its own", d.run.name));
  if (d.run.output_dir.empty()) fail("run.output_dir", "must not be empty");
  // A shell's word in a deck (trident expands ${name} only): $SCRATCH/runs or ~/runs made folders
  // named '$SCRATCH' and '~' in the working directory.
  for (size_t at = d.run.output_dir.find('$'); at != std::string::npos; at = d.run.output_dir.find('$', at + 1))
    if (at + 1 < d.run.output_dir.size() && d.run.output_dir[at + 1] != '{' &&
        (std::isalnum(static_cast<unsigned char>(d.run.output_dir[at + 1])) || d.run.output_dir[at + 1] == '_' ||
         d.run.output_dir[at + 1] == '(')) {
      const size_t end = d.run.output_dir.find_first_not_of(
          "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_", at + 1);
      fail("run.output_dir", fmt::format("'{}': trident does not expand the environment ('{}'): write the path, or "
                                         "let the shell expand it (--set run.output_dir=\"{}\")",
                                         d.run.output_dir, d.run.output_dir.substr(at, end - at), d.run.output_dir));
      break;
    }
  if (d.run.output_dir[0] == '~')
    fail("run.output_dir", fmt::format("'{}': trident does not expand '~': write the path, or let the shell expand "
                                       "$HOME (--set run.output_dir=\"$HOME/...\")",
                                       d.run.output_dir));
  // Left after ${name} expanded (a run.name of its own ${...} is refused above, and would be named twice).
  if (const auto open = d.run.output_dir.find("${"); open != std::string::npos && d.run.name.find("${") == std::string::npos)
    fail("run.output_dir", fmt::format("'{}': '{}' is not a variable it knows (${{name}} or ${{run.name}})",
                                       d.run.output_dir, d.run.output_dir.substr(open, d.run.output_dir.find('}', open) - open + 1)));
  at_least("run.seed", static_cast<double>(d.run.seed), 0);
  at_least("run.max_steps", static_cast<double>(d.run.max_steps), 0);
  if (d.run.max_steps == 0) at_least("run.epochs", static_cast<double>(d.run.epochs), 1);
  else at_least("run.epochs", static_cast<double>(d.run.epochs), 0);
  at_least("run.log_every", static_cast<double>(d.run.log_every), 1);
  at_least("run.eval_every_steps", static_cast<double>(d.run.eval_every_steps), 0);
  at_least("run.eval_samples", static_cast<double>(d.run.eval_samples), 0);
  at_least("run.threads", static_cast<double>(d.run.threads), 0);
  if (d.run.threads > kMaxThreads)  // 100000 spent minutes creating threads before the first step
    fail("run.threads", fmt::format("{} is out of range (at most {}; 0 = the CPUs the rank may run on)", d.run.threads, kMaxThreads));
  // The watchdog beats every timeout / 10, at least every 10 ms and at most every second: below
  // 1 s the beats cannot keep up, and beyond 1e6 s (11 days) the nanosecond counts overflow.
  if (d.run.fail_timeout_s != 0 && !(d.run.fail_timeout_s >= 1 && d.run.fail_timeout_s <= 1e6))
    fail("run.fail_timeout_s", fmt::format("{} is out of range (0 = off, or 1 to 1e6 seconds)", d.run.fail_timeout_s));
  if (!(d.run.requeue_lock_wait_s >= 0 && d.run.requeue_lock_wait_s <= 1e6))
    fail("run.requeue_lock_wait_s", fmt::format("{} is out of range (0 to 1e6 seconds)", d.run.requeue_lock_wait_s));
  if (one_of("run.device", d.run.device, {"auto", "cpu", "cuda"}) && d.run.device == "cuda" && !env.cuda_available)
    fail("run.device", "'cuda' requested, but " + env.no_cuda_reason);

  if (d.data.path.empty()) fail("data.path", "must not be empty");
  at_least("data.prefetch", static_cast<double>(d.data.prefetch), 0);
  at_most("data.prefetch", d.data.prefetch, kMaxPerRank, " micro-batches");

  at_least("run.peak_tflops", d.run.peak_tflops, 0);
  // MFU is the achieved rate over this: a peak of 1e-300 reported an MFU of 1e300 or inf.
  if (d.run.peak_tflops > 0 && d.run.peak_tflops < 1e-3)
    fail("run.peak_tflops", fmt::format("{} is out of range (0 = the GPU's known peak, or at least 0.001 TFLOP/s)",
                                        d.run.peak_tflops));
  if (one_of("model.kind", d.model.kind, {"mlp", "cnn", "gpt"}) && d.model.kind == "mlp") {
    const auto sizes = hidden_sizes(d);
    bool ok = !sizes.empty();
    for (auto s : sizes) ok = ok && s >= 1;
    if (!ok) fail("model.hidden", fmt::format("'{}' must be a comma-separated list of positive widths", d.model.hidden));
  }

  if (d.model.kind == "gpt") {
    for (auto [key, v] : {std::pair<const char*, int64_t>{"model.layers", d.model.layers},
                          {"model.heads", d.model.heads},
                          {"model.d_model", d.model.d_model},
                          {"model.seq_len", d.model.seq_len}})
      at_least(key, static_cast<double>(v), 1);
    at_least("model.vocab", static_cast<double>(d.model.vocab), 0);
    if (d.model.heads >= 1 && d.model.d_model >= 1 && d.model.d_model % d.model.heads != 0)
      fail("model.d_model", fmt::format("{} is not divisible by model.heads({})", d.model.d_model, d.model.heads));
  }

  if (d.model.recompute && d.model.kind != "gpt")
    fail("model.recompute", fmt::format("recomputes a GPT's transformer blocks; model.kind = {} has none (its layers "
                                        "hold little more than their outputs for the backward)",
                                        d.model.kind));

  const int64_t pp = d.parallel.pp;
  if (pp < 1) fail("parallel.pp", fmt::format("{} is out of range (must be >= 1)", pp));
  if (!std::regex_match(d.parallel.boundaries, std::regex(" *([0-9]+ *(, *[0-9]+ *)*)?"))) {
    fail("parallel.boundaries", fmt::format("'{}' must be a comma-separated list of layer indices", d.parallel.boundaries));
  } else {
    std::stringstream in(d.parallel.boundaries);
    std::string item;
    while (std::getline(in, item, ',')) {
      int64_t index = 0;
      if (!parse_value(item, index)) {  // past 64 bits (those within are checked against the model's layers)
        fail("parallel.boundaries",
             fmt::format("{} is out of range for a layer index{}", trim(item),
                         trim(item) == trim(d.parallel.boundaries) ? "" : " (in '" + d.parallel.boundaries + "')"));
        break;
      }
    }
  }
  int64_t dp = 0;
  if (d.parallel.dp != "auto" && (!parse_value(d.parallel.dp, dp) || dp < 1)) {
    fail("parallel.dp", fmt::format("'{}' must be auto or a positive integer", d.parallel.dp));
  } else if (pp >= 1) {
    dp = resolved_dp(d, env.world_size);
    if (pp > env.world_size)
      fail("parallel.pp", fmt::format("{} pipeline stages, but the job has only {} rank{} (each stage needs one)", pp,
                                      env.world_size, env.world_size == 1 ? "" : "s"));
    else if (dp > std::numeric_limits<int64_t>::max() / pp)  // dp x pp below would overflow
      fail("parallel.dp", fmt::format("dp({}) x pp({}) > world size {}", dp, pp, env.world_size));
    else if (d.parallel.dp == "auto" && env.world_size % pp != 0)
      fail("parallel.pp", fmt::format("world size {} is not divisible by parallel.pp({})", env.world_size, pp));
    else if (dp * pp != env.world_size)
      fail("parallel.dp", fmt::format("dp({}) x pp({}) = {} != world size {}", dp, pp, dp * pp, env.world_size));
    // Each replica evaluates its share of them; one with none would miss the forwards whose
    // collectives (ZeRO-3's gathers) the others wait in.
    else if (d.run.eval_samples > 0 && d.run.eval_samples < dp)
      fail("run.eval_samples", fmt::format("{} is fewer than the {} data-parallel replicas, which each evaluate a share "
                                           "of them: give at least {} (or 0 = the whole test split)",
                                           d.run.eval_samples, dp, dp));
  }
  if (d.parallel.zero < 0 || d.parallel.zero > 3)
    fail("parallel.zero", fmt::format("{} is out of range (0 | 1 | 2 | 3)", d.parallel.zero));
  if (one_of("parallel.balance", d.parallel.balance, {"params", "time"}) && d.parallel.balance == "time" &&
      !d.parallel.boundaries.empty())
    fail("parallel.balance", fmt::format("'time' balances a cut trident makes, but parallel.boundaries = '{}' fixes "
                                         "the cut: set one of the two",
                                         d.parallel.boundaries));
  one_of("parallel.schedule", d.parallel.schedule, {"gpipe", "1f1b", "zb-h1", "interleaved"});
  const int64_t v = d.parallel.virtual_stages;
  if (d.parallel.schedule == "interleaved") {
    if (v < 2) fail("parallel.virtual_stages", fmt::format("{}: the interleaved schedule needs at least 2 chunks per rank", v));
    else at_most("parallel.virtual_stages", v, kMaxPerRank, " chunks per rank");
    if (pp == 1) fail("parallel.schedule", "interleaved needs a pipeline (parallel.pp >= 2)");
  } else if (v != 1) {
    fail("parallel.virtual_stages", fmt::format("{}: several chunks per rank need parallel.schedule = interleaved", v));
  }
  if (one_of("parallel.backend", d.parallel.backend, {"auto", "mpi", "nccl"}) && d.parallel.backend == "nccl") {
    if (!env.cuda_available) fail("parallel.backend", "'nccl' requested, but " + env.no_cuda_reason);
    else if (d.run.device == "cpu") fail("parallel.backend", "'nccl' moves CUDA tensors; run.device = cpu trains on the CPU (use mpi)");
  }
  // (at most a TiB: the byte count, bucket_mb x 2^20, past 2^63 wrapped to a bucket per tensor)
  if (!(d.parallel.bucket_mb > 0 && d.parallel.bucket_mb <= 1 << 20))
    fail("parallel.bucket_mb", fmt::format("{} is out of range (more than 0, at most {})", d.parallel.bucket_mb, 1 << 20));

  one_of("optim.name", d.optim.name, {"adamw", "sgd"});
  if (!(d.optim.lr > 0)) fail("optim.lr", fmt::format("{} must be > 0", d.optim.lr));
  one_of("optim.lr_schedule", d.optim.lr_schedule, {"constant", "cosine"});
  at_least("optim.warmup_steps", static_cast<double>(d.optim.warmup_steps), 0);
  if (d.optim.lr > 0 && (d.optim.min_lr < 0 || d.optim.min_lr > d.optim.lr))
    fail("optim.min_lr", fmt::format("{} is out of range (0 <= min_lr <= optim.lr = {})", d.optim.min_lr, d.optim.lr));
  at_least("optim.weight_decay", d.optim.weight_decay, 0);
  // AdamW scales the weights by 1 - lr x weight_decay each step, SGD's L2 term subtracts lr x
  // weight_decay x the weights: at 1 or more they are zeroed or flip sign.
  if (d.optim.lr > 0 && d.optim.weight_decay > 0 && d.optim.lr * d.optim.weight_decay >= 1)
    fail("optim.weight_decay",
         fmt::format("{} x optim.lr ({}) = {} is 1 or more: {} (weight_decay is per unit of lr: {} is usual)",
                     d.optim.weight_decay, d.optim.lr, d.optim.lr * d.optim.weight_decay,
                     d.optim.name == "sgd" ? "the L2 term alone would take each step past zero"
                                           : fmt::format("each step would scale the weights by {}",
                                                         1 - d.optim.lr * d.optim.weight_decay),
                     d.optim.name == "sgd" ? "1e-4 to 5e-4" : "0.01 to 0.1"));
  for (auto [key, v] : {std::pair<const char*, double>{"optim.momentum", d.optim.momentum},
                        {"optim.beta1", d.optim.beta1},
                        {"optim.beta2", d.optim.beta2}})
    if (v < 0 || v >= 1) fail(key, fmt::format("{} is out of range (0 <= value < 1)", v));
  // The optimizer state is float32: a smaller eps is 0 there, and a gradient of exactly 0 gives 0/0.
  if (!(d.optim.eps >= std::numeric_limits<float>::min()))
    fail("optim.eps", fmt::format("{} is out of range (at least {:g}, the smallest normal float32)", d.optim.eps,
                                  std::numeric_limits<float>::min()));
  at_least("optim.clip_grad_norm", d.optim.clip_grad_norm, 0);
  // The gradients are divided by (norm + 1e-6) / clip_grad_norm in float32: a clip of 1e-300
  // made that divisor infinite and every update 0, a run that trains nothing and says nothing.
  if (d.optim.clip_grad_norm > 0 && d.optim.clip_grad_norm < 1e-6)
    fail("optim.clip_grad_norm",
         fmt::format("{} is out of range (0 = off, or at least 1e-06: a smaller clip scales the gradients toward "
                     "float32's underflow)",
                     d.optim.clip_grad_norm));
  if (one_of("optim.precision", d.optim.precision, {"fp32", "bf16", "fp16"}) && d.optim.precision == "fp16" &&
      (!env.cuda_available || d.run.device == "cpu"))
    fail("optim.precision", "'fp16' needs a GPU (run.device = cuda); on the CPU autocast computes in bf16 only");
  at_least("optim.global_batch", static_cast<double>(d.optim.global_batch), 1);
  at_least("optim.max_micro_batch", static_cast<double>(d.optim.max_micro_batch), 1);
  int64_t micro = 0;
  // A dp the layout check refused (one past the world size may be anything) is not divided by.
  const bool dp_fits = dp >= 1 && dp <= env.world_size;
  if (d.optim.micro_batch == "auto") {
    if (d.optim.global_batch >= 1 && dp_fits && d.optim.global_batch % dp != 0)
      fail("optim.global_batch", fmt::format("{} is not divisible by dp({}) (optim.micro_batch = auto splits "
                                             "global_batch / dp into micro-batches)",
                                             d.optim.global_batch, dp));
  } else if (!parse_value(d.optim.micro_batch, micro)) {
    fail("optim.micro_batch", fmt::format("'{}' must be auto or a positive integer", d.optim.micro_batch));
  } else if (micro < 1) {
    fail("optim.micro_batch", fmt::format("{} is out of range (must be >= 1)", micro));
  } else if (d.optim.global_batch >= 1 && dp_fits && micro > d.optim.global_batch / dp) {  // (micro x dp could overflow)
    fail("optim.micro_batch", fmt::format("{} is more than a replica's share of the global batch: optim.global_batch({}) / "
                                          "dp({}) = {}",
                                          micro, d.optim.global_batch, dp, d.optim.global_batch / dp));
  } else if (d.optim.global_batch >= 1 && dp_fits && d.optim.global_batch % (micro * dp) != 0) {
    fail("optim.global_batch", fmt::format("{} is not divisible by optim.micro_batch({}) x dp({}) = {} (or set "
                                           "optim.micro_batch = auto)",
                                           d.optim.global_batch, micro, dp, micro * dp));
  }

  at_least("checkpoint.every_steps", static_cast<double>(d.checkpoint.every_steps), 0);
  at_least("checkpoint.every_minutes", d.checkpoint.every_minutes, 0);
  at_least("checkpoint.keep_last", static_cast<double>(d.checkpoint.keep_last), 1);
  at_most("checkpoint.keep_last", d.checkpoint.keep_last, kMaxIntCount, "");
  return errors;
}

// Whether `text` names `key` as a word ("optim.lr", not a part of "optim.lr_schedule").
bool names_key(const std::string& text, const std::string& key) {
  const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    const size_t end = at + key.size();  // (a '.' after a key ends a sentence: no key has three parts)
    if ((at == 0 || !(word(text[at - 1]) || text[at - 1] == '.')) && (end == text.size() || !word(text[end])))
      return true;
  }
  return false;
}

namespace {

// `message` about `key`, after where the key's value came from: "--set k=v" or "deck.ini:12". A
// rule between keys (weight_decay x lr) is about the first, yet a --set of another may be what
// broke it: the other keys the message names that a --set gave follow, with their --set.
std::string located_at(const Deck& deck, const std::string& key, const std::string& message) {
  const auto set = deck.overridden.find(key);
  std::string located = fmt::format(
      "{}: {}", set != deck.overridden.end() ? "--set " + set->second : where(deck, key), message);
  for (const auto& [name, item] : deck.overridden)
    if (name != key && names_key(message, name))
      located += fmt::format(" ({} from --set {})", name, item);
  return located;
}

std::string key_of(const std::string& message) { return message.substr(0, message.find(':')); }

}  // namespace

void validate_or_throw(const Deck& deck, const Environment& env, const std::vector<std::string>& earlier) {
  const auto errors = validate(deck, env);
  if (errors.empty() && earlier.empty()) return;
  // Point each message at the key's line in the deck when we can find it.
  std::vector<std::string> located = earlier;
  for (const auto& e : errors) located.push_back(located_at(deck, key_of(e), e));
  throw_all(deck.source, located);
}

std::string locate(const Deck& deck, const std::string& message) {
  const std::string key = key_of(message);
  const auto& fields = deck_fields();
  const bool is_key = std::any_of(fields.begin(), fields.end(), [&](const FieldInfo& f) { return f.name() == key; });
  return is_key ? located_at(deck, key, message) : message;
}

// ---- printing ----------------------------------------------------------------------------

std::vector<std::pair<std::string, std::string>> deck_values(const Deck& deck) {
  std::vector<std::pair<std::string, std::string>> v;
  for (const auto& f : accessors()) v.emplace_back(f.info.name(), f.get(deck));
  return v;
}

// The widest key, for a column of `key = value` lines whose '=' line up.
size_t key_column() {
  size_t width = 0;
  for (const auto& f : deck_fields()) width = std::max(width, f.key.size());
  return width;
}

std::string deck_help() {
  std::string out = "# Every key of a trident deck, with its default and meaning.\n";
  std::string section;
  for (const auto& f : deck_fields()) {
    if (f.section != section) {
      section = f.section;
      out += fmt::format("\n[{}]\n", section);
    }
    out += fmt::format("{:<{}} = {:<22} # ({}) {}\n", f.key, key_column(), f.default_text,
                       f.type == "true or false" ? "true or false; yes/no, on/off, 1/0 too" : f.type, f.help);
  }
  return out;
}

std::vector<std::string> changed_values(const std::vector<std::pair<std::string, std::string>>& before,
                                        const std::vector<std::pair<std::string, std::string>>& after) {
  std::vector<std::string> changed;
  auto shown = [](const std::string& value) { return value.empty() ? std::string("''") : value; };
  for (size_t i = 0; i < std::max(before.size(), after.size()); ++i) {
    if (i < before.size() && i < after.size() && before[i] == after[i]) continue;
    const std::string& key = i < after.size() ? after[i].first : before[i].first;
    changed.push_back(fmt::format("{} {} -> {}", key, shown(i < before.size() ? before[i].second : ""),
                                  shown(i < after.size() ? after[i].second : "")));
  }
  return changed;
}

std::vector<std::string> changed_keys(const Deck& before, const Deck& after) {
  return changed_values(deck_values(before), deck_values(after));
}

std::string deck_to_ini(const Deck& deck) {
  std::string out, section;
  for (const auto& f : accessors()) {
    if (f.info.section != section) {
      section = f.info.section;
      out += fmt::format("[{}]\n", section);
    }
    out += fmt::format("  {:<{}} = {}\n", f.info.key, key_column(), f.get(deck));
  }
  return out;
}

}  // namespace trident::config
