# trident_add_mpi_test(NAME <name> COMMAND <target-or-exe> [ARGS ...] NP <n> [<n> ...] [LABELS ...])
# Registers one CTest test per rank count, <name>_np<n>, run as
#   MPIEXEC_EXECUTABLE MPIEXEC_NUMPROC_FLAG n MPIEXEC_PREFLAGS <command> MPIEXEC_POSTFLAGS args
# with PROCESSORS = n, so ctest -j never oversubscribes the cores (MPICH spins while waiting).
function(trident_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "COMMAND;ARGS;NP;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  list(POP_FRONT T_COMMAND command)
  set(command_args ${T_COMMAND})
  if(TARGET ${command})
    set(command $<TARGET_FILE:${command}>)
  endif()
  foreach(np IN LISTS T_NP)
    set(test_name ${T_NAME}_np${np})
    add_test(NAME ${test_name}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${MPIEXEC_PREFLAGS}
                     ${command} ${MPIEXEC_POSTFLAGS} ${command_args} ${T_ARGS})
    # 77: the gtest mains under mpiexec (tests/mpi/run_over_mpi.hpp) when every test skipped.
    set_tests_properties(${test_name} PROPERTIES PROCESSORS ${np} TIMEOUT ${T_TIMEOUT}
                         LABELS "mpi;${T_LABELS}" SKIP_RETURN_CODE 77)
  endforeach()
endfunction()
