#!/usr/bin/env bash
# installed_binary.sh CMAKE BUILD_DIR TRIDENT: `cmake --install`ed, the binary starts in an empty
# environment (it finds the libraries it was linked against: a pip LibTorch, CUDA, NCCL in the CUDA
# flavour, without LD_LIBRARY_PATH), and its RUNPATH, and the build tree's (TRIDENT), name only
# folders that exist (no empty entry: the loader reads one as the current folder).
set -u
cmake=$1 build=$2 build_binary=$3
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$cmake" --install "$build" --prefix "$prefix" >/dev/null || fail "cmake --install"
env -i PATH=/usr/bin:/bin "$prefix/bin/trident" --version || fail "the installed binary does not start"
command -v readelf >/dev/null || fail "readelf (binutils) is needed to read the RUNPATH"
# check_runpath BINARY: every RUNPATH entry an existing folder.
check_runpath() {
  local runpath
  runpath=$(readelf -d "$1" | sed -n 's/.*(R[UN]*PATH).*\[\(.*\)\]/\1/p')
  echo "RUNPATH of $1: $runpath"
  case ":$runpath:" in *::*) [ -z "$runpath" ] || fail "the RUNPATH of $1 has an empty entry" ;; esac
  IFS=: read -r -a folders <<<"$runpath"
  for d in "${folders[@]}"; do [ -d "$d" ] || fail "RUNPATH folder $d of $1 does not exist"; done
}
check_runpath "$prefix/bin/trident"
check_runpath "$build_binary"  # what the README runs: build/app/trident
echo PASS
