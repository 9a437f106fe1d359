#include "data/prepare.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cstdio>
#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/files.hpp"
#include "core/host.hpp"
#include "core/hdf5.hpp"

namespace trident::data {

namespace fs = std::filesystem;

namespace {

// The most prepare-data makes in memory: an IDX file's bytes, a synthetic set while it is drawn.
constexpr size_t kMaxMadeBytes = size_t{16} << 30;

const char* const kFashionClasses =
    "T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot";

// ---- IDX (gzip) --------------------------------------------------------------------------

struct Idx {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> bytes;
};

Idx read_idx_gz(const std::string& path, int expected_rank) {
  gzFile in = gzopen(path.c_str(), "rb");
  if (!in) fatal_all(fmt::format("prepare-data: cannot open {} (apt-get install dataset-fashion-mnist)", path));
  // In pieces of at most 1 GiB: gzread counts in unsigned and returns an int, so one call for
  // 4 GiB + 64 KiB asked for 64 KiB, and a short read of a damaged header's size passed.
  auto read_exact = [&](void* dst, size_t n) {
    for (size_t done = 0; done < n;) {
      const auto piece = static_cast<unsigned>(std::min<size_t>(n - done, size_t{1} << 30));
      const int got = gzread(in, static_cast<char*>(dst) + done, piece);
      if (got != static_cast<int>(piece)) {
        gzclose(in);
        fatal_all(fmt::format("prepare-data: {} is truncated or not an IDX file (it ends {} bytes into the {} its "
                              "header announces next)",
                              path, done + static_cast<size_t>(std::max(got, 0)), n));
      }
      done += piece;
    }
  };
  std::array<uint8_t, 4> magic{};
  read_exact(magic.data(), 4);
  // Magic: 0, 0, type (0x08 = unsigned byte), rank.
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] != expected_rank) {
    gzclose(in);
    fatal_all(fmt::format("prepare-data: {} is not an IDX file of unsigned bytes with rank {}", path, expected_rank));
  }
  Idx idx;
  size_t total = 1;
  for (int d = 0; d < expected_rank; ++d) {
    std::array<uint8_t, 4> b{};
    read_exact(b.data(), 4);
    const uint32_t v = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    idx.dims.push_back(v);
    // No empty dimension (no samples, or samples of no pixels), and at most kMaxMadeBytes in all
    // (the product of damaged sizes would overflow).
    if (v == 0 || total > kMaxMadeBytes / v) {
      gzclose(in);
      fatal_all(fmt::format("prepare-data: {}: dimension {} of the IDX header is {} ({}), not a Fashion-MNIST file", path,
                            d, v, v == 0 ? "empty" : "more than 16 GiB in all"));
    }
    total *= v;
  }
  idx.bytes.resize(total);
  read_exact(idx.bytes.data(), total);
  gzclose(in);
  return idx;
}

// ---- writing -----------------------------------------------------------------------------

// A write into the new file that failed (a full disk, a quota): write_atomically says so in one
// line naming --out, not HDF5's whole error stack.
class WriteFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The system's reason in an HDF5 error stack ("No space left on device"), else its innermost entry.
std::string write_error_reason() {
  const std::string stack = hdf5_error_text();
  const std::string mark = "error message = '";
  if (const auto at = stack.find(mark); at != std::string::npos) {
    const auto end = stack.find('\'', at + mark.size());
    if (end != std::string::npos) return stack.substr(at + mark.size(), end - at - mark.size());
  }
  return innermost(stack);
}

