// trident: one executable, subcommands dispatched here (README.md "Using it").
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/hdf5.hpp"
#include "core/malloc_tuning.hpp"

int main(int argc, char** argv) {
  using namespace trident::app;
  trident::keep_freed_memory_in_process();
  trident::hdf5::without_its_file_locks();
  if (argc < 2) {  // no command: the usage, on stderr, as the mistake it is (once under mpiexec)
    if (trident::launcher_rank() == 0) print_usage(stderr);
    return 2;
  }
  const std::string command = argv[1];
  // Each subcommand sees argv from its own name on: `train DECK --set ...`.
  if (command == "train") return train_command(argc - 1, argv + 1);
  if (command == "prepare-data") return prepare_data_command(argc - 1, argv + 1);
  if (command == "inspect") return inspect_command(argc - 1, argv + 1);
  if (command == "compare") return compare_command(argc - 1, argv + 1);
  if (command == "plan") return plan_command(argc - 1, argv + 1);
  if (command == "report") return report_command(argc - 1, argv + 1);
  if (command == "--version" || command == "version") {
    std::printf("trident %s\n", TRIDENT_VERSION);
    return 0;
  }
  if (command == "--help" || command == "-h" || command == "help") {
    print_usage(stdout);
    return 0;
  }
  if (trident::launcher_rank() == 0)  // every task of mpiexec -n N makes the same mistake: said once
    std::fprintf(stderr, "trident: error: unknown command '%s' (trident --help lists them)\n", command.c_str());
  return 2;
}
