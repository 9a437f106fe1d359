#include "data/split_file.hpp"

#include <fmt/format.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <set>

#include "core/error.hpp"
#include "core/log.hpp"

namespace trident::data {

SplitFile::SplitFile(const std::string& path, const std::string& split, int64_t seq_len)
    : path_(path), split_(split), seq_len_(seq_len) {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  hdf5::quiet();
  auto bad = [&](const std::string& what) { fatal_all(fmt::format("data.path {}: {}", path, what)); };
  if (std::filesystem::is_directory(path)) bad("a folder, not a dataset file");
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    std::fclose(f);
  } else {
    bad(fmt::format("cannot open the file (make one with: trident prepare-data {} --out {})",
                    tokens() ? "text" : "fashion-mnist", path));
  }
  if (!hdf5::is_hdf5_file(path)) bad("not an HDF5 file");
  file_ = hdf5::Hid(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file_.valid()) bad("HDF5 cannot open it: " + innermost(hdf5_error_text()));
  void* handle = nullptr;
  struct stat opened {};
  hdf5::Hid access(H5Fget_access_plist(file_));
  // Only the POSIX driver's handle is a descriptor (HDF5_DRIVER can choose another).
  const bool posix = access.valid() && H5Pget_driver(access) == H5FD_SEC2;
  if (posix && H5Fget_vfd_handle(file_, H5P_DEFAULT, &handle) >= 0 && handle &&
      fstat(*static_cast<int*>(handle), &opened) == 0) {
    fd_ = *static_cast<int*>(handle);
    opened_size_ = static_cast<int64_t>(opened.st_size);
    opened_mtime_ns_ = static_cast<int64_t>(opened.st_mtim.tv_sec) * 1000000000 + opened.st_mtim.tv_nsec;
  }
  H5Eclear2(H5E_DEFAULT);
  if (tokens()) {
    open_tokens();
    return;
  }
  if (hdf5::link_exists(file_, "/" + split + "/tokens") && !hdf5::link_exists(file_, "/" + split + "/inputs"))
    bad(fmt::format("/{}/tokens: a token dataset; train it with model.kind = gpt", split));
  inputs_ = open_dataset("inputs");
  labels_ = open_dataset("labels");

  const auto in_shape = hdf5::dataset_shape(inputs_);
  const auto label_shape = hdf5::dataset_shape(labels_);
  if (in_shape.size() < 2) bad(fmt::format("/{}/inputs must be N x ... (has rank {})", split, in_shape.size()));
  if (label_shape.size() != 1 || label_shape[0] != in_shape[0])
    bad(fmt::format("/{}/labels must be a vector of {} labels, one per input", split, in_shape[0]));
  size_ = static_cast<int64_t>(in_shape[0]);
  sample_shape_.assign(in_shape.begin() + 1, in_shape.end());
  if (size_ < 1) bad(fmt::format("/{}/inputs holds no samples", split));
  if (std::count(sample_shape_.begin(), sample_shape_.end(), 0) > 0) {
    std::string shape;
    for (const int64_t d : sample_shape_) shape += (shape.empty() ? "" : "x") + std::to_string(d);
    bad(fmt::format("/{}/inputs has samples of shape {} (a dimension of size 0)", split, shape));
  }

  hdf5::Hid in_type(HDF5_CHECK(H5Dget_type(inputs_)));
  const std::string in_type_name = hdf5::type_name(in_type);
  if (in_type_name == "uint8") inputs_are_bytes_ = true;
  else if (in_type_name != "float32")
    bad(fmt::format("/{}/inputs has type {}; expected uint8 or float32", split, in_type_name));
  hdf5::Hid label_type(HDF5_CHECK(H5Dget_type(labels_)));
  if (H5Tget_class(label_type) != H5T_INTEGER)
    bad(fmt::format("/{}/labels has type {}; expected integers", split, hdf5::type_name(label_type)));

  classes_ = read_count_attribute("classes");

  // Labels are small (8 bytes a sample): all of them are checked once, here.
  std::vector<int64_t> all(static_cast<size_t>(size_));
  if (H5Dread(labels_, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()) < 0)
    bad(fmt::format("/{}/labels cannot be read ({}): the file is damaged", split, innermost(hdf5_error_text())));
  const auto outside = std::find_if(all.begin(), all.end(), [&](int64_t l) { return l < 0 || l >= classes_; });
  if (outside != all.end()) {
    // A label byte changed on disk is named as the damage it is, not as a wrong label.
    if (const std::string damage = hdf5::find_damaged_rows(labels_); !damage.empty())
      fatal_all(damaged("labels", damage));
    bad(fmt::format("/{}/labels: label {} of sample {} is outside [0, {}) (attribute 'classes')", split, *outside,
                    outside - all.begin(), classes_));
  }
}

