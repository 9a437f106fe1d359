#pragma once
// The exit code of a gtest main whose tests all skipped (a LibTorch or a rank count the suite does
// not run at): 77, which CTest reports as skipped (SKIP_RETURN_CODE in cmake/TridentMpiTest.cmake
// and cmake/TridentGtestSuitesList.cmake), not as a pass that checked nothing.
#include <gtest/gtest.h>

#include <cstdio>

namespace trident::test_support {

inline constexpr int kEveryTestSkipped = 77;

// `passed`: no test failed (on any rank). kEveryTestSkipped where the run passed and every test it
// ran skipped (said on stderr when `say`), else `exit_code`.
inline int exit_code_unless_every_test_skipped(bool passed, int exit_code, bool say = true) {
  const auto& unit = *::testing::UnitTest::GetInstance();
  if (passed && unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count()) {
    if (say) std::fprintf(stderr, "every test skipped: reported to CTest as skipped (exit 77)\n");
    return kEveryTestSkipped;
  }
  return exit_code;
}

}  // namespace trident::test_support
