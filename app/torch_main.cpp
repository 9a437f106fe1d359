// trident-torch: every subcommand of trident, LibTorch loaded. `trident` runs inspect, report,
// plan, --help and --version itself and becomes this executable for the others (app/main.cpp). Run
// directly, it does what trident does, but a stop signal that comes while it loads LibTorch ends
// it: `trident` keeps them blocked across the exec, train unblocks them once its handlers are in.
#include <string>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/torch_error.hpp"

namespace {

int run_subcommand(int argc, char** argv) {
  using namespace trident::app;
  const std::string command = argv[0];
  if (command == "train") return train_command(argc, argv);
  if (command == "prepare-data") return prepare_data_command(argc, argv);
  if (command == "inspect") return inspect_command(argc, argv);
  if (command == "compare") return compare_command(argc, argv);
  if (command == "plan") return plan_command(argc, argv);
  if (command == "report") return report_command(argc, argv);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  trident::set_exception_message(&trident::message_of);  // LibTorch's messages without their stack trace
  return trident::app::trident_main(argc, argv, run_subcommand);
}
