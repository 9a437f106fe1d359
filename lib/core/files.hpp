#pragma once
// Files and folders a command writes: the folders it makes for its output, which it takes back
// when it is refused (bad input leaves nothing behind, not even the folders made for it), and
// fsync.
#include <filesystem>
#include <system_error>
#include <vector>

namespace trident {

// Makes `dir` and the folders above it that are missing, one at a time along the path as it is
// written (through its links and its ..: where the kernel resolves it), each folder made added to
// `made`, outermost first. An error leaves in `made` what was made before it.
std::error_code make_folders(const std::filesystem::path& dir, std::vector<std::filesystem::path>& made);

// Removes the folders in `made`, innermost first, those that are still empty; clears it.
void remove_made_folders(std::vector<std::filesystem::path>& made);

// fsync(fd): true when done, or when the file system has no such call (EINVAL: nothing to do);
// errno tells why not otherwise.
bool sync_file(int fd);

}  // namespace trident
