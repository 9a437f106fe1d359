// The CRC-32 blocks prepare-data records on each dataset, and how a damaged byte is found: by the
// rank whose share of blocks holds it, named by dataset and rows.
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/hdf5.hpp"
#include "data/dataset.hpp"
#include "data/describe.hpp"
#include "data/prepare.hpp"
#include "../tools/flip_byte.hpp"
#include "scratch_folder.hpp"

namespace trident {
namespace {

using DatasetChecksums = ScratchFolderTest;

std::vector<int64_t> blocks_of(const std::string& path, const std::string& name) {
  hdf5::Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  hdf5::Hid dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
  std::vector<int64_t> blocks;
  EXPECT_TRUE(hdf5::read_crc32_blocks(dataset, blocks)) << name;
  return blocks;
}

void flip_byte(const std::string& path, const std::string& name, long byte) {
  ASSERT_EQ(test::flip_byte(path, name, byte), "");
}

TEST_F(DatasetChecksums, PrepareDataRecordsTheCrcOfEachMebibyteAsStored) {
  // One text file of 2.5 MiB: /train/tokens is its first 90% as uint8, so blocks of 1 MiB rows.
  std::string text(5 << 19, ' ');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('a' + (i * 7 + i / 1000) % 26);
  const std::string corpus = (dir_ / "corpus.txt").string(), out = (dir_ / "text.h5").string();
  std::ofstream(corpus, std::ios::binary) << text;
  data::prepare_text(corpus, 0.1, out);
  const auto train_bytes = static_cast<int64_t>(static_cast<double>(text.size()) * 0.9);
  const std::vector<int64_t> blocks = blocks_of(out, "/train/tokens");
  ASSERT_EQ(blocks.size(), 9u);  // three (begin, end, crc)
  for (int b = 0; b < 3; ++b) {
    const int64_t begin = b * (1 << 20), end = b < 2 ? begin + (1 << 20) : train_bytes;
    EXPECT_EQ(blocks[3 * b], begin);
    EXPECT_EQ(blocks[3 * b + 1], end);
    const uLong crc = crc32_z(0L, reinterpret_cast<const Bytef*>(text.data() + begin), static_cast<z_size_t>(end - begin));
    EXPECT_EQ(blocks[3 * b + 2], static_cast<int64_t>(crc)) << "block " << b;
  }
  int checksummed = -1;
  EXPECT_EQ(data::find_damaged_dataset(out, 0, 1, &checksummed), "");
  EXPECT_EQ(checksummed, 2);  // /test/tokens, /train/tokens
}

TEST_F(DatasetChecksums, AFlippedByteIsFoundByThePartHoldingItsBlock) {
  const std::string out = (dir_ / "synthetic.h5").string();
  data::prepare_synthetic({}, out);  // 4096 x 1 x 28 x 28 float32: 3136 bytes a row, 334 rows a block
  flip_byte(out, "/train/inputs", 3000L * 3136 + 17);
  data::SplitReader train(out, "train"), test(out, "test");
  EXPECT_EQ(train.find_damaged_rows(0, 2), "");  // blocks 0..5 of 13
  const std::string message = train.find_damaged_rows(1, 2);
  EXPECT_NE(message.find("data.path " + out + ": /train/inputs: rows [2672, 3006) differ from their CRC-32"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("the file is damaged"), std::string::npos) << message;
  EXPECT_EQ(train.find_damaged_rows(0, 1), message);
  EXPECT_EQ(test.find_damaged_rows(0, 1), "");
  EXPECT_NE(data::find_damaged_dataset(out).find(out + ": /train/inputs: rows [2672, 3006)"), std::string::npos);
}

TEST_F(DatasetChecksums, ALabelChangedOnDiskIsNamedAsDamageNotAsAWrongLabel) {
  const std::string out = (dir_ / "synthetic.h5").string();
  data::prepare_synthetic({}, out);
  flip_byte(out, "/train/labels", 8 * 100);  // the low byte of label 100: 0..9 becomes 246..255
  try {
    data::SplitReader train(out, "train");
    ADD_FAILURE() << "the damaged labels were opened";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("/train/labels: rows [0, 4096) differ from their CRC-32"), std::string::npos)
        << e.what();
  }
}

TEST_F(DatasetChecksums, AFileWithoutChecksumsIsReadAsBefore) {
  const std::string out = (dir_ / "synthetic.h5").string();
  data::prepare_synthetic({}, out);
  {
    hdf5::Hid file(H5Fopen(out.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    for (const auto& name : hdf5::dataset_names(file)) {
      hdf5::Hid dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
      ASSERT_GE(H5Adelete(dataset, "crc32_blocks"), 0) << name;
    }
  }
  flip_byte(out, "/train/inputs", 5);
  data::SplitReader train(out, "train");
  EXPECT_EQ(train.find_damaged_rows(0, 1), "");
  int checksummed = -1;
  EXPECT_EQ(data::find_damaged_dataset(out, 0, 1, &checksummed), "");
  EXPECT_EQ(checksummed, 0);
}

TEST_F(DatasetChecksums, BlocksThatLeaveRowsUncoveredAreReported) {
  const std::string out = (dir_ / "synthetic.h5").string();
  data::prepare_synthetic({}, out);
  {
    hdf5::Hid file(H5Fopen(out.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    hdf5::Hid labels(H5Dopen2(file, "/train/labels", H5P_DEFAULT));
    std::vector<int64_t> blocks;
    ASSERT_TRUE(hdf5::read_crc32_blocks(labels, blocks));
    ASSERT_EQ(blocks.size(), 3u);  // 4096 int64 labels: one block
    ASSERT_GE(H5Adelete(labels, "crc32_blocks"), 0);
    ASSERT_TRUE(hdf5::write_crc32_blocks(labels, {0, 4000, blocks[2]}));
  }
  data::SplitReader train(out, "train");
  const std::string message = train.find_damaged_rows(0, 1);
  EXPECT_NE(message.find("/train/labels: its crc32_blocks attribute does not cover rows [4000, 4096)"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace trident
