#include "core/memory_limit.hpp"

#include <sys/stat.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

namespace trident {

namespace {

// v1 writes "no limit" as the largest multiple of the page size below 2^63; anything this large
// is no limit whatever the page size.
constexpr int64_t kNoLimit = int64_t{1} << 62;

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The first word of a file; "" when it cannot be read.
std::string first_word(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  in >> word;
  return word;
}

// A limit file's first word as a number, or 0 for "max", no limit, a missing or unreadable file.
int64_t limit_of(const std::string& word) {
  if (word.empty() || word.find_first_not_of("0123456789") != std::string::npos) return 0;
  try {
    const long long value = std::stoll(word);
    return value > 0 && value < kNoLimit ? value : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

int64_t limit_in(const std::string& path) { return limit_of(first_word(path)); }

// "Name:   12345 kB" -> bytes, from the lines of a /proc file; 0 when the line is not there.
int64_t kib_line(const std::vector<std::string>& lines, const std::string& name) {
  for (const std::string& line : lines) {
    std::istringstream words(line);
    std::string key, unit;
    long long kib = 0;
    if (words >> key >> kib >> unit && key == name + ":" && kib > 0) return static_cast<int64_t>(kib) * 1024;
  }
  return 0;
}

// Who else draws on a cgroup: its folder's device and inode (processes in separate containers may
// all see their own cgroup as /sys/fs/cgroup), or its path when it cannot be stat'ed.
std::string identity_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return path;
  return "cgroup " + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

struct Hierarchy {
  std::string mount_point, mount_root;  // where it is mounted, and which of its folders is there
  bool v1 = false;
};

// The cgroup v2 mount, or the v1 mount carrying the memory controller, from
// /proc/self/mountinfo: "ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [TAGS] - FSTYPE SOURCE SUPER".
bool find_mount(const std::string& root, bool v1_memory, Hierarchy* found) {
  for (const std::string& line : lines_of(root + "/proc/self/mountinfo")) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string id, parent, device, mount_root, mount_point, fstype, source, super;
    if (!(head >> id >> parent >> device >> mount_root >> mount_point) || !(tail >> fstype >> source >> super)) continue;
    const bool match = v1_memory ? fstype == "cgroup" && ("," + super + ",").find(",memory,") != std::string::npos
                                 : fstype == "cgroup2";
    if (match) {
      *found = {mount_point, mount_root, v1_memory};
      return true;
    }
  }
  return false;
}

// What a cgroup folder lets its processes use: its RAM limit plus the swap they may use on top
// (over the RAM limit a process swaps rather than dies while swap is left). 0: no limit here.
int64_t folder_limit(const std::string& root, const std::string& folder, bool v1, int64_t swap_total) {
  const std::string at = root + folder + "/";
  const int64_t ram = limit_in(at + (v1 ? "memory.limit_in_bytes" : "memory.max"));
  if (ram == 0 || swap_total == 0) return ram;
  // v1: memory.memsw.limit_in_bytes (where swap is accounted) is RAM and swap together; without
  // it the group may swap what the node has. v2: memory.swap.max is the swap alone.
  const std::string swap_word = first_word(at + (v1 ? "memory.memsw.limit_in_bytes" : "memory.swap.max"));
  const int64_t swap_limit = limit_of(swap_word);
  if (swap_word == "0") return ram;
  if (swap_limit == 0) return ram + swap_total;  // no file, "max" or v1's unlimited
  return v1 ? std::max(ram, std::min(swap_limit, ram + swap_total)) : ram + std::min(swap_limit, swap_total);
}

// The tightest limit of the cgroup folder for `cgroup_path` and of each ancestor up to the mount
// point (a child's limit does not lift its parent's; a v1 parent without use_hierarchy does not
// count its children).
void tightest_on_path(const std::string& root, const Hierarchy& mount, std::string cgroup_path, int64_t swap_total,
                      MemoryLimit* best) {
  // Inside a cgroup namespace the path is relative to the mount's own root.
  const std::string& prefix = mount.mount_root;
  if (prefix != "/" && cgroup_path.compare(0, prefix.size(), prefix) == 0 &&
      (cgroup_path.size() == prefix.size() || cgroup_path[prefix.size()] == '/'))
    cgroup_path = cgroup_path.substr(prefix.size());
  while (!cgroup_path.empty() && cgroup_path.back() == '/') cgroup_path.pop_back();
  for (;;) {
    const std::string folder = mount.mount_point + cgroup_path;
    const int64_t bytes = folder_limit(root, folder, mount.v1, swap_total);
    if (bytes > 0 && (best->bytes == 0 || bytes < best->bytes))
      *best = {bytes, folder + "/" + (mount.v1 ? "memory.limit_in_bytes" : "memory.max") + (swap_total > 0 ? " + swap" : ""),
               identity_of(root + folder)};
    const auto slash = cgroup_path.rfind('/');
    if (cgroup_path.empty() || slash == std::string::npos) break;
    cgroup_path.erase(slash);
    if (mount.v1 && first_word(root + mount.mount_point + cgroup_path + "/memory.use_hierarchy") == "0")
      break;  // the parent does not account its children: its limit is not theirs
  }
}

}  // namespace

void release_free_heap() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

int64_t resident_anonymous_bytes(const std::string& root) {
  return kib_line(lines_of(root + "/proc/self/status"), "RssAnon");
}

ResidentMemory resident_memory(const std::string& root) {
  const std::vector<std::string> status = lines_of(root + "/proc/self/status");
  return {kib_line(status, "RssAnon"), kib_line(status, "RssFile") + kib_line(status, "RssShmem")};
}

MemoryLimit host_memory_limit(const std::string& root) {
  MemoryLimit best;
  const std::vector<std::string> meminfo = lines_of(root + "/proc/meminfo");
  const int64_t swap_total = kib_line(meminfo, "SwapTotal");
  // "HIERARCHY-ID:CONTROLLERS:PATH"; v2's line is "0::PATH".
  for (const std::string& line : lines_of(root + "/proc/self/cgroup")) {
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    const bool v2 = line.compare(0, first, "0") == 0 && controllers.empty();
    const bool v1_memory = ("," + controllers + ",").find(",memory,") != std::string::npos;
    Hierarchy mount;
    if ((v2 || v1_memory) && find_mount(root, v1_memory, &mount)) tightest_on_path(root, mount, path, swap_total, &best);
  }
  const int64_t total = kib_line(meminfo, "MemTotal");
  if (total > 0 && (best.bytes == 0 || total + swap_total < best.bytes))
    best = {total + swap_total, swap_total > 0 ? "/proc/meminfo MemTotal + SwapTotal" : "/proc/meminfo MemTotal",
            "MemTotal"};
  return best;
}

}  // namespace trident
