#!/usr/bin/env bash
# Runs every Fuzz target of the main module for FUZZ_TIME (default 10s)
# each, one after the other. New failing inputs land in the package's
# testdata/fuzz/ directory, where `go test` replays them from then on.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
fuzztime=${FUZZ_TIME:-10s}
go=${GO:-go}

# Packages whose test files declare a Fuzz target; `go test -list` then
# names the targets exactly.
mapfile -t dirs < <(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' . |
	grep -v -e '^./test/tools/' -e '/testdata/' | xargs -r -n1 dirname | sort -u)

ran=0
for dir in "${dirs[@]}"; do
	mapfile -t targets < <("$go" test -list '^Fuzz' "$dir" | grep '^Fuzz' || true)
	for target in "${targets[@]}"; do
		echo "fuzz: $dir $target ($fuzztime)"
		"$go" test "$dir" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime"
		ran=$((ran + 1))
	done
done
echo "fuzz: ran $ran targets"
