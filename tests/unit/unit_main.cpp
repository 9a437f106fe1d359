// gtest main of trident_unit_tests. CTest runs it once per suite (cmake/TridentGtestSuites.cmake):
// each start loads LibTorch (0.6 s on the 2-core VM, about all a unit test takes), so one process
// per test spent most of the unit tests' time starting. A suite whose tests all skip exits 77.
#include <gtest/gtest.h>

#include "../every_test_skipped.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  return trident::test_support::exit_code_unless_every_test_skipped(failed == 0, failed);
}
