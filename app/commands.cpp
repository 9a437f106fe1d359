// The subcommands that use LibTorch (trident-torch runs them, app/torch_main.cpp): train, compare
// and prepare-data.
#include "commands.hpp"

#include <fmt/format.h>
#include <mpi.h>
#include <torch/version.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/compare.hpp"
#include "command_line.hpp"
#include "comm/cuda_runtime.hpp"
#include "comm/device_placement.hpp"
#include "comm/world.hpp"
#include "config/deck.hpp"
#include "core/error.hpp"
#include "core/host.hpp"
#include "data/prepare.hpp"
#include "train/same_deck.hpp"
#include "train/trainer.hpp"

namespace trident::app {

namespace {

// What validation needs to know of this process's CUDA: whether the build has it and the node
// shows a GPU, and if not, which of the two is missing.
config::Environment cuda_environment(int world_size) {
  config::Environment env;
  env.world_size = world_size;
  env.cuda_available = comm::cuda_visible_devices() > 0;
  const std::string host = host_name();
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!comm::cuda_built())
    env.no_cuda_reason = fmt::format("this trident was built without CUDA (LibTorch {} for the CPU; the README's "
                                     "'Against a CUDA LibTorch (GPU nodes)' builds the GPU flavour)",
                                     TORCH_VERSION);
  else
    env.no_cuda_reason = fmt::format("no GPU is visible on {} ({})", host,
                                     comm::describe_cuda_visible_devices(
                                         visible ? std::optional<std::string>(visible) : std::nullopt));
  return env;
}

}  // namespace

int train_command(int argc, char** argv) {
  po::options_description options("trident train DECK");
  options.add_options()("help,h", "this help")("help-deck", "print every deck key with its default and meaning")(
      "deck", po::value<std::string>(), "input deck (INI)")(
      "set", po::value<std::vector<std::string>>()->composing(), "override a deck key: --set optim.lr=3e-4")(
      "resume", po::value<std::string>()->default_value("auto"),
      "auto (the newest valid checkpoint in output_dir/checkpoints, if any) | never | a checkpoint file | "
      "a checkpoints or run folder (its newest valid checkpoint) | a checkpoints/latest file | auto:PATH (this "
      "run's newest valid checkpoint, or PATH while it has none: what a requeued job that started from PATH "
      "continues with)");
  po::positional_options_description positional;
  positional.add("deck", 1);

  // Help needs no MPI: answer it before MPI_Init so `trident train --help-deck` works anywhere.
  po::variables_map vm;
  const int parsed = guarded(Ranks::train_before_mpi, [&] {
    vm = parse(argc, argv, options, positional);
    return 0;
  });
  if (parsed != 0) return parsed;
  if (vm.count("help")) {
    std::cout << options << "\n";
    return 0;
  }
  if (vm.count("help-deck")) {
    std::cout << config::deck_help();
    return 0;
  }

  // A stop signal from here on, MPI_Init and the deck's checks included, is held until the first
  // step boundary, which checkpoints and exits 3; so is one that came earlier, while LibTorch
  // loaded, which `trident` kept pending (app/main.cpp; tests/cli/signal_resume.sh sends one).
  train::catch_stop_signals();
  comm::MpiSession mpi(&argc, &argv);
  return guarded(Ranks::train, [&] {
    if (!vm.count("deck")) throw BadInput("train: no deck given (trident train DECK; see --help)");
    const auto overrides = overrides_of(vm);
    std::vector<std::string> deck_problems;  // listed with the rules the deck breaks, in one message
    const config::Deck deck = config::load_deck(vm["deck"].as<std::string>(), overrides, &deck_problems);
    int world_size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    // Every rank validates against its own node (its GPUs); the ranks then agree, so that a
    // node without GPUs stops every rank with its message, not only its own.
    std::string error;
    try {
      config::validate_or_throw(deck, cuda_environment(world_size), deck_problems);
    } catch (const BadInput& e) {
      error = e.what();
    }
    comm::agree_or_throw(MPI_COMM_WORLD, error);
    train::agree_on_deck(MPI_COMM_WORLD, deck, vm["resume"].as<std::string>());
    train::Trainer trainer(deck, MPI_COMM_WORLD, vm["resume"].as<std::string>());
    trainer.run();
    return 0;
  });
}

