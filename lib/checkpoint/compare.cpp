#include "checkpoint/compare.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "config/deck.hpp"
#include "core/error.hpp"
#include "core/hdf5.hpp"

namespace trident::checkpoint {
namespace {

std::vector<std::string> dataset_names_of(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  hdf5::Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  return hdf5::dataset_names(file);
}

// "float32 [4 x 256]"; "" when HDF5 cannot read the tensor's header (a damaged file).
std::string shape_and_type(const std::string& path, const std::string& name) {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  try {
    hdf5::Hid file(HDF5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
    hdf5::Hid dataset(HDF5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT)));
    hdf5::Hid type(HDF5_CHECK(H5Dget_type(dataset)));
    std::string dims;
    for (const auto d : hdf5::dataset_shape(dataset)) dims += (dims.empty() ? "" : " x ") + std::to_string(d);
    return fmt::format("{} [{}]", hdf5::type_name(type), dims);
  } catch (const Fault&) {
    return "";
  }
}

// A tensor whose header cannot be read, or whose shape or type differs, may be damage (a header's
// bytes changed), which is bad input (exit 2), not a difference (exit 1): both files are verified
// then, block by block against their checksums, and the first problem is the message.
void refuse_if_damaged(const std::string& a, const std::string& b, const std::string& name) {
  for (const auto* path : {&a, &b})
    if (const auto problem = verify(*path, 0, 1); !problem.empty()) fatal_all("compare: " + problem);
  for (const auto* path : {&a, &b})
    if (shape_and_type(*path, name).empty())
      fatal_all(fmt::format("compare: checkpoint {}: the header of tensor {} cannot be read: the file is damaged", *path,
                            name));
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.contiguous(), y = b.contiguous();
  return x.nbytes() == y.nbytes() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// The resolved deck stored in a checkpoint, as (section.key, value) in its order.
std::vector<std::pair<std::string, std::string>> deck_pairs(const std::string& ini) {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::string section;
  size_t begin = 0;
  while (begin < ini.size()) {
    size_t end = ini.find('\n', begin);
    if (end == std::string::npos) end = ini.size();
    const std::string line = ini.substr(begin, end - begin);
    begin = end + 1;
    if (!line.empty() && line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    const size_t key_begin = line.find_first_not_of(' ');
    const size_t key_end = line.find_last_not_of(' ', eq);
    pairs.emplace_back(section + "." + line.substr(key_begin, key_end + 1 - key_begin), line.substr(eq + 3));
  }
  return pairs;
}

std::string layout_text(const Meta& m) {
  return fmt::format("step {}, written by {} rank(s): dp {} x pp {}, ZeRO {}; trident {}, LibTorch {}", m.step, m.world, m.dp,
                     m.pp, m.zero, m.trident_version, m.torch_version);
}

}  // namespace

Comparison compare(const std::string& a, const std::string& b, double relative_tolerance) {
  const Reader left(a), right(b);  // BadInput for a file that is not a readable checkpoint
  const Meta& ma = left.meta();
  const Meta& mb = right.meta();
  Comparison out;
  std::string& text = out.text;
  text += fmt::format("A {}: {}\nB {}: {}\n", a, layout_text(ma), b, layout_text(mb));
  // The deck: listed, not compared (output folders differ; a resume may change some keys).
  const auto deck_changes = config::changed_values(deck_pairs(ma.deck), deck_pairs(mb.deck));
  text += deck_changes.empty() ? "deck: the same\n" : "deck (listed, not compared): A -> B\n";
  for (const auto& change : deck_changes) text += "    " + change + "\n";

  // The training state a resume continues from.
  int state_values = 0, state_differing = 0;
  const auto state = [&](const char* what, double x, double y) {
    ++state_values;
    const double gap = std::abs(x - y);
    const bool equal = x == y || (relative_tolerance > 0 && gap <= relative_tolerance * std::abs(x));
    if (equal) return;
    ++state_differing;
    text += fmt::format("    {}: {} in A, {} in B\n", what, x, y);
  };
  text += "training state:\n";
  const auto before = text.size();
  state("step", static_cast<double>(ma.step), static_cast<double>(mb.step));
  state("epoch", static_cast<double>(ma.epoch), static_cast<double>(mb.epoch));
  state("data cursor", static_cast<double>(ma.cursor), static_cast<double>(mb.cursor));
  state("optimizer steps", static_cast<double>(ma.optimizer_steps), static_cast<double>(mb.optimizer_steps));
  state("global batch", static_cast<double>(ma.global_batch), static_cast<double>(mb.global_batch));
  state("loss scale", ma.loss_scale, mb.loss_scale);
  state("loss scale's good steps", static_cast<double>(ma.loss_scale_good_steps),
        static_cast<double>(mb.loss_scale_good_steps));
  state("skipped steps", static_cast<double>(ma.skipped_steps), static_cast<double>(mb.skipped_steps));
  state("epoch loss sum", ma.epoch_loss_sum, mb.epoch_loss_sum);
  state("epoch loss steps", static_cast<double>(ma.epoch_loss_steps), static_cast<double>(mb.epoch_loss_steps));
  if (text.size() == before) text += fmt::format("    the same ({} values)\n", state_values);

  // Tensors.
  const auto listed_a = dataset_names_of(a), listed_b = dataset_names_of(b);
  const std::set<std::string> names_a(listed_a.begin(), listed_a.end()), names_b(listed_b.begin(), listed_b.end());
  std::set<std::string> names = names_a;
  names.insert(names_b.begin(), names_b.end());
  const bool same_world = ma.world == mb.world;
  int compared = 0, bitwise = 0, differing = 0, shown = 0;
  double largest_relative = 0;
  std::string largest_name;
  constexpr int kShown = 30;
  std::string lines;
  const auto report = [&](const std::string& line) {
    ++differing;
    if (shown++ < kShown) lines += "    " + line + "\n";
  };
  for (const auto& name : names) {
    const bool rng = name.rfind("/rng/", 0) == 0;
    if (rng && !same_world) continue;  // one row per rank: files of different worlds differ in them by design
    const bool in_a = names_a.count(name) > 0, in_b = names_b.count(name) > 0;
    ++compared;
    if (!in_a || !in_b) {
      report(fmt::format("{}: only in {}", name, in_a ? "A" : "B"));
      continue;
    }
    const std::string kind_a = shape_and_type(a, name), kind_b = shape_and_type(b, name);
    if (kind_a.empty() || kind_b.empty() || kind_a != kind_b) refuse_if_damaged(a, b, name);
    if (kind_a != kind_b) {
      report(fmt::format("{}: {} in A, {} in B", name, kind_a, kind_b));
      continue;
    }
    const at::Tensor x = left.read_tensor(name), y = right.read_tensor(name);
    if (same_bits(x, y)) {
      ++bitwise;
      continue;
    }
    if (!x.is_floating_point()) {
      report(fmt::format("{} {}: {} of {} elements differ", name, kind_a, x.ne(y).sum().item<int64_t>(), x.numel()));
      continue;
    }
    const at::Tensor xd = x.to(at::kDouble), yd = y.to(at::kDouble);
    const double gap = (xd - yd).abs().max().item<double>();
    const double scale = xd.abs().max().item<double>();
    const double relative = scale > 0 ? gap / scale : std::numeric_limits<double>::infinity();
    if (!(relative <= largest_relative)) {  // (NaN counts as the largest)
      largest_relative = relative;
      largest_name = name;
    }
    if (relative_tolerance > 0 && relative <= relative_tolerance) continue;
    report(fmt::format("{} {}: largest difference {:.3g} = {:.3g} x A's largest magnitude {:.3g}, {} of {} elements differ",
                       name, kind_a, gap, relative, scale, x.ne(y).sum().item<int64_t>(), x.numel()));
  }
  text += fmt::format("tensors: {} compared{}\n", compared,
                      same_world ? "" : fmt::format(" (RNG states not: written by {} and {} ranks)", ma.world, mb.world));
  text += lines;
  if (shown > kShown) text += fmt::format("    ... and {} more\n", shown - kShown);
  out.differing = differing + state_differing;
  if (out.differing == 0) {
    text += relative_tolerance > 0 && bitwise < compared
                ? fmt::format("equal within a relative {:g}: {} tensors ({} bit for bit, largest relative difference "
                              "{:.3g} in {}) and the training state\n",
                              relative_tolerance, compared, bitwise, largest_relative, largest_name)
                : fmt::format("equal: {} tensors bit for bit and the training state\n", compared);
  } else {
    text += fmt::format("DIFFERENT: {} of {} tensors and {} of {} training-state values{}\n", differing, compared,
                        state_differing, state_values,
                        largest_name.empty() ? "" : fmt::format(" (largest relative difference {:.3g} in {})",
                                                                largest_relative, largest_name));
  }
  return out;
}

}  // namespace trident::checkpoint
