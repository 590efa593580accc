#!/usr/bin/env bash
# Makes sure the tools leasehold's end-to-end tests drive are present.
#
# kubectl: the one named by $LEASEHOLD_KUBECTL if set; otherwise `kubectl`
# on the PATH if it works; otherwise the real kubectl is built from its Go
# module (test/tools/kubectl, a module of its own) into bin/kubectl, which
# `make test` puts on the tests' PATH. LEASEHOLD_BUILD_KUBECTL=1 builds
# bin/kubectl even when the PATH has one.
#
# chromium, node and playwright-core, for the dashboard's browser tests:
# $LEASEHOLD_CHROMIUM or Debian's chromium (installed with apt-get when
# missing and run as root), and `npm ci` in test/browser.
#
# prometheus, for the monitoring test that scrapes the server with it:
# $LEASEHOLD_PROMETHEUS or Debian's prometheus (installed with apt-get when
# missing and run as root, without the exporters it recommends).
#
# With CI=true every failure is fatal; otherwise a failure is reported and
# the script exits 0, so that the unit tests can still run.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin="$root/bin"
tooldir="$root/test/tools/kubectl"

log() { echo "install-test-tools: $*" >&2; }

fail() {
	log "ERROR: $*"
	if [[ "${CI:-}" == "true" ]]; then
		exit 1
	fi
	log "continuing without it: end-to-end tests that need it will fail or skip"
	exit 0
}

# client_version KUBECTL prints the client version line of KUBECTL, or
# fails if it does not run.
client_version() {
	local out
	out=$("$1" version --client 2>/dev/null) || return 1
	grep -m1 '^Client Version:' <<<"$out"
}

# build_kubectl builds test/tools/kubectl into bin/kubectl unless the
# binary there was built from the same sources.
build_kubectl() {
	command -v go >/dev/null || fail "go is not on the PATH; cannot build kubectl"
	local stamp="$bin/.kubectl.stamp" sum
	sum=$(cat "$tooldir/go.mod" "$tooldir/go.sum" "$tooldir/main.go" | sha256sum | cut -d' ' -f1)
	if [[ -x "$bin/kubectl" && -f "$stamp" && "$(cat "$stamp")" == "$sum" ]] && client_version "$bin/kubectl" >/dev/null; then
		log "bin/kubectl is up to date"
		return 0
	fi
	mkdir -p "$bin"
	# Kubernetes v1.N.P ships kubectl module v0.N.P.
	local modver kver pkg=k8s.io/component-base/version
	modver=$(cd "$tooldir" && GOWORK=off go list -m -f '{{.Version}}' k8s.io/kubectl) ||
		fail "cannot read the kubectl module version from test/tools/kubectl/go.mod"
	kver="v1.${modver#v0.}"
	local major=1 minor=${kver#v1.}
	minor=${minor%%.*}
	log "building kubectl $kver from k8s.io/kubectl@$modver (takes a few minutes the first time)"
	if ! (cd "$tooldir" && GOWORK=off go build -trimpath -buildvcs=false \
		-ldflags "-s -w -X $pkg.gitVersion=$kver -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor" \
		-o "$bin/kubectl.tmp" .); then
		rm -f "$bin/kubectl.tmp"
		fail "building kubectl failed"
	fi
	mv -f "$bin/kubectl.tmp" "$bin/kubectl"
	client_version "$bin/kubectl" >/dev/null || fail "bin/kubectl was built but 'kubectl version --client' fails"
	echo "$sum" >"$stamp"
}

kubectl=""
if [[ -n "${LEASEHOLD_KUBECTL:-}" && "${LEASEHOLD_KUBECTL}" != "$bin/kubectl" ]]; then
	kubectl=$LEASEHOLD_KUBECTL
	[[ -x "$kubectl" ]] || fail "LEASEHOLD_KUBECTL=$kubectl is not an executable file"
	client_version "$kubectl" >/dev/null || fail "LEASEHOLD_KUBECTL=$kubectl: 'kubectl version --client' fails"
elif [[ "${LEASEHOLD_BUILD_KUBECTL:-}" == "1" || "${LEASEHOLD_KUBECTL:-}" == "$bin/kubectl" ]]; then
	build_kubectl
	kubectl=$bin/kubectl
else
	found=$(command -v kubectl || true)
	if [[ -n "$found" && "$found" != "$bin/kubectl" ]] && client_version "$found" >/dev/null; then
		kubectl=$found
	else
		if [[ -n "$found" && "$found" != "$bin/kubectl" ]]; then
			log "$found does not run 'kubectl version --client'; building one instead"
		fi
		build_kubectl
		kubectl=$bin/kubectl
	fi
fi
log "kubectl: $kubectl ($(client_version "$kubectl"))"

# The dashboard's browser tests (test/browser) drive Debian's chromium with
# playwright-core from npm, which downloads no browser of its own.
# LEASEHOLD_CHROMIUM names another Chromium.
as_root_apt() {
	command -v apt-get >/dev/null && [[ $(id -u) == 0 ]] || return 1
	log "apt-get install $* (takes a minute or two the first time)"
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } >&2
}
# find_tool VAR ENV NAME [APT_ARGS...] sets VAR to the executable that $ENV
# names, else to NAME on the PATH, else to Debian's NAME, installed with
# apt-get (with APT_ARGS) when run as root.
find_tool() {
	local var=$1 env=$2 name=$3 path
	shift 3
	path=${!env:-}
	if [[ -n "$path" ]]; then
		[[ -x "$path" ]] || fail "$env=$path is not an executable file"
	else
		path=$(command -v "$name" || true)
		if [[ -z "$path" ]]; then
			as_root_apt "$@" "$name" || fail "no $name on the PATH, and installing Debian's failed (set $env)"
			path=$(command -v "$name") || fail "$name is still not on the PATH"
		fi
	fi
	printf -v "$var" '%s' "$path"
}
find_tool chromium LEASEHOLD_CHROMIUM chromium
log "chromium: $chromium ($("$chromium" --version 2>/dev/null | head -1))"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	as_root_apt nodejs npm || fail "node and npm are needed for the browser tests, and installing Debian's failed"
fi
(cd "$root/test/browser" && npm ci --no-audit --no-fund --loglevel=error) >&2 || fail "npm ci in test/browser failed"
log "playwright-core: $(cd "$root/test/browser" && node -p "require('playwright-core/package.json').version")"

# test/e2e/prometheus_test.go scrapes the server with a real Prometheus and
# evaluates kube-apiserver's rules against it.
find_tool prometheus LEASEHOLD_PROMETHEUS prometheus --no-install-recommends
log "prometheus: $prometheus ($("$prometheus" --version 2>&1 | head -1))"