int prepare_data_command(int argc, char** argv) {
  po::options_description options("trident prepare-data fashion-mnist|synthetic|text");
  std::string shape = "1x28x28";
  data::SyntheticSpec spec;
  data::SyntheticTokensSpec tokens;
  double test_fraction = 0.1;
  std::string seed = std::to_string(spec.seed);  // read as text: Boost takes "-1" as 2^64-1 for an unsigned
  options.add_options()("help,h", "this help")("kind", po::value<std::string>(), "fashion-mnist | synthetic | text")(
      "out", po::value<std::string>(), "output HDF5 file")(
      "source", po::value<std::string>(),
      "fashion-mnist: folder of the IDX .gz files (default /usr/share/datasets/fashion-mnist, Debian package "
      "dataset-fashion-mnist); text: a text file or a folder of them (default /usr/share/games/fortunes, Debian "
      "package fortunes)")(
      "test-fraction", po::value<double>(&test_fraction)->default_value(test_fraction, fmt::format("{}", test_fraction)),
      "text: the last fraction of each file that goes to /test")(
      "tokens", po::value<int64_t>(&tokens.train_tokens),
      "synthetic: write a token dataset of this many training tokens (instead of images)")(
      "test-tokens", po::value<int64_t>(&tokens.test_tokens)->default_value(tokens.test_tokens),
      "synthetic --tokens: test tokens")(
      "vocab", po::value<int64_t>(&tokens.vocab)->default_value(tokens.vocab), "synthetic --tokens: vocabulary size")(
      "train", po::value<int64_t>(&spec.train)->default_value(spec.train), "synthetic: training samples")(
      "test", po::value<int64_t>(&spec.test)->default_value(spec.test), "synthetic: test samples")(
      "classes", po::value<int64_t>(&spec.classes)->default_value(spec.classes), "synthetic: classes")(
      "shape", po::value<std::string>(&shape)->default_value(shape), "synthetic: sample shape CxHxW")(
      "noise", po::value<double>(&spec.noise)->default_value(spec.noise, fmt::format("{}", spec.noise)), "synthetic: noise standard deviation")(
      "seed", po::value<std::string>(&seed)->default_value(seed), "synthetic: seed (0 to 2^64-1)");
  po::positional_options_description positional;
  positional.add("kind", 1);
  return guarded(Ranks::serial, [&] {
    const auto vm = parse(argc, argv, options, positional);
    if (vm.count("help")) {
      std::cout << options << "\n";
      return 0;
    }
    if (!vm.count("kind") || !vm.count("out"))
      throw BadInput("prepare-data: give a kind (fashion-mnist | synthetic | text) and --out FILE.h5");
    const std::string kind = vm["kind"].as<std::string>(), out = vm["out"].as<std::string>();
    // An option the kind does not use is a mistake, not silence (--vocab without --tokens would
    // write images; --shape with --tokens, tokens).
    const std::string mode = kind == "synthetic" && vm.count("tokens") ? "synthetic --tokens" : kind;
    const std::map<std::string, std::set<std::string>> options_of{
        {"fashion-mnist", {"source"}},
        {"text", {"source", "test-fraction"}},
        {"synthetic --tokens", {"tokens", "test-tokens", "vocab", "seed"}},
        {"synthetic", {"train", "test", "classes", "shape", "noise", "seed"}}};
    if (const auto uses = options_of.find(mode); uses != options_of.end())
      for (const auto& [name, value] : vm)
        if (!value.defaulted() && name != "kind" && name != "out" && uses->second.count(name) == 0)
          throw BadInput(fmt::format("prepare-data {}: --{} is not one of its options (prepare-data --help)", mode, name));
    auto source_or = [&](const char* fallback) {
      return vm.count("source") ? vm["source"].as<std::string>() : std::string(fallback);
    };
    // A whole number that fits, all of the text ("1x4x4x9" is no shape, 2^64 no seed): BadInput
    // naming the option.
    auto whole = [](const std::string& text, auto& into, const std::string& what) {
      const char* end = text.data() + text.size();
      const auto [stop, error] = std::from_chars(text.data(), end, into);
      if (error != std::errc() || stop != end || text.empty() || text[0] == '+')
        throw BadInput(fmt::format("prepare-data: {} is not {}", what, std::is_signed_v<std::decay_t<decltype(into)>>
                                                                           ? "a whole number that fits 64 bits"
                                                                           : "a whole number from 0 to 2^64-1"));
    };
    whole(seed, spec.seed, "--seed '" + seed + "'");
    if (kind == "fashion-mnist") {
      data::prepare_fashion_mnist(source_or("/usr/share/datasets/fashion-mnist"), out);
    } else if (kind == "text") {
      data::prepare_text(source_or("/usr/share/games/fortunes"), test_fraction, out);
    } else if (kind == "synthetic" && vm.count("tokens")) {
      tokens.seed = spec.seed;
      data::prepare_synthetic_tokens(tokens, out);
    } else if (kind == "synthetic") {
      std::vector<std::string> sizes;
      for (size_t from = 0;;) {
        const size_t x = shape.find('x', from);
        sizes.push_back(shape.substr(from, x - from));
        if (x == std::string::npos) break;
        from = x + 1;
      }
      if (sizes.size() != 3) throw BadInput("prepare-data: --shape '" + shape + "' is not CxHxW (e.g. 1x28x28)");
      const char* names[] = {"C", "H", "W"};
      int64_t* into[] = {&spec.channels, &spec.height, &spec.width};
      for (int i = 0; i < 3; ++i)
        whole(sizes[i], *into[i], fmt::format("--shape '{}': {} '{}'", shape, names[i], sizes[i]));
      data::prepare_synthetic(spec, out);
    } else {
      throw BadInput("prepare-data: unknown kind '" + kind + "' (fashion-mnist | synthetic | text)");
    }
    std::printf("prepare-data: wrote %s\n", out.c_str());
    return 0;
  });
}

