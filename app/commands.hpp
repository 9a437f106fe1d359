#pragma once
#include <cstdio>

// The subcommands of `trident`; each parses its own options and returns the exit code. inspect,
// report, the usage (file_commands.cpp) and plan (plan_command.cpp) need no LibTorch; the others
// (commands.cpp) do.
namespace trident::app {

int train_command(int argc, char** argv);
int prepare_data_command(int argc, char** argv);
int inspect_command(int argc, char** argv);
int compare_command(int argc, char** argv);
int plan_command(int argc, char** argv);
int report_command(int argc, char** argv);
void print_usage(std::FILE* out);

// main() of both executables: the usage, --help, --version, help COMMAND and an unknown command
// answered; a command run by run_subcommand (given argv from the command's name on: `train DECK
// --set ...`), which returns its exit code, or -1 when argv[0] names no command it knows.
int trident_main(int argc, char** argv, int (*run_subcommand)(int argc, char** argv));

}  // namespace trident::app
