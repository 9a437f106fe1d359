# Sourced by the benchmark scripts: where trident is, where results go, a scratch folder to run
# in (removed at exit), and reading numbers out of report.json.
#   source common.sh [BUILD_DIR]
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
trident=$build/app/trident
out=$here/results
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# field FILE KEY: the first number stored under "KEY" in a JSON file written by trident.
field() { sed -n "s/.*\"$2\": \([0-9.e+-]*\).*/\1/p" "$1" | head -1; }