void SplitFile::open_tokens() {
  auto bad = [&](const std::string& what) { fatal_all(fmt::format("data.path {}: {}", path_, what)); };
  const std::string name = "/" + split_ + "/tokens";
  if (!hdf5::link_exists(file_, name)) {
    // Never suggest writing over a file that holds other data (prepare-data replaces it).
    if (hdf5::link_exists(file_, "/" + split_ + "/inputs"))
      bad(fmt::format("dataset {} is missing: this is an image dataset (/{}/inputs), and model.kind = gpt trains on "
                      "tokens (train it with model.kind = mlp or cnn, or make a token file beside it with: trident "
                      "prepare-data text --out tokens.h5)",
                      name, split_));
    bad(fmt::format("dataset {} is missing: model.kind = gpt trains on tokens (make them with: trident prepare-data "
                    "text --out {})",
                    name, path_));
  }
  tokens_ = open_dataset("tokens");
  const auto shape = hdf5::dataset_shape(tokens_);
  if (shape.size() != 1) bad(fmt::format("{} must be 1-D (has rank {})", name, shape.size()));
  hdf5::Hid type(HDF5_CHECK(H5Dget_type(tokens_)));
  if (H5Tget_class(type) != H5T_INTEGER) bad(fmt::format("{} has type {}; expected integers", name, hdf5::type_name(type)));
  const auto count = static_cast<int64_t>(shape[0]);
  size_ = count > 0 ? (count - 1) / seq_len_ : 0;
  if (size_ < 1)
    bad(fmt::format("{} has {} tokens, fewer than one sample of model.seq_len + 1 = {}", name, count, seq_len_ + 1));
  sample_shape_ = {seq_len_};
  classes_ = read_count_attribute("vocab");
}

hdf5::Hid SplitFile::open_dataset(const char* name) {
  const std::string full = "/" + split_ + "/" + name;
  if (!hdf5::link_exists(file_, full)) fatal_all(fmt::format("data.path {}: dataset {} is missing", path_, full));
  hdf5::Hid dataset(H5Dopen2(file_, full.c_str(), H5P_DEFAULT));
  if (!dataset.valid())  // a group of that name, a dangling link
    fatal_all(fmt::format("data.path {}: {} is not a dataset HDF5 can open ({})", path_, full, innermost(hdf5_error_text())));
  return dataset;
}

long long SplitFile::read_count_attribute(const char* name) {
  auto bad = [&](const std::string& what) {
    fatal_all(fmt::format("data.path {}: root attribute '{}' {}", path_, name, what));
  };
  if (H5Aexists(file_, name) <= 0) bad("is missing");
  hdf5::Hid attr(HDF5_CHECK(H5Aopen(file_, name, H5P_DEFAULT)));
  // One integer: an array or a string read into one long long would overrun it.
  hdf5::Hid space(HDF5_CHECK(H5Aget_space(attr)));
  hdf5::Hid type(HDF5_CHECK(H5Aget_type(attr)));
  if (H5Sget_simple_extent_npoints(space) != 1 || H5Tget_class(type) != H5T_INTEGER)
    bad(fmt::format("must be one integer (it is {} value(s) of type {})", H5Sget_simple_extent_npoints(space),
                    hdf5::type_name(type)));
  long long count = 0;
  if (H5Aread(attr, H5T_NATIVE_LLONG, &count) < 0)  // out of range for a long long (uint64)
    bad(fmt::format("cannot be read as a 64-bit integer ({})", innermost(hdf5_error_text())));
  // The model's last layer (classes) or its embedding and head (vocab) are this wide.
  constexpr long long kMaxCount = (1LL << 31) - 1;
  if (count < 2 || count > kMaxCount)
    bad(fmt::format("= {} is out of range (2 to {})", count, kMaxCount));
  return count;
}

void SplitFile::read_or_fault(hid_t dataset, const char* name, hid_t mem_type, hid_t mem_space, hid_t file_space,
                                void* out) {
  if (H5Dread(dataset, mem_type, mem_space, file_space, H5P_DEFAULT, out) >= 0) return;
  check_unchanged();  // a file cut short under a compressed dataset fails here: say so, not "damaged"
  // A damaged compressed chunk, an I/O error of the file system: this rank's fault, named.
  fatal_one(fmt::format("data.path {}: /{}/{} cannot be read ({}): the file is damaged or its file system failed; "
                        "check it with: trident inspect {}",
                        path_, split_, name, innermost(hdf5_error_text()), path_));
}

std::string SplitFile::find_damaged_rows(int part, int parts) {
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  for (const auto& [dataset, name] : {std::pair<hid_t, const char*>{inputs_, "inputs"}, {labels_, "labels"},
                                      {tokens_, "tokens"}}) {
    if (dataset < 0) continue;  // not of this kind of dataset
    const std::string problem = hdf5::find_damaged_rows(dataset, part, parts);
    if (!problem.empty()) return damaged(name, problem);
  }
  return "";
}

std::string SplitFile::damaged(const char* dataset, const std::string& problem) const {
  return fmt::format("data.path {}: /{}/{}: {}; make it again (trident prepare-data)", path_, split_, dataset, problem);
}

void SplitFile::check_unchanged() {
  struct stat now {};
  if (fd_ < 0 || fstat(fd_, &now) != 0) return;
  const int64_t size = static_cast<int64_t>(now.st_size);
  if (size != opened_size_)
    fatal_one(fmt::format("data.path {} changed size while this run reads it ({} bytes when opened, {} now): it was "
                          "truncated or written over in place, and what HDF5 reads from it now is not the dataset. Keep "
                          "the file as it is while a run uses it; to replace it, write a new file and rename it over "
                          "the old one",
                          path_, opened_size_, size));
  const int64_t mtime_ns = static_cast<int64_t>(now.st_mtim.tv_sec) * 1000000000 + now.st_mtim.tv_nsec;
  if (mtime_ns != opened_mtime_ns_) {
    // Once per file, not per split reading it nor per read.
    static std::mutex warned_mutex;
    static std::set<std::string> warned;
    std::lock_guard<std::mutex> lock(warned_mutex);
    if (!warned.insert(path_).second) return;
    log::warn("data.path {}: its modification time changed while this run reads it (its size did not): fine after a "
              "touch; if its content was written over, the run now trains on a mix of two datasets",
              path_);
  }
}

}  // namespace trident::data
