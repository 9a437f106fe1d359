#pragma once
// Folders a command makes for its output, and takes back when it is refused: bad input leaves
// nothing behind, not even the folders made for it.
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

}  // namespace trident
