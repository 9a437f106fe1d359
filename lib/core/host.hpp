#pragma once
#include <string>

namespace trident {

// This node's name (gethostname): in messages, the run folder's owner line, goodput records,
// temporary file names.
std::string host_name();

}  // namespace trident
