#pragma once
// How much host memory this process may use: the tightest of its cgroups' memory limits (what
// SLURM's task/cgroup plugin or a container runtime sets; going over is an OOM kill) and the
// node's physical memory. Torch-free and MPI-free.
#include <cstdint>
#include <string>

namespace trident {

struct MemoryLimit {
  int64_t bytes = 0;   // 0: nothing could be read
  std::string source;  // for messages: "/sys/fs/cgroup/.../memory.max" or "/proc/meminfo MemTotal"
  // What the processes that draw on this same limit have in common: the device and inode of the
  // cgroup folder that sets it ("cgroup 35:1234"), or "MemTotal" for the node's memory.
  std::string key;
};

// Reads /proc/self/cgroup, /proc/self/mountinfo, the limit files of the process's cgroup and each
// of its ancestors (cgroup v1 memory.limit_in_bytes, v2 memory.max; "max" and v1's "unlimited"
// near 2^63 do not count; a v1 parent with memory.use_hierarchy 0 ends the walk) and
// /proc/meminfo. Where the node has swap, each limit counts the swap its group may use on top
// (v1 memory.memsw.limit_in_bytes, v2 memory.swap.max, else all of SwapTotal): past the RAM
// limit such a group swaps rather than dies. `root` prefixes every path it reads (tests give a
// folder that imitates them); what it cannot read it leaves out.
MemoryLimit host_memory_limit(const std::string& root = "");

// This process's private resident memory now (/proc/self/status RssAnon: heap and anonymous
// mappings, not the shared libraries' pages); 0 when it cannot be read.
int64_t resident_anonymous_bytes(const std::string& root = "");
// Both from one read of /proc/self/status: the private resident memory above, and the resident
// pages of files and shared memory (RssFile + RssShmem: the libraries' code and data, MPI's shared
// segments), which the ranks of a node share: a cgroup charges them once, not once a rank. Zeros
// when it cannot be read.
struct ResidentMemory {
  int64_t anonymous = 0, shared = 0;
};
ResidentMemory resident_memory(const std::string& root = "");

// Hands the free pages of malloc's heap back to the system (glibc's malloc_trim; nothing
// elsewhere). Once it has freed one large block, glibc serves blocks of that size from its heap,
// which keeps what is freed there resident: tensors copied and dropped (the stage copied into the
// flat buffer) would otherwise stay counted against the rank's memory as long as it runs.
void release_free_heap();

}  // namespace trident
