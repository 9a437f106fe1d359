# trident_gtest_suites(<target> PREFIX <prefix> [LABELS ...] [TIMEOUT <s>] [DISCOVERY_TIMEOUT <s>])
# One CTest test per gtest suite of <target>, <prefix><Suite>, running --gtest_filter=<Suite>.*;
# the suites are listed from the binary after each build (--gtest_list_tests), as
# gtest_discover_tests lists its tests, so a new suite is registered without a CMake change.
# Exit code 77 (every test of the suite skipped; tests/every_test_skipped.hpp) is reported as
# skipped. For binaries whose start is costly (LibTorch: 0.6 s each, about what a unit test takes).
set(trident_gtest_suites_script ${CMAKE_CURRENT_LIST_DIR}/TridentGtestSuitesList.cmake)
function(trident_gtest_suites target)
  cmake_parse_arguments(T "" "PREFIX;TIMEOUT;DISCOVERY_TIMEOUT" "LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(NOT T_DISCOVERY_TIMEOUT)
    set(T_DISCOVERY_TIMEOUT 120)
  endif()
  set(listed ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake)
  set(include_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake)
  string(REPLACE ";" "\\;" labels "${T_LABELS}")
  add_custom_command(TARGET ${target} POST_BUILD BYPRODUCTS ${listed}
    COMMAND ${CMAKE_COMMAND} -D EXE=$<TARGET_FILE:${target}> -D OUT=${listed} -D PREFIX=${T_PREFIX}
            -D "LABELS=${labels}" -D TIMEOUT=${T_TIMEOUT} -D DISCOVERY_TIMEOUT=${T_DISCOVERY_TIMEOUT}
            -P ${trident_gtest_suites_script}
    VERBATIM)
  # CTest reads this; before the first build there is nothing to list, and a test of the same
  # labels fails, saying so (`ctest -L unit` ran nothing and passed).
  file(WRITE ${include_file}
       "if(EXISTS \"${listed}\")\n  include(\"${listed}\")\nelse()\n"
       "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
       "  set_tests_properties(${target}_NOT_BUILT PROPERTIES LABELS [==[${T_LABELS}]==])\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()