int compare_command(int argc, char** argv) {
  po::options_description options("trident compare A.h5 B.h5 [--rtol R]");
  options.add_options()("help,h", "this help")("a", po::value<std::string>(), "a checkpoint")(
      "b", po::value<std::string>(), "another checkpoint")(
      "rtol", po::value<double>()->default_value(0),
      "count a tensor as equal when its largest difference is at most R times A's largest magnitude "
      "(0: bit for bit)");
  po::positional_options_description positional;
  positional.add("a", 1).add("b", 1);
  return guarded(Ranks::serial, [&] {
    const auto vm = parse(argc, argv, options, positional);
    if (vm.count("help")) {
      std::cout << options << "\nexit codes: 0 equal, 1 different, 2 a file that is not a readable checkpoint\n";
      return 0;
    }
    if (!vm.count("a") || !vm.count("b")) throw BadInput("compare: give two checkpoints (trident compare A.h5 B.h5)");
    const double rtol = vm["rtol"].as<double>();
    if (!(rtol >= 0) || !std::isfinite(rtol)) throw BadInput(fmt::format("compare: --rtol {}: a tolerance of 0 or more", rtol));
    for (const char* which : {"a", "b"})
      if (std::error_code ec; !std::filesystem::exists(vm[which].as<std::string>(), ec))
        throw BadInput(fmt::format("compare: {}: no such file", vm[which].as<std::string>()));
      else if (!checkpoint::is_checkpoint(vm[which].as<std::string>()))
        throw BadInput(fmt::format("compare: {}: not a trident checkpoint (trident inspect says what it is)",
                                   vm[which].as<std::string>()));
    const auto comparison = checkpoint::compare(vm["a"].as<std::string>(), vm["b"].as<std::string>(), rtol);
    std::cout << comparison.text;
    return comparison.differing == 0 ? 0 : 1;
  });
}

}  // namespace trident::app
