#pragma once
// Removes a folder and everything under it, for the tests' scratch folders, without
// std::filesystem::remove_all. In the CUDA build on the GPU machine (PyTorch's wheel, Ubuntu's
// libstdc++), the test programs' remove_all binds to the copy that libtorch.so carries, which
// calls recursive_directory_iterator::__erase through a weak reference the system libstdc++ does
// not define: a call to address 0 as soon as the folder has an entry (on the H100, 2026-11-27:
// the gpu_training test's scratch folder removed at exit, "segfault during the exit ... called
// from libtorch.so (remove_all + 0x72)", after every test had passed). trident itself calls no
// remove_all.
#include <ftw.h>
#include <stdio.h>

#include <string>

namespace trident::test_support {

// Depth first (FTW_DEPTH: a folder after its entries), links not followed (FTW_PHYS). Whatever
// cannot be removed is left; a folder that is not there is not an error.
inline void remove_tree(const std::string& dir) {
  if (dir.empty()) return;
  nftw(
      dir.c_str(), [](const char* path, const struct stat*, int, struct FTW*) {
        ::remove(path);  // and go on
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace trident::test_support
