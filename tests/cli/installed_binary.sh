#!/usr/bin/env bash
# installed_binary.sh CMAKE BUILD_DIR TRIDENT: `cmake --install`ed, trident and trident-torch start
# in an empty environment (they find the libraries they were linked against: a pip LibTorch, CUDA,
# NCCL in the CUDA flavour, without LD_LIBRARY_PATH), trident hands `train` to the trident-torch
# beside it, and their RUNPATHs, and the build tree's (TRIDENT), name only folders that exist (no
# empty entry: the loader reads one as the current folder). trident itself needs no LibTorch
# library, and without trident-torch beside it, `train` is a fault (exit 1) that names the file,
# while `plan` (a login node's check of a deck) runs as with it.
set -u
cmake=$1 build=$2 build_binary=$3
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$cmake" --install "$build" --prefix "$prefix" >/dev/null || fail "cmake --install"
env -i PATH=/usr/bin:/bin "$prefix/bin/trident" --version || fail "the installed binary does not start"
env -i PATH=/usr/bin:/bin "$prefix/bin/trident" train --help >"$prefix/train_help.txt" 2>&1 ||
  fail "the installed trident does not run train --help: $(tail -3 "$prefix/train_help.txt")"
grep -q -- "--help-deck" "$prefix/train_help.txt" ||
  fail "train --help printed no train options: $(head -3 "$prefix/train_help.txt")"
env -i PATH=/usr/bin:/bin "$prefix/bin/trident-torch" --version || fail "the installed trident-torch does not start"
command -v readelf >/dev/null || fail "readelf (binutils) is needed to read the RUNPATH"
for binary in "$prefix/bin/trident" "$build_binary"; do
  libraries=$(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  echo "NEEDED by $binary: $libraries"
  case " $libraries" in *" libtorch"* | *" libc10"*) fail "$binary needs LibTorch ($libraries)" ;; esac
done
# Without trident-torch beside it: train is a fault naming the missing file; --version still runs.
mkdir "$prefix/alone"
cp "$prefix/bin/trident" "$prefix/alone/"
env -i PATH=/usr/bin:/bin "$prefix/alone/trident" train --help >"$prefix/alone.txt" 2>&1
rc=$?
cat "$prefix/alone.txt"
[ "$rc" = 1 ] || fail "trident without trident-torch: exit code $rc, expected 1"
grep -q "cannot run $prefix/alone/trident-torch (No such file or directory): train needs it" "$prefix/alone.txt" ||
  fail "trident without trident-torch: the message does not name the missing file"
env -i PATH=/usr/bin:/bin "$prefix/alone/trident" --version >/dev/null || fail "trident alone does not start"
# The plan reads the dataset's vocabulary (1000, not the 256 it assumes without a file).
"$prefix/bin/trident" prepare-data synthetic --out "$prefix/tokens.h5" --tokens 40000 --vocab 1000 >/dev/null ||
  fail "prepare-data synthetic --tokens"
deck=$(cd "$(dirname "$0")/../../inputs" && pwd)/gpt_fortunes.ini
for binary in "$prefix/alone/trident" "$prefix/bin/trident-torch"; do
  env -i PATH=/usr/bin:/bin "$binary" plan "$deck" --world 4 --set parallel.pp=2 --set parallel.zero=1 \
    --set data.path="$prefix/tokens.h5" \
    >"$prefix/plan_$(basename "$(dirname "$binary")").txt" 2>&1 || fail "$binary plan: $(tail -3 "$prefix/plan_"*.txt)"
done
cat "$prefix/plan_alone.txt"
grep -q "^layout: world 4 = dp 2 x pp 2 | zero 1" "$prefix/plan_alone.txt" || fail "trident alone: plan printed no layout"
grep -q "(input $prefix/tokens.h5)" "$prefix/plan_alone.txt" || fail "trident alone: plan did not read the dataset"
diff "$prefix/plan_alone.txt" "$prefix/plan_bin.txt" || fail "trident alone and trident-torch plan differently"
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
check_runpath "$prefix/bin/trident-torch"
check_runpath "$build_binary"  # what the README runs: build/app/trident
check_runpath "$(dirname "$build_binary")/trident-torch"
echo PASS
