#!/usr/bin/env bash
# Runs every Fuzz target of the main module for FUZZ_TIME (default 10s)
# each, one after the other. New failing inputs land in the package's
# testdata/fuzz/ directory, where `go test` replays them from then on.
# A target that fails does not stop the others; the failures are listed
# at the end, and the script exits 1 if there were any.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
fuzztime=${FUZZ_TIME:-10s}
go=${GO:-go}

# Packages whose test files declare a Fuzz target; `go test -list` then
# names the targets exactly.
mapfile -t dirs < <(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' . |
	grep -v -e '^./test/tools/' -e '/testdata/' | xargs -r -n1 dirname | sort -u)

out=$(mktemp)
trap 'rm -f "$out"' EXIT

# deadline_only tells whether a failed run's output ($out) is Go 1.26's
# fuzzing coordinator reporting its own -fuzztime deadline: the target's
# one failure is "context deadline exceeded" and no failing input was
# written. The coordinator sometimes takes the deadline it set itself
# for an error when it comes while a worker is busy, most often while
# one minimizes a new input (go.dev/issue/75804, fixed in Go 1.27); a
# crash, a hang or a failed check writes its input, and a broken build
# or seed fails otherwise.
deadline_only() {
	local target=$1
	! grep -q 'Failing input written to' "$out" &&
		[[ $(grep -c -e '^--- FAIL' -e '^    --- FAIL' "$out") == 1 ]] &&
		grep -A1 -e "^--- FAIL: $target " "$out" | tail -1 | grep -qx '    context deadline exceeded'
}

ran=0
failed=()
for dir in "${dirs[@]}"; do
	mapfile -t targets < <("$go" test -list '^Fuzz' "$dir" | grep '^Fuzz' || true)
	for target in "${targets[@]}"; do
		echo "fuzz: $dir $target ($fuzztime)"
		ran=$((ran + 1))
		if "$go" test "$dir" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" 2>&1 | tee "$out"; then
			continue
		fi
		if deadline_only "$target"; then
			echo "fuzz: $dir $target: nothing found; the failure is Go's fuzzing coordinator reporting its own deadline (go.dev/issue/75804)"
			continue
		fi
		failed+=("$dir $target")
	done
done
echo "fuzz: ran $ran targets, ${#failed[@]} failed"
if ((${#failed[@]} > 0)); then
	printf 'fuzz: FAILED %s\n' "${failed[@]}"
	exit 1
fi
