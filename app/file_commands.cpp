// The subcommands that need no LibTorch (`trident` runs them itself, app/main.cpp): inspect and
// report, and the usage.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "checkpoint/file.hpp"
#include "command_line.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "data/describe.hpp"
#include "report/goodput.hpp"
#include "report/study.hpp"
#include "report/sweep.hpp"

namespace trident::app {

void print_usage(std::FILE* out) {
  std::fprintf(out,
      "trident %s: hybrid data x pipeline x ZeRO parallel training with LibTorch, MPI and HDF5\n\n"
      "usage:\n"
      "  mpiexec -n N trident train DECK [--set section.key=value ...] [--resume auto|never|PATH|auto:PATH]\n"
      "  trident train --help-deck                   every deck key, its default and meaning\n"
      "  trident prepare-data fashion-mnist --out FILE.h5 [--source DIR]\n"
      "  trident prepare-data synthetic --out FILE.h5 [--train N --test N --classes K --shape CxHxW --noise S --seed N]\n"
      "  trident prepare-data text --out FILE.h5 [--source FILE|DIR --test-fraction F]   byte tokens for model.kind = gpt\n"
      "  trident prepare-data synthetic --tokens N --out FILE.h5 [--test-tokens N --vocab V]  random tokens\n"
      "  trident inspect FILE.h5                     a dataset or a checkpoint (checksums verified)\n"
      "  trident compare A.h5 B.h5 [--rtol R]        two checkpoints, tensor by tensor (exit 0 equal, 1 different)\n"
      "  trident plan DECK [--world N] [--gpu-memory GIB] [--set ...]  no training: layout, memory per rank\n"
      "  trident report STUDY_DIR --out DIR [--kind strong|weak]  scaling table, CSV, plot of its report.json files\n"
      "  trident report --goodput RUN_DIR [--out DIR]  where a run's job chain spent its time (goodput.md, .svg)\n"
      "  trident report SWEEP_DIR [--out DIR] [--rank-by test_accuracy|test_loss]  a jobs/sweep.slurm sweep, ranked\n"
      "  trident --version | --help                  (also: version, help, -h)\n"
      "  trident COMMAND --help                      a command's options (also: trident help COMMAND)\n\n"
      "exit codes: 0 success, 2 bad input (deck, dataset, layout, checkpoint; one message), 3 stopped by\n"
      "SIGUSR1/SIGTERM/SIGINT after a checkpoint was committed (requeue me), 4 training diverged (NaN/Inf gradient),\n"
      "1 a fault (the job aborts) or a checkpoint that could not be written\n",
      TRIDENT_VERSION);
}

int inspect_command(int argc, char** argv) {
  po::options_description options("trident inspect FILE.h5");
  options.add_options()("help,h", "this help")("file", po::value<std::string>(), "an HDF5 dataset or checkpoint");
  po::positional_options_description positional;
  positional.add("file", 1);
  return guarded(Ranks::serial, [&] {
    const auto vm = parse(argc, argv, options, positional);
    if (vm.count("help")) {
      std::cout << options << "\n";
      return 0;
    }
    if (!vm.count("file")) throw BadInput("inspect: no file given (trident inspect FILE.h5)");
    const std::string file = vm["file"].as<std::string>();
    if (!checkpoint::is_checkpoint(file)) {
      std::cout << data::describe_hdf5(file);
      int checksummed = 0;
      const std::string problem = data::find_damaged_dataset(file, 0, 1, &checksummed);
      std::cout << (!problem.empty()      ? "checksums: FAILED: " + problem + "\n"
                    : checksummed == 0    ? std::string("checksums: none recorded (not written by trident prepare-data); "
                                                        "every dataset read without error\n")
                                          : fmt::format("checksums: every block of {} datasets verified\n", checksummed));
      if (!problem.empty()) throw BadInput("inspect: " + problem);
      return 0;
    }
    std::string problem;
    std::cout << checkpoint::describe(file, problem);
    if (!problem.empty()) throw BadInput(problem);
    return 0;
  });
}

int report_command(int argc, char** argv) {
  po::options_description options(
      "trident report STUDY_DIR... --out DIR | trident report --goodput RUN_DIR [--out DIR] | trident report SWEEP_DIR [--out DIR]");
  options.add_options()("help,h", "this help")(
      "dirs", po::value<std::vector<std::string>>(), "folders searched (recursively) for report.json files")(
      "out", po::value<std::string>(),
      "where report.md, report.csv and report.svg are written (--goodput: goodput.md and goodput.svg, default RUN_DIR; "
      "a sweep: sweep.md, sweep.csv and sweep.svg, default SWEEP_DIR)")(
      "rank-by", po::value<std::string>()->default_value(""),
      "a sweep's ranking: test_accuracy (highest first) | test_loss (lowest first); default: test_loss for gpt, else "
      "test_accuracy")(
      "goodput", po::value<std::string>(),
      "a run folder: account for the wall time of every process lifetime of its job chain (its goodput.jsonl)")(
      "kind", po::value<std::string>()->default_value(""),
      "strong (fixed global batch) | weak (fixed batch per rank); default: inferred from the batches");
  po::positional_options_description positional;
  positional.add("dirs", -1);
  return guarded(Ranks::serial, [&] {
    const auto vm = parse(argc, argv, options, positional);
    if (vm.count("help")) {
      std::cout << options << "\n";
      return 0;
    }
    // An option of another kind of report is a mistake, not something to ignore.
    const bool kind_given = !vm["kind"].as<std::string>().empty(), rank_by_given = !vm["rank-by"].as<std::string>().empty();
    if (vm.count("goodput")) {
      const std::string run_dir = vm["goodput"].as<std::string>();
      if (vm.count("dirs")) throw BadInput("report: --goodput takes one run folder and no study folders");
      if (kind_given || rank_by_given)
        throw BadInput(fmt::format("report: --{} is for {}, not --goodput", kind_given ? "kind" : "rank-by",
                                   kind_given ? "a scaling study" : "a sweep"));
      if (!std::filesystem::is_directory(run_dir))
        throw BadInput(fmt::format("report: --goodput {}: no such folder (give a run folder, run.output_dir)", run_dir));
      const auto account = report::load_goodput(run_dir);
      // Written before it is printed: an --out that cannot be written is one error, not a report and then an error.
      const auto paths = report::write_goodput(account, run_dir, vm.count("out") ? vm["out"].as<std::string>() : run_dir);
      std::cout << report::goodput_markdown(account, run_dir);
      for (const auto& path : paths) std::printf("report: wrote %s\n", path.c_str());
      return 0;
    }
    const auto dirs = vm.count("dirs") ? vm["dirs"].as<std::vector<std::string>>() : std::vector<std::string>{};
    if (dirs.size() == 1 && report::is_sweep_dir(dirs[0])) {  // jobs/sweep.slurm's folder: it holds sweep.txt
      if (kind_given) throw BadInput(fmt::format("report: --kind is for a scaling study; {} is a sweep", dirs[0]));
      const auto sweep = report::load_sweep(dirs[0], vm["rank-by"].as<std::string>());
      const auto paths = report::write_sweep(sweep, vm.count("out") ? vm["out"].as<std::string>() : dirs[0]);
      std::cout << report::sweep_markdown(sweep);
      for (const auto& path : paths) std::printf("report: wrote %s\n", path.c_str());
      return 0;
    }
    if (dirs.empty() || !vm.count("out")) throw BadInput("report: give a study folder and --out DIR (see --help)");
    if (rank_by_given) throw BadInput("report: --rank-by is for a sweep (a jobs/sweep.slurm folder), not a scaling study");
    const auto study = report::load_study(dirs, vm["kind"].as<std::string>());
    for (const auto& path : report::write_study(study, vm["out"].as<std::string>()))
      std::printf("report: wrote %s\n", path.c_str());
    return 0;
  });
}

}  // namespace trident::app
