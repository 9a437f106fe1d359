# cmake -D EXE=... -D OUT=... -D PREFIX=... -D LABELS=... -D TIMEOUT=... -D DISCOVERY_TIMEOUT=...
# -P TridentGtestSuitesList.cmake: writes OUT, the CTest file of one test per gtest suite of EXE
# (cmake/TridentGtestSuites.cmake).
execute_process(COMMAND "${EXE}" --gtest_list_tests OUTPUT_VARIABLE listing ERROR_VARIABLE errors
                RESULT_VARIABLE rc TIMEOUT ${DISCOVERY_TIMEOUT})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --gtest_list_tests failed (${rc}):\n${listing}${errors}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(content "")
set(count 0)
foreach(line IN LISTS lines)
  # A suite's line is flush left and ends in '.' (a parameterised one: "Name/Prefix.  # TypeParam").
  string(REGEX REPLACE "[ ]+#.*$" "" line "${line}")
  if(line MATCHES "^([A-Za-z_][A-Za-z0-9_/]*)\\.$")
    set(suite ${CMAKE_MATCH_1})
    string(REPLACE "/" "_" name "${PREFIX}${suite}")
    string(APPEND content "add_test([==[${name}]==] [==[${EXE}]==] [==[--gtest_filter=${suite}.*]==])\n"
           "set_tests_properties([==[${name}]==] PROPERTIES LABELS [==[${LABELS}]==] TIMEOUT ${TIMEOUT} SKIP_RETURN_CODE 77)\n")
    math(EXPR count "${count} + 1")
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${EXE} --gtest_list_tests listed no suite:\n${listing}")
endif()
file(WRITE "${OUT}" "${content}")
