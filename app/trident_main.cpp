// What `trident` and trident-torch do with their command line alike: the usage, --help,
// --version, help COMMAND, and an unknown command; a subcommand is run_subcommand's.
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/hdf5.hpp"
#include "core/malloc_tuning.hpp"

namespace trident::app {

int trident_main(int argc, char** argv, int (*run_subcommand)(int argc, char** argv)) {
  trident::keep_freed_memory_in_process();
  trident::hdf5::without_its_file_locks();
  if (argc < 2) {  // no command: the usage, on stderr, as the mistake it is (once under mpiexec)
    if (trident::launcher_rank() == 0) print_usage(stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (const int code = run_subcommand(argc - 1, argv + 1); code >= 0) return code;
  const bool version = command == "--version" || command == "version";
  const bool help = command == "--help" || command == "-h" || command == "help";
  // `trident help train` is `trident train --help`; any other word after these is a mistake, said
  // (a script's `trident version --short` was read as a version).
  if (help && argc == 3) {
    char help_option[] = "--help";
    char* sub_argv[] = {argv[2], help_option, nullptr};
    if (const int code = run_subcommand(2, sub_argv); code >= 0) return code;
  }
  if ((version || help) && argc > 2) {
    if (trident::launcher_rank() == 0)
      std::fprintf(stderr, "trident: error: %s takes no argument here ('%s'%s)\n", command.c_str(), argv[2],
                   help ? "; trident help COMMAND takes a command trident --help lists" : "");
    return 2;
  }
  if (version) {
    std::printf("trident %s\n", TRIDENT_VERSION);
    return 0;
  }
  if (help) {
    print_usage(stdout);
    return 0;
  }
  if (trident::launcher_rank() == 0)  // every task of mpiexec -n N makes the same mistake: said once
    std::fprintf(stderr, "trident: error: unknown command '%s' (trident --help lists them)\n", command.c_str());
  return 2;
}

}  // namespace trident::app
