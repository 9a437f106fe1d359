#pragma once
// A scratch folder shared by the ranks of one test run (rank 0 makes it, everyone gets the
// path), and a small synthetic dataset in it.
#include <mpi.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "../remove_tree.hpp"
#include "comm/world.hpp"
#include "data/prepare.hpp"

namespace trident::test_support {

// Removed by rank 0 when the test program exits (after MPI_Finalize, when no rank uses it).
inline std::string shared_scratch_dir() {
  struct Scratch {
    std::string dir;
    bool owner = false;
    ~Scratch() {
      if (owner) remove_tree(dir);
    }
  };
  static Scratch scratch;
  if (!scratch.dir.empty()) return scratch.dir;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char path[256] = {0};
  if (rank == 0) {
    std::string pattern = (std::filesystem::temp_directory_path() / "trident-test-XXXXXX").string();
    std::snprintf(path, sizeof(path), "%s", pattern.c_str());
    if (!mkdtemp(path)) std::abort();
  }
  MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD);
  scratch.dir = path;
  scratch.owner = rank == 0;
  return scratch.dir;
}

// A classification set of 1 x 12 x 12 images in 4 classes, 512 to train on and `test_samples`
// to test (rank 0 writes each once).
inline std::string synthetic_dataset(int64_t test_samples = 128) {
  const std::string path = shared_scratch_dir() + "/synthetic" +
                           (test_samples == 128 ? std::string() : "_test" + std::to_string(test_samples)) + ".h5";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0 && !std::filesystem::exists(path)) {
    data::SyntheticSpec spec;
    spec.train = 512;
    spec.test = test_samples;
    spec.classes = 4;
    spec.height = spec.width = 12;
    data::prepare_synthetic(spec, path);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

// Byte tokens of a real text corpus, Debian's fortunes (scripts/install-deps.sh installs it).
inline std::string text_corpus_dataset() {
  const std::string path = shared_scratch_dir() + "/fortunes.h5";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string error;  // the corpus missing (a machine without the fortunes package)
  if (rank == 0 && !std::filesystem::exists(path)) try {
      data::prepare_text("/usr/share/games/fortunes", 0.02, path);
    } catch (const std::exception& e) {
      error = e.what();
    }
  // Every rank fails the test alike; none waits in a barrier for a rank 0 that threw.
  comm::agree_or_throw(MPI_COMM_WORLD, error);
  return path;
}

}  // namespace trident::test_support