void write_dataset(hid_t file, const std::string& name, const std::vector<hsize_t>& dims, hid_t file_type,
                   hid_t mem_type, const void* data) {
  hdf5::Hid space(HDF5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
  hdf5::Hid dataset(H5Dcreate2(file, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!dataset.valid() || H5Dwrite(dataset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw WriteFailed(fmt::format("writing {} failed: {}", name, write_error_reason()));
  hdf5::checksum_rows(dataset);  // of the bytes as stored: training finds a damaged block
}

// The file a path names once its symbolic links are followed (data/x.h5 -> /scratch/x.h5: the
// file goes to scratch and the link stays), also when the last link's target does not exist yet.
// Not normalised: "a/.." is left for the kernel, which resolves it through a link `a` as the
// path's user meant.
fs::path through_links(const std::string& out) {
  fs::path path(out);
  std::error_code ec;
  for (int hops = 0; fs::is_symlink(path, ec); ++hops) {
    if (hops == 40) fatal_all(fmt::format("prepare-data: --out {}: too many levels of symbolic links", out));
    const fs::path target = fs::read_symlink(path, ec);
    if (ec) break;
    path = target.is_absolute() ? target : path.parent_path() / target;
  }
  return path;
}

// HDF5 1.10 closes at exit a file whose close failed (a write past a file size limit) and
// crashes there (signal 11): prepare-data, a process of its own, leaves such a file to the
// kernel. Called before the process's first HDF5 call (it has no effect after it).
void leave_files_to_the_kernel_at_exit() { H5dont_atexit(); }

// prepare-data replaces a dataset (staging it again), an empty file, or an HDF5 file it cannot
// open (a damaged dataset), but not a file that holds something else: a deck, a text, a
// checkpoint (a typo in --out replaced them without a word).
void refuse_to_replace_other_files(const std::string& out) {
  std::error_code ec;
  if (!fs::is_regular_file(out, ec) || fs::file_size(out, ec) == 0 || ec) return;
  if (!hdf5::is_hdf5_file(out))
    fatal_all(fmt::format("prepare-data: --out {} is a file that is not HDF5; prepare-data replaces only a dataset: "
                          "remove it first, or write elsewhere",
                          out));
  hdf5::Hid file(H5Fopen(out.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) {
    hdf5_error_text();  // (cleared: a damaged dataset is replaced)
    return;
  }
  if (!hdf5::link_exists(file, "train") && !hdf5::link_exists(file, "test"))
    fatal_all(fmt::format("prepare-data: --out {} is an HDF5 file but not a dataset (no /train, no /test: a checkpoint?); "
                          "prepare-data replaces only a dataset: remove it first, or write elsewhere",
                          out));
}

// Creates a temporary file beside OUT with /train and /test, lets `fill` write, then renames over OUT, so a failed
// conversion never leaves a half-written dataset under the real name. An OUT that is a symbolic
// link is written through: the file it points to is replaced, not the link.
template <typename Fill>
void write_atomically(const std::string& out_given, Fill fill) {
  leave_files_to_the_kernel_at_exit();
  std::lock_guard<std::recursive_mutex> lock(hdf5::mutex());
  hdf5::quiet();
  const std::string out = out_given.empty() ? out_given : through_links(out_given).string();
  const fs::path target(out);
  std::error_code ec;
  if (out.empty()) fatal_all("prepare-data: --out is empty; give the file to write, e.g. data/data.h5");
  if (fs::is_directory(target, ec) || out.back() == '/')
    fatal_all(fmt::format("prepare-data: --out {} is a folder; give the file to write, e.g. {}", out,
                          (target / "data.h5").lexically_normal().string()));
  refuse_to_replace_other_files(out);
  // A file name longer than the file system takes is found before anything is made or converted.
  if (const auto name = target.filename().string(); name.size() > NAME_MAX)
    fatal_all(fmt::format("prepare-data: --out {}: its file name is {} bytes, more than a file name may have ({})", out,
                          name.size(), NAME_MAX));
  MadeFolders made;  // removed again when the conversion fails: it leaves nothing behind
  if (target.has_parent_path())
    if (const auto error = make_folders(target.parent_path(), made)) {
      remove_made_folders(made);
      fatal_all(fmt::format("prepare-data: --out {}: cannot make its folder {} ({})", out,
                            target.parent_path().string(), error.message()));
    }
  // One temporary file per process: tasks that stage the same file (srun on several nodes, a
  // shared folder) each write their own and rename it over the same name; the last one wins.
  // Its host, process id and a random part name it (process ids repeat across nodes, and every
  // container's first process is 1), and it is created only if new: a process writes and removes
  // only its own.
  // In OUT's folder, named after OUT's first 100 bytes (all of it would be over a file name's
  // limit with the suffix for a long OUT).
  const std::string name = target.filename().string();
  size_t kept = std::min<size_t>(name.size(), 100);
  while (kept > 0 && kept < name.size() && (static_cast<unsigned char>(name[kept]) & 0xC0) == 0x80)
    --kept;  // (not inside a UTF-8 character)
  const fs::path tmp_name = fmt::format("{}.tmp.{}.{}.{:08x}", name.substr(0, kept), host_name().substr(0, 64),
                                        static_cast<long>(getpid()), std::random_device{}());
  const std::string tmp = (target.has_parent_path() ? target.parent_path() / tmp_name : tmp_name).string();
  // HDF5 can fail after creating the file (a lock it cannot take): a name that was not there is ours.
  std::error_code exists_error;
  const bool created = !fs::exists(tmp, exists_error) && !exists_error;
  try {
    {
      hdf5::Hid file(H5Fcreate(tmp.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT));
      if (!file.valid())
        fatal_all(fmt::format("prepare-data: --out {}: cannot create the file ({})", out, innermost(hdf5_error_text())));
      hdf5::Hid train(HDF5_CHECK(H5Gcreate2(file, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
      hdf5::Hid test(HDF5_CHECK(H5Gcreate2(file, "test", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
      fill(file.get());
      if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0) throw WriteFailed(fmt::format("writing it failed: {}", write_error_reason()));
    }
    fs::rename(tmp, out, ec);
    if (ec) fatal_all(fmt::format("prepare-data: --out {}: cannot put the file there ({})", out, ec.message()));
  } catch (const WriteFailed& e) {
    if (created) fs::remove(tmp, ec);
    remove_made_folders(made);
    fatal_one(fmt::format("prepare-data: --out {}: {} (nothing written: its temporary file {} is removed{})", out,
                          e.what(), tmp, fs::exists(out, ec) ? ", and the file already there is as it was" : ""));
  } catch (...) {
    if (created) fs::remove(tmp, ec);  // a failed conversion leaves nothing behind
    remove_made_folders(made);
    throw;
  }
}

}  // namespace

void prepare_fashion_mnist(const std::string& source_dir, const std::string& out) {
  struct Part {
    const char* split;
    const char* images;
    const char* labels;
  };
  const Part parts[] = {{"train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"},
                        {"test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}};
  std::vector<std::pair<Idx, Idx>> loaded;
  for (const auto& p : parts) {
    Idx images = read_idx_gz(source_dir + "/" + p.images, 3);
    Idx labels = read_idx_gz(source_dir + "/" + p.labels, 1);
    if (images.dims[0] != labels.dims[0])
      fatal_all(fmt::format("prepare-data: {} has {} images but {} labels", p.split, images.dims[0], labels.dims[0]));
    for (uint8_t l : labels.bytes)
      if (l >= 10) fatal_all(fmt::format("prepare-data: {} has label {} (expected 0..9)", p.labels, int{l}));
    loaded.emplace_back(std::move(images), std::move(labels));
  }
  write_atomically(out, [&](hid_t file) {
    for (size_t i = 0; i < 2; ++i) {
      const auto& [images, labels] = loaded[i];
      const std::string g = std::string("/") + parts[i].split;
      write_dataset(file, g + "/inputs", {images.dims[0], 1, images.dims[1], images.dims[2]}, H5T_STD_U8LE,
                    H5T_NATIVE_UINT8, images.bytes.data());
      write_dataset(file, g + "/labels", {labels.dims[0]}, H5T_STD_U8LE, H5T_NATIVE_UINT8, labels.bytes.data());
    }
    hdf5::write_int_attribute(file, "classes", 10);
    hdf5::write_string_attribute(file, "class_names", kFashionClasses);
    hdf5::write_string_attribute(file, "source", "Fashion-MNIST (Zalando Research), IDX files from " + source_dir);
    hdf5::write_string_attribute(file, "license", "MIT");
  });
}

void prepare_synthetic(const SyntheticSpec& spec, const std::string& out) {
  // The first option out of range, named with its value.
  for (const auto& [option, value, least] :
       {std::tuple<const char*, int64_t, int64_t>{"--train", spec.train, 1}, {"--test", spec.test, 1},
        {"--classes", spec.classes, 2}, {"--shape's C", spec.channels, 1}, {"--shape's H", spec.height, 1},
        {"--shape's W", spec.width, 1}})
    if (value < least) fatal_all(fmt::format("prepare-data synthetic: {} {} must be {} or more", option, value, least));
  // Both splits are made in memory (float32, twice over while they are drawn).
  // (and the classes' prototypes, float32)
  const double pixels = static_cast<double>(spec.channels) * static_cast<double>(spec.height) * static_cast<double>(spec.width);
  if (4.0 * static_cast<double>(spec.classes) * pixels > static_cast<double>(kMaxMadeBytes))
    fatal_all(fmt::format("prepare-data synthetic: --classes {} prototypes of {}x{}x{} need more than 16 GiB of memory",
                          spec.classes, spec.channels, spec.height, spec.width));
  const double bytes = 8.0 * (static_cast<double>(spec.train) + static_cast<double>(spec.test)) * pixels;
  if (bytes > static_cast<double>(kMaxMadeBytes))
    fatal_all(fmt::format("prepare-data synthetic: --train {} + --test {} samples of {}x{}x{} need {:.0f} GiB of "
                          "memory to make (at most 16)",
                          spec.train, spec.test, spec.channels, spec.height, spec.width, bytes / (1LL << 30)));
  if (!(spec.noise >= 0 && std::isfinite(spec.noise)))
    fatal_all(fmt::format("prepare-data synthetic: --noise {} must be a finite standard deviation >= 0", spec.noise));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(spec.seed);
  const at::Tensor prototypes = at::randn({spec.classes, spec.channels, spec.height, spec.width}, gen);
  auto make = [&](int64_t n) {
    at::Tensor labels = at::randint(spec.classes, {n}, gen, at::kLong);
    at::Tensor inputs = prototypes.index_select(0, labels) +
                        spec.noise * at::randn({n, spec.channels, spec.height, spec.width}, gen);
    return std::make_pair(inputs.contiguous(), labels);
  };
  const auto train = make(spec.train);
  const auto test = make(spec.test);
  write_atomically(out, [&](hid_t file) {
    for (auto [name, data] : {std::pair<const char*, const std::pair<at::Tensor, at::Tensor>*>{"/train", &train},
                              {"/test", &test}}) {
      const auto n = static_cast<hsize_t>(data->first.size(0));
      write_dataset(file, std::string(name) + "/inputs",
                    {n, static_cast<hsize_t>(spec.channels), static_cast<hsize_t>(spec.height),
                     static_cast<hsize_t>(spec.width)},
                    H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, data->first.data_ptr());
      write_dataset(file, std::string(name) + "/labels", {n}, H5T_STD_I64LE, H5T_NATIVE_INT64,
                    data->second.data_ptr());
    }
    hdf5::write_int_attribute(file, "classes", spec.classes);
    hdf5::write_string_attribute(file, "source",
                           fmt::format("synthetic: {} prototypes + N(0, {}^2) noise, seed {}", spec.classes,
                                       spec.noise, spec.seed));
  });
}

// ---- tokens ------------------------------------------------------------------------------

namespace {

// The narrowest unsigned HDF5 type that holds ids below `vocab`: uint8 bytes for text.
hid_t token_file_type(int64_t vocab) {
  if (vocab <= 256) return H5T_STD_U8LE;
  if (vocab <= 65536) return H5T_STD_U16LE;
  return H5T_STD_I32LE;
}

void write_tokens(hid_t file, const char* split, const std::vector<int64_t>& tokens, int64_t vocab) {
  write_dataset(file, std::string("/") + split + "/tokens", {static_cast<hsize_t>(tokens.size())},
                token_file_type(vocab), H5T_NATIVE_INT64, tokens.data());
}

}  // namespace

void prepare_text(const std::string& source, double test_fraction, const std::string& out) {
  if (!(test_fraction > 0 && test_fraction < 1))
    fatal_all(fmt::format("prepare-data text: --test-fraction {} must be in (0, 1)", test_fraction));
  leave_files_to_the_kernel_at_exit();
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory(source, ec)) {
    for (const auto& entry : fs::directory_iterator(source, ec))
      if (entry.is_regular_file() && !entry.is_symlink()) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
  } else if (fs::is_regular_file(source, ec)) {
    files.push_back(source);
  } else {
    fatal_all(fmt::format("prepare-data text: --source {} is neither a file nor a directory (apt-get install fortunes "
                          "gives /usr/share/games/fortunes)",
                          source));
  }
  // The output among the inputs would be read, then replaced by the tokens: the text gone. (An
  // HDF5 file already in a source folder is skipped below, it holds NUL bytes: such an output, the
  // tokens of an earlier run, is made again.)
  for (const auto& path : files)
    if (fs::equivalent(path, out, ec) && !hdf5::is_hdf5_file(path.string()))
      fatal_all(fmt::format("prepare-data text: --out {} is the source {}: the tokens would replace the text; "
                            "write them elsewhere",
                            out, path.string()));
  std::vector<int64_t> train, test;
  size_t used = 0;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.empty() || text.find('\0') != std::string::npos) continue;  // empty or binary
    const auto cut = static_cast<size_t>(static_cast<double>(text.size()) * (1.0 - test_fraction));
    for (size_t i = 0; i < text.size(); ++i) (i < cut ? train : test).push_back(static_cast<unsigned char>(text[i]));
    ++used;
  }
  if (train.size() < 2 || test.size() < 2)
    fatal_all(fmt::format("prepare-data text: {} holds too little text ({} files, {} bytes)", source, used,
                          train.size() + test.size()));
  write_atomically(out, [&](hid_t file) {
    write_tokens(file, "train", train, 256);
    write_tokens(file, "test", test, 256);
    hdf5::write_int_attribute(file, "vocab", 256);
    hdf5::write_string_attribute(file, "source", fmt::format("byte-level tokens of {} text files under {}", used, source));
  });
}

void prepare_synthetic_tokens(const SyntheticTokensSpec& spec, const std::string& out) {
  for (const auto& [option, value] : {std::pair<const char*, int64_t>{"--tokens", spec.train_tokens},
                                      {"--test-tokens", spec.test_tokens}, {"--vocab", spec.vocab}})
    if (value < 2) fatal_all(fmt::format("prepare-data synthetic: {} {} must be 2 or more", option, value));
  if (spec.vocab > std::numeric_limits<int32_t>::max())  // the widest token type a dataset stores
    fatal_all(fmt::format("prepare-data synthetic: --vocab {} is larger than int32 token ids hold ({})", spec.vocab,
                          std::numeric_limits<int32_t>::max()));
  // Each token is made twice over in memory (int64 tensor, then vector), both splits at once.
  const double bytes = 16.0 * (static_cast<double>(spec.train_tokens) + static_cast<double>(spec.test_tokens));
  if (bytes > static_cast<double>(kMaxMadeBytes))
    fatal_all(fmt::format("prepare-data synthetic: --tokens {} + --test-tokens {} need {:.0f} GiB of memory to make "
                          "(at most 16)",
                          spec.train_tokens, spec.test_tokens, bytes / (1LL << 30)));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(spec.seed);
  auto make = [&](int64_t n) {
    const at::Tensor t = at::randint(spec.vocab, {n}, gen, at::kLong);
    return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
  };
  const auto train = make(spec.train_tokens), test = make(spec.test_tokens);
  write_atomically(out, [&](hid_t file) {
    write_tokens(file, "train", train, spec.vocab);
    write_tokens(file, "test", test, spec.vocab);
    hdf5::write_int_attribute(file, "vocab", spec.vocab);
    hdf5::write_string_attribute(file, "source", fmt::format("synthetic: uniform random tokens in [0, {}), seed {}",
                                                       spec.vocab, spec.seed));
  });
}

}  // namespace trident::data
