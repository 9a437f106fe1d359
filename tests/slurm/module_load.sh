#!/usr/bin/env bash
# module_load.sh BUILD_DIR VERSION: `cmake --install` into a scratch prefix, then, in a clean
# environment with Debian's Lmod, `module use PREFIX/share/modulefiles && module load trident &&
# trident --version`; the module sets PATH and TRIDENT_HOME, and unloading takes them away.
set -euo pipefail
build=$1 version=$2
fail() { echo "FAIL: $*"; exit 1; }
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null || fail "cmake --install failed"
modulefile=$prefix/share/modulefiles/trident/$version.lua
[ -f "$modulefile" ] || fail "no modulefile at $modulefile"
grep -qF "\"$prefix\"" "$modulefile" || fail "the modulefile does not name the install prefix $prefix"
[ -z "$(find "$build" -newer "$modulefile" -name '*.lua' -path '*modulefiles*')" ] || fail "cmake --install wrote a modulefile into the build folder"
for f in bin/trident share/trident/jobs/ddp_2nodes.slurm share/trident/jobs/strong_scaling.sh \
         share/trident/inputs/fashion_mnist_ddp.ini; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
for f in README.md ARCHITECTURE.md BENCHMARKS.md; do
  [ -s "$prefix/share/doc/trident/$f" ] || fail "not installed: share/doc/trident/$f"
done
# The helpers copied alone into a user's folder use the installed scripts next to them.
mine=$prefix/mine
mkdir "$mine" && cp "$prefix"/share/trident/jobs/{strong_scaling.sh,restart_chain.sh} "$mine/"
TRIDENT_HOME=$prefix bash "$mine/strong_scaling.sh" --help | grep -q "^A scaling study" ||
  fail "strong_scaling.sh copied alone did not find the installed scaling_study.sh"
out=$(TRIDENT_HOME=$prefix bash "$mine/restart_chain.sh" -- nodeck.ini 2>&1) && fail "a chain of a missing deck was submitted"
grep -q "restart_chain.sh: cannot read the deck nodeck.ini" <<<"$out" || fail "restart_chain.sh: $out"
init=
for f in /usr/share/lmod/lmod/init/bash /etc/profile.d/lmod.sh; do [ -r "$f" ] && { init=$f; break; }; done
[ -n "$init" ] || fail "Lmod is not installed (apt-get install lmod; scripts/install-deps.sh does)"

# A login-like shell with nothing of this build on PATH.
env -i HOME="$HOME" PATH=/usr/local/bin:/usr/bin:/bin bash --norc --noprofile -c '
  set -eu
  prefix=$1 version=$2 init=$3
  set +u; . "$init"; set -u
  command -v trident >/dev/null && { echo "FAIL: trident already on PATH before module load"; exit 1; }
  module use "$prefix/share/modulefiles"
  module load trident
  out=$(trident --version)
  echo "module load trident -> $(command -v trident): $out"
  [ "$out" = "trident $version" ] || { echo "FAIL: trident --version says \"$out\""; exit 1; }
  [ "$(command -v trident)" = "$prefix/bin/trident" ] || { echo "FAIL: trident is not the installed one"; exit 1; }
  [ "${TRIDENT_HOME:-}" = "$prefix" ] || { echo "FAIL: TRIDENT_HOME=${TRIDENT_HOME:-unset}, expected $prefix"; exit 1; }
  module list 2>&1 | grep -q "trident/$version" || { echo "FAIL: module list does not show trident/$version"; exit 1; }
  module unload trident
  ! command -v trident >/dev/null || { echo "FAIL: trident still on PATH after module unload"; exit 1; }
  [ -z "${TRIDENT_HOME:-}" ] || { echo "FAIL: TRIDENT_HOME still set after module unload"; exit 1; }
  # The install moved (the old prefix gone): the module finds the new place from its own.
  mv "$prefix" "$prefix.moved"
  module use "$prefix.moved/share/modulefiles"
  module load trident
  [ "$(command -v trident)" = "$prefix.moved/bin/trident" ] || { echo "FAIL: after a move: $(command -v trident || echo no trident)"; mv "$prefix.moved" "$prefix"; exit 1; }
  [ "$(trident --version)" = "trident $version" ] || { echo "FAIL: the moved trident"; mv "$prefix.moved" "$prefix"; exit 1; }
  module help trident 2>&1 | grep -qF "$prefix.moved/share/trident/jobs/ddp_2nodes.slurm" || { echo "FAIL: module help does not name the prefix"; mv "$prefix.moved" "$prefix"; exit 1; }
  module unload trident
  mv "$prefix.moved" "$prefix"
' bash "$prefix" "$version" "$init"
echo PASS
