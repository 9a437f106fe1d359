#pragma once
#include <cstdio>

// The subcommands of `trident`; each parses its own options and returns the exit code.
namespace trident::app {

int train_command(int argc, char** argv);
int prepare_data_command(int argc, char** argv);
int inspect_command(int argc, char** argv);
int compare_command(int argc, char** argv);
int plan_command(int argc, char** argv);
int report_command(int argc, char** argv);
void print_usage(std::FILE* out);

}  // namespace trident::app
