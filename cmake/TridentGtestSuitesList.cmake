# cmake -D EXE=... -D OUT=... -D PREFIX=... -D LABELS=... -D TIMEOUT=... -D DISCOVERY_TIMEOUT=...
# -P TridentGtestSuitesList.cmake: writes OUT, the CTest file of one test per gtest suite of EXE
# (cmake/TridentGtestSuites.cmake), exit code 77 (every test skipped) reported as skipped.
execute_process(COMMAND "${EXE}" --gtest_list_tests OUTPUT_VARIABLE listing ERROR_VARIABLE errors
                RESULT_VARIABLE rc TIMEOUT ${DISCOVERY_TIMEOUT})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --gtest_list_tests failed (${rc}):\n${listing}${errors}")
endif()
# A suite's line is flush left and ends in '.', or in '.' and a comment (a parameterised suite,
# "Name/Prefix.  # TypeParam = ..."); its tests' lines are indented. Matched in the raw listing, not
# split into a CMake list, which a ';' or '[' in a comment would break.
string(REGEX MATCHALL "\n[A-Za-z_][A-Za-z0-9_/]*\\.( |\n)" suite_lines "\n${listing}\n")
set(content "")
set(count 0)
foreach(line IN LISTS suite_lines)
  string(REGEX REPLACE "^\n(.*)\\.[ \n]$" "\\1" suite "${line}")
  if(suite MATCHES "^DISABLED_")  # gtest runs none of its tests
    continue()
  endif()
  set(name "${PREFIX}${suite}")
  string(APPEND content "add_test([==[${name}]==] [==[${EXE}]==] [==[--gtest_filter=${suite}.*]==])\n"
         "set_tests_properties([==[${name}]==] PROPERTIES LABELS [==[${LABELS}]==] TIMEOUT ${TIMEOUT} SKIP_RETURN_CODE 77)\n")
  math(EXPR count "${count} + 1")
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${EXE} --gtest_list_tests listed no suite:\n${listing}")
endif()
file(WRITE "${OUT}" "${content}")
