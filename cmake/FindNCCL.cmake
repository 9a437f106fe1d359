# FindNCCL
# --------
# Finds NVIDIA's NCCL (nccl.h and libnccl).
#
# Where it looks, first match wins:
#   1. the cache variables NCCL_INCLUDE_DIR (folder holding nccl.h) and NCCL_LIBRARY (the library
#      file), e.g. -DNCCL_LIBRARY=.../site-packages/nvidia/nccl/lib/libnccl.so.2 (PyTorch's wheel
#      ships NCCL there, without the unversioned libnccl.so that find_library looks for);
#   2. the environment variables of the same names;
#   3. NCCL_ROOT (cache or environment), CUDA_HOME, CUDA_PATH, /usr/local/cuda, the system paths.
#
# Defines
#   NCCL_FOUND, NCCL_VERSION ("2.28.9", parsed from NCCL_MAJOR/MINOR/PATCH in nccl.h),
#   NCCL_INCLUDE_DIRS, NCCL_LIBRARIES and the imported target NCCL::NCCL.
# nccl.h includes cuda_runtime.h: consumers also need the CUDA runtime (CUDA::cudart).

# An environment variable counts only while the cache has no usable value: a -D given once stays.
# FORCE replaces a NOTFOUND left by an earlier configure run without the variable.
if(NOT NCCL_INCLUDE_DIR AND DEFINED ENV{NCCL_INCLUDE_DIR})
  set(NCCL_INCLUDE_DIR "$ENV{NCCL_INCLUDE_DIR}" CACHE PATH "folder holding nccl.h" FORCE)
endif()
if(NOT NCCL_LIBRARY AND DEFINED ENV{NCCL_LIBRARY})
  set(NCCL_LIBRARY "$ENV{NCCL_LIBRARY}" CACHE FILEPATH "NCCL library file" FORCE)
endif()

set(_nccl_hints "")
foreach(_nccl_root IN ITEMS "${NCCL_ROOT}" "$ENV{NCCL_ROOT}" "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}" /usr/local/cuda)
  if(_nccl_root)
    list(APPEND _nccl_hints "${_nccl_root}")
  endif()
endforeach()

find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include
          DOC "folder holding nccl.h")
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints} PATH_SUFFIXES lib64 lib
             DOC "NCCL library file")

unset(NCCL_VERSION)
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines
       REGEX "^#define[ \t]+NCCL_(MAJOR|MINOR|PATCH)[ \t]+[0-9]+")
  foreach(_nccl_part MAJOR MINOR PATCH)
    if("${_nccl_version_lines}" MATCHES "#define[ \t]+NCCL_${_nccl_part}[ \t]+([0-9]+)")
      set(NCCL_VERSION_${_nccl_part} "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  if(DEFINED NCCL_VERSION_MAJOR AND DEFINED NCCL_VERSION_MINOR AND DEFINED NCCL_VERSION_PATCH)
    set(NCCL_VERSION "${NCCL_VERSION_MAJOR}.${NCCL_VERSION_MINOR}.${NCCL_VERSION_PATCH}")
  endif()
endif()

# A path given by hand is not searched for, so check it: a typo should fail here, not at link time.
set(_nccl_reason "")
if(NCCL_LIBRARY AND NOT EXISTS "${NCCL_LIBRARY}")
  string(APPEND _nccl_reason "NCCL_LIBRARY=${NCCL_LIBRARY} does not exist. ")
  set(NCCL_LIBRARY "NCCL_LIBRARY-NOTFOUND" CACHE FILEPATH "NCCL library file" FORCE)
endif()
if(NCCL_INCLUDE_DIR AND NOT EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  string(APPEND _nccl_reason "NCCL_INCLUDE_DIR=${NCCL_INCLUDE_DIR} has no nccl.h. ")
  set(NCCL_INCLUDE_DIR "NCCL_INCLUDE_DIR-NOTFOUND" CACHE PATH "folder holding nccl.h" FORCE)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION
  REASON_FAILURE_MESSAGE "${_nccl_reason}")

if(NCCL_FOUND)
  set(NCCL_INCLUDE_DIRS "${NCCL_INCLUDE_DIR}")
  set(NCCL_LIBRARIES "${NCCL_LIBRARY}")
  if(NOT TARGET NCCL::NCCL)
    add_library(NCCL::NCCL UNKNOWN IMPORTED)
    set_target_properties(NCCL::NCCL PROPERTIES
      IMPORTED_LOCATION "${NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  endif()
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
unset(_nccl_hints)
unset(_nccl_root)
unset(_nccl_part)
unset(_nccl_version_lines)
unset(_nccl_reason)
