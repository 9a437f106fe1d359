// `trident plan DECK`: the layout, batch arithmetic, model-state and device memory a run of the
// deck would have, nothing trained or written. No LibTorch: `trident` runs it itself, so it costs
// a login node (or a job script before srun) no LibTorch load.
#include <fmt/format.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "commands.hpp"
#include "config/deck.hpp"
#include "core/error.hpp"
#include "train/plan_text.hpp"

namespace trident::app {

int plan_command(int argc, char** argv) {
  po::options_description options("trident plan DECK [--world N] [--gpu-memory GIB] [--set section.key=value ...]");
  options.add_options()("help,h", "this help")("deck", po::value<std::string>(), "input deck (INI)")(
      "world", po::value<int>(), "ranks the job will have (default: SLURM_NTASKS inside an allocation, else 1)")(
      "gpu-memory", po::value<double>(),
      "GiB of memory of the run's GPUs: whether the deck fits them (default: this node's first GPU, if any)")(
      "set", po::value<std::vector<std::string>>()->composing(), "override a deck key");
  po::positional_options_description positional;
  positional.add("deck", 1);
  return guarded(Ranks::serial, [&] {
    const auto vm = parse(argc, argv, options, positional);
    if (vm.count("help")) {
      std::cout << options << "\n";
      return 0;
    }
    if (!vm.count("deck")) throw BadInput("plan: no deck given (trident plan DECK --world N)");
    const auto overrides = overrides_of(vm);
    std::vector<std::string> deck_problems;
    const config::Deck deck = config::load_deck(vm["deck"].as<std::string>(), overrides, &deck_problems);
    // Planned inside an allocation (salloc, a job script), the job's task count is the default.
    int world = 1;
    std::string world_note;  // where the world size came from, when not from --world
    const char* slurm_tasks = std::getenv("SLURM_NTASKS");
    int allocated = 0;
    if (slurm_tasks && !vm.count("world")) {
      // Slurm sets a count; anything else was set by hand, and planning for world 1 instead would hide it.
      char* end = nullptr;
      const long tasks = std::strtol(slurm_tasks, &end, 10);
      if (end == slurm_tasks || *end != '\0' || tasks < 1 || tasks > 1L << 24)
        throw BadInput(fmt::format("plan: SLURM_NTASKS '{}' is not a rank count (give --world N)", slurm_tasks));
      allocated = static_cast<int>(tasks);
    }
    if (vm.count("world")) {
      world = vm["world"].as<int>();
      if (world < 1) throw BadInput(fmt::format("plan: --world {}: the job's ranks, at least 1", world));
    } else if (allocated >= 1) {
      world = allocated;
      world_note = fmt::format("world {}: this allocation's SLURM_NTASKS (--world N plans for another)\n", world);
    } else {
      world_note = "world 1: no --world given (--world N plans for N ranks)\n";
    }
    // The plan is made anywhere (a login node without GPUs): the device rules (run.device = cuda,
    // nccl, fp16) are checked where the run starts, on its nodes.
    config::Environment env;
    env.world_size = world;
    env.cuda_available = true;
    config::validate_or_throw(deck, env, deck_problems);
    int64_t gpu_bytes = 0;
    if (vm.count("gpu-memory")) {
      const double gib = vm["gpu-memory"].as<double>();
      if (!(gib >= 1.0 / 1024 && gib < 1e6))  // from 1 MiB
        throw BadInput(fmt::format("plan: --gpu-memory {}: the GPUs' memory in GiB, e.g. 80", gib));
      gpu_bytes = static_cast<int64_t>(gib * (int64_t{1} << 30));
    }
    std::cout << world_note << train::plan_text(deck, world, gpu_bytes);
    return 0;
  });
}

}  // namespace trident::app
