#pragma once
// A test fixture with a scratch folder of its own, made before each test and removed after it:
// <tmp>/trident_<suite>_<pid>_<test>.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "../remove_tree.hpp"

class ScratchFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("trident_" + std::string(test->test_suite_name()) + "_" + std::to_string(::getpid()) + "_" + test->name());
    trident::test_support::remove_tree(dir_.string());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { trident::test_support::remove_tree(dir_.string()); }

  std::filesystem::path dir_;
};
