#include "core/host.hpp"

#include <unistd.h>

namespace trident {

std::string host_name() {
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace trident
