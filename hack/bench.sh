#!/usr/bin/env bash
# The `leasehold bench` scenarios that `make bench` runs after the Go
# microbenchmarks, each against a server of its own on a fresh data
# directory, and the scaling curve drawn from the fleet runs.
#
#   throughput   100 clients updating leases as fast as they can, beside a
#                bare embedded etcd doing one put per update
#   ceiling      the same 100 clients, then a fleet of $BENCH_CEILING_NODES
#                renewing every $BENCH_INTERVAL, against `leasehold bench
#                echo-server`, which answers each request with its own body
#                over the same HTTPS: what the load and the transport cost
#                with no server behind them
#   for each N in $BENCH_NODES, on a fresh server:
#     fleet      N virtual agents renewing every 10 s (or, with
#                $BENCH_RATE, at the same total rate whatever N)
#     list       full lists of the N leases in kube-node-lease, whole
#                and in pages of 500, and whole in JSON from the watch
#                cache, as an informer with client-go's defaults lists
#     restart    SIGTERM, start again on the same data: time to the first
#                200 from /readyz, and until every watch cache is filled
#   watch        $BENCH_WATCHERS watchers on the renewals of 10 writers
#   plot         the fleet runs as an SVG: CPU per 1000 renewals, memory
#                per lease and p99 latency against N
# and, only when BENCH_SCENARIOS names it:
#   compare      the same fleet of $BENCH_COMPARE_NODES against each of
#                $BENCH_COMPARE_TARGETS, each on fresh data:
#                  leasehold       leasehold serve on its embedded etcd
#                  leasehold-etcd  leasehold serve on a `leasehold etcd`
#                                  member of its own
#                  kube-apiserver  the upstream kube-apiserver (built from
#                                  hack/tools/kube-apiserver into bin/ the
#                                  first time, a few minutes) on such a
#                                  member, auditing every request at
#                                  Metadata level as leasehold does by
#                                  default
#                The member's CPU and memory are measured with the server's
#                (bench --etcd-pid). kube-apiserver runs without a
#                controller manager: no node lifecycle controller and no
#                garbage collector, which leasehold runs in its process.
#   outage       a fleet of $BENCH_OUTAGE_NODES renewing every 10 s, half
#                of it stopped at once 20 s in, on a server whose grace
#                period is 20 s: how long until the node lifecycle
#                controller has marked each stopped node Unknown, and the
#                latency of the half still renewing meanwhile
#   connections  $BENCH_CONNECTIONS_NODES nodes renewing every 10 s on the
#                load generator's 8 connections, then each on a connection
#                of its own as in a real fleet, each on a fresh server: what
#                a connection costs the server in memory (its anonymous
#                memory, the difference over the connections added)
#   checkpoints  $BENCH_CHECKPOINTS_NODES nodes renewing every 10 s, each
#                renewal written and then with `leasehold serve
#                --node-lease-checkpoint-interval $BENCH_CHECKPOINT_INTERVAL`,
#                as many rounds of the pair as $BENCH_CHECKPOINTS_ROUNDS,
#                each on a fresh server: what renewals between checkpoints
#                save in CPU, latency, memory and etcd puts
#
# It does not build leasehold: bin/leasehold must exist (make builds it
# first). Only the compare scenario builds something: bin/kube-apiserver.
# Progress lines and results tables go to the terminal; every result is
# also kept as JSON in $BENCH_OUT/<scenario>-<N>.json.
#
# Knobs (environment):
#   BENCH_NODES                fleet sizes (default "1000 10000"; the full
#                              curve is "1000 10000 50000 100000")
#   BENCH_DURATION             measurement per fleet size (default 60s)
#   BENCH_INTERVAL             renewal interval of the fleet (default 10s)
#   BENCH_LEASE_DURATION       the fleet's leaseDurationSeconds (default 40s;
#                              longer than BENCH_INTERVAL, and the server's
#                              --node-monitor-grace-period longer still)
#   BENCH_RATE                 renewals per second of every fleet, whatever
#                              its size: N nodes renew every N/BENCH_RATE
#                              seconds, with leases four times that (at
#                              least 40 s), a status post every 30 renewals
#                              and the server's grace period a
#                              minute longer. It overrides BENCH_INTERVAL
#                              and BENCH_LEASE_DURATION, and shows how cost
#                              grows with N alone (default unset)
#   BENCH_SCENARIOS            which of throughput, ceiling, fleet, watch,
#                              compare, outage, connections and
#                              checkpoints to run
#                              (default the first four; fleet includes list
#                              and restart)
#   BENCH_CEILING_NODES        the fleet of the ceiling run (default 100000)
#   BENCH_COMPARE_NODES        the fleet of the comparison (default 10000;
#                              it renews every BENCH_INTERVAL)
#   BENCH_OUTAGE_NODES         the fleet of the outage run (default 10000)
#   BENCH_CONNECTIONS_NODES    the fleet of the connections run (default
#                              5000; the load generator needs about 150 KB
#                              a connection, and both need an open-file
#                              limit above it)
#   BENCH_CHECKPOINTS_NODES    the fleet of the checkpoints run (default
#                              10000)
#   BENCH_CHECKPOINT_INTERVAL  its --node-lease-checkpoint-interval (default
#                              20s, at most half the server's 50 s grace
#                              period)
#   BENCH_CHECKPOINTS_ROUNDS   pairs of its runs, alternating (default 2)
#   BENCH_COMPARE_TARGETS      servers compared (default "leasehold
#                              leasehold-etcd kube-apiserver")
#   BENCH_WATCHERS             watchers of the watch run (default 1000)
#   BENCH_OUT                  results directory (default bench-results)
#   BENCH_PLOT                 SVG to draw (default docs/scaling.svg, and
#                              only for more than one fleet size)
#   BENCH_TITLE                title of the plot (default: this machine's
#                              CPU and core count)
#   BENCH_THROUGHPUT_DURATION  throughput measurement (default 30s)
#   BENCH_WATCH_DURATION       watch measurement (default 30s)
#   BENCH_LIST_DURATION        list measurement per fleet size (default 5s)
#   BENCH_ROUNDS               rounds of the fleet sizes (default 1): each
#                              round runs fleet, list and restart at every
#                              N in turn, so that a machine's slow drift
#                              falls on every N alike; round R's results
#                              end in -rR, and the plot joins each N's
#                              median
#   BENCH_RESTARTS             restarts per fleet size; the median is kept
#                              (default 3)
#   BENCH_SERVE_FLAGS          extra flags for every `leasehold serve`
#                              (default none)
set -euo pipefail

cd "$(dirname "$0")/.."

BENCH_NODES=${BENCH_NODES:-"1000 10000"}
BENCH_DURATION=${BENCH_DURATION:-60s}
BENCH_INTERVAL=${BENCH_INTERVAL:-10s}
BENCH_LEASE_DURATION=${BENCH_LEASE_DURATION:-40s}
BENCH_SCENARIOS=${BENCH_SCENARIOS:-"throughput ceiling fleet watch"}
BENCH_CEILING_NODES=${BENCH_CEILING_NODES:-100000}
BENCH_WATCHERS=${BENCH_WATCHERS:-1000}
BENCH_OUT=${BENCH_OUT:-bench-results}
plot_given=${BENCH_PLOT+given}
BENCH_PLOT=${BENCH_PLOT:-docs/scaling.svg}
BENCH_THROUGHPUT_DURATION=${BENCH_THROUGHPUT_DURATION:-30s}
BENCH_WATCH_DURATION=${BENCH_WATCH_DURATION:-30s}
BENCH_LIST_DURATION=${BENCH_LIST_DURATION:-5s}
BENCH_RESTARTS=${BENCH_RESTARTS:-3}
BENCH_ROUNDS=${BENCH_ROUNDS:-1}
BENCH_SERVE_FLAGS=${BENCH_SERVE_FLAGS:-}
BENCH_RATE=${BENCH_RATE:-}
BENCH_COMPARE_NODES=${BENCH_COMPARE_NODES:-10000}
BENCH_COMPARE_TARGETS=${BENCH_COMPARE_TARGETS:-"leasehold leasehold-etcd kube-apiserver"}
BENCH_OUTAGE_NODES=${BENCH_OUTAGE_NODES:-10000}
BENCH_CONNECTIONS_NODES=${BENCH_CONNECTIONS_NODES:-5000}
BENCH_CHECKPOINTS_NODES=${BENCH_CHECKPOINTS_NODES:-10000}
BENCH_CHECKPOINT_INTERVAL=${BENCH_CHECKPOINT_INTERVAL:-20s}
BENCH_CHECKPOINTS_ROUNDS=${BENCH_CHECKPOINTS_ROUNDS:-2}
# FLEET_SERVE_FLAGS are the flags a fleet of BENCH_RATE adds for its servers.
FLEET_SERVE_FLAGS=""
if [[ -z ${BENCH_TITLE:-} ]]; then
	cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -n 1)
	BENCH_TITLE="leasehold fleet scaling: ${cpu:-$(uname -m)}, $(nproc) cores"
fi

LEASEHOLD=bin/leasehold
if [[ ! -x $LEASEHOLD ]]; then
	echo "bench.sh: $LEASEHOLD is missing; run 'make build' first" >&2
	exit 1
fi
mkdir -p "$BENCH_OUT" "$(dirname "$BENCH_PLOT")"
# The fleet reports of an earlier run would end up in this run's plot.
rm -f "$BENCH_OUT"/fleet-*.json

# Every data directory lives under one temporary directory, removed at the
# end together with the server still running, however the script ends.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-bench.XXXXXX")
SERVER_PID=""
ETCD_PID=""
cleanup() {
	stop_server
	stop_etcd
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '\n=== %s\n' "$*" >&2; }

# free_port prints a loopback TCP port nobody listens on.
free_port() {
	local port
	while :; do
		port=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return
		fi
	done
}

# now_ns prints the wall clock in nanoseconds.
now_ns() { date +%s%N; }

# start_server DATA_DIR PORT LOG [FLAGS...] starts `leasehold serve` in the
# background and sets SERVER_PID and SERVER_STARTED (nanoseconds, just
# before exec).
start_server() {
	local dir=$1 port=$2 out=$3
	shift 3
	SERVER_STARTED=$(now_ns)
	# shellcheck disable=SC2086 # both are lists of flags
	"$LEASEHOLD" serve --data-dir "$dir" --listen "127.0.0.1:$port" --log-level warn \
		$BENCH_SERVE_FLAGS $FLEET_SERVE_FLAGS "$@" >>"$out" 2>&1 &
	SERVER_PID=$!
}

# wait_ready PORT polls /readyz until it answers 200, for at most two
# minutes, and sets READY_AT (nanoseconds).
wait_ready() {
	local port=$1 deadline=$((SECONDS + 120))
	while ((SECONDS < deadline)); do
		if ! kill -0 "$SERVER_PID" 2>/dev/null; then
			echo "bench.sh: the server exited; see its log" >&2
			return 1
		fi
		if [[ $(curl -sk -o /dev/null -w '%{http_code}' --max-time 1 "https://127.0.0.1:$port/readyz" || true) == 200 ]]; then
			READY_AT=$(now_ns)
			return 0
		fi
		sleep 0.02
	done
	echo "bench.sh: the server was not ready within two minutes" >&2
	return 1
}

# wait_filled PORT polls /metrics until every watch cache has had its first
# fill (the server serves before: it reads etcd for a kind still filling),
# for at most two minutes, and sets FILLED_AT (nanoseconds).
wait_filled() {
	local port=$1 deadline=$((SECONDS + 120)) token metrics
	token=$(awk '/token:/ {print $2; exit}' "$KUBECONFIG_FILE")
	while ((SECONDS < deadline)); do
		metrics=$(curl -sk --max-time 1 -H "Authorization: Bearer $token" "https://127.0.0.1:$port/metrics" || true)
		if grep -q '^leasehold_watch_cache_initializations_total' <<<"$metrics" &&
			! grep -qE '^leasehold_watch_cache_initializations_total\{[^}]*\} 0$' <<<"$metrics"; then
			FILLED_AT=$(now_ns)
			return 0
		fi
		sleep 0.05
	done
	echo "bench.sh: the watch caches were not filled within two minutes" >&2
	return 1
}

# seconds NS prints NS nanoseconds as seconds with three decimals.
seconds() { printf '%d.%03d' $(($1 / 1000000000)) $(($1 / 1000000 % 1000)); }

# median prints the median of its arguments.
median() { printf '%s\n' "$@" | sort -n | awk '{t[NR] = $1} END {print (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2}'; }

# stop_server ends the running server with SIGTERM, and SIGKILL if it is
# still there a minute later.
stop_server() {
	[[ -n $SERVER_PID ]] || return 0
	kill -TERM "$SERVER_PID" 2>/dev/null || true
	local deadline=$((SECONDS + 60))
	while kill -0 "$SERVER_PID" 2>/dev/null && ((SECONDS < deadline)); do
		sleep 0.1
	done
	kill -KILL "$SERVER_PID" 2>/dev/null || true
	wait "$SERVER_PID" 2>/dev/null || true
	SERVER_PID=""
}

# stop_etcd ends the etcd member started by start_etcd, if any.
stop_etcd() {
	[[ -n $ETCD_PID ]] || return 0
	kill -TERM "$ETCD_PID" 2>/dev/null || true
	wait "$ETCD_PID" 2>/dev/null || true
	ETCD_PID=""
}

# start_etcd LABEL starts a `leasehold etcd` member on a new data directory
# and free ports, waits until it is healthy, and sets ETCD_PID and
# ETCD_URL.
start_etcd() {
	local client peer deadline=$((SECONDS + 60))
	client=$(free_port)
	peer=$(free_port)
	ETCD_URL="http://127.0.0.1:$client"
	"$LEASEHOLD" etcd --data-dir "$WORK/$1-etcd" --listen-client-urls "$ETCD_URL" \
		--listen-peer-urls "http://127.0.0.1:$peer" --log-level warn >>"$BENCH_OUT/etcd-$1.log" 2>&1 &
	ETCD_PID=$!
	until curl -s --max-time 1 "$ETCD_URL/health" | grep -q '"health":"true"'; do
		if ! kill -0 "$ETCD_PID" 2>/dev/null || ((SECONDS >= deadline)); then
			echo "bench.sh: the etcd member did not start; see $BENCH_OUT/etcd-$1.log" >&2
			return 1
		fi
		sleep 0.1
	done
}

# build_kube_apiserver builds hack/tools/kube-apiserver into
# bin/kube-apiserver unless the binary there was built from the same
# sources, and sets KUBE_APISERVER.
build_kube_apiserver() {
	local tooldir=hack/tools/kube-apiserver stamp=bin/.kube-apiserver.stamp sum modver
	KUBE_APISERVER=bin/kube-apiserver
	sum=$(cat "$tooldir/go.mod" "$tooldir/go.sum" "$tooldir/main.go" | sha256sum | cut -d' ' -f1)
	if [[ -x $KUBE_APISERVER && -f $stamp && "$(cat "$stamp")" == "$sum" ]]; then
		return 0
	fi
	modver=$(cd "$tooldir" && GOWORK=off go list -m -f '{{.Version}}' k8s.io/kubernetes)
	log "building kube-apiserver $modver from k8s.io/kubernetes (a few minutes the first time)"
	local pkg=k8s.io/component-base/version minor=${modver#v1.}
	minor=${minor%%.*}
	(cd "$tooldir" && GOWORK=off go build -trimpath \
		-ldflags "-s -w -X $pkg.gitVersion=$modver -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor" \
		-o "$OLDPWD/$KUBE_APISERVER.tmp" .)
	mv -f "$KUBE_APISERVER.tmp" "$KUBE_APISERVER"
	echo "$sum" >"$stamp"
}

# start_kube_apiserver LABEL starts kube-apiserver on the etcd member at
# ETCD_URL, with a service account key, a static admin token, and a
# Metadata-level audit policy, and sets SERVER_PID, PORT and
# KUBECONFIG_FILE.
start_kube_apiserver() {
	local dir="$WORK/$1" token
	mkdir -p "$dir"
	PORT=$(free_port)
	openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$dir/sa.key" 2>/dev/null
	openssl pkey -in "$dir/sa.key" -pubout -out "$dir/sa.pub"
	token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
	echo "$token,bench-admin,bench-admin,\"system:masters\"" >"$dir/tokens.csv"
	cat >"$dir/audit-policy.yaml" <<-EOF
		apiVersion: audit.k8s.io/v1
		kind: Policy
		omitStages: [RequestReceived]
		rules:
		- level: Metadata
	EOF
	KUBECONFIG_FILE="$dir/admin.kubeconfig"
	cat >"$KUBECONFIG_FILE" <<-EOF
		apiVersion: v1
		kind: Config
		clusters: [{name: bench, cluster: {server: "https://127.0.0.1:$PORT", insecure-skip-tls-verify: true}}]
		users: [{name: bench-admin, user: {token: "$token"}}]
		contexts: [{name: bench, context: {cluster: bench, user: bench-admin}}]
		current-context: bench
	EOF
	SERVER_LOG="$BENCH_OUT/kube-apiserver-$1.log"
	# The endpoint reconciler would publish the address of the kubernetes
	# Service, which may not be a loopback one.
	"$KUBE_APISERVER" --etcd-servers "$ETCD_URL" --bind-address 127.0.0.1 --secure-port "$PORT" \
		--advertise-address 127.0.0.1 --endpoint-reconciler-type none --cert-dir "$dir/certs" \
		--token-auth-file "$dir/tokens.csv" --authorization-mode Node,RBAC \
		--service-account-key-file "$dir/sa.pub" --service-account-signing-key-file "$dir/sa.key" \
		--service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.0.0.0/24 \
		--audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit.log" --audit-log-mode batch \
		>"$SERVER_LOG" 2>&1 &
	SERVER_PID=$!
	wait_ready "$PORT"
	# Its controller creates kube-node-lease shortly after it is ready.
	local deadline=$((SECONDS + 60))
	until [[ $(curl -sk -o /dev/null -w '%{http_code}' --max-time 1 -H "Authorization: Bearer $token" \
		"https://127.0.0.1:$PORT/api/v1/namespaces/kube-node-lease" || true) == 200 ]]; do
		if ((SECONDS >= deadline)); then
			echo "bench.sh: kube-apiserver has no kube-node-lease namespace after a minute" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "kube-apiserver pid $SERVER_PID on 127.0.0.1:$PORT (log $SERVER_LOG)" >&2
}

# fresh_server LABEL [ETCD_URL] starts a server on a new data directory and
# a free port (on the etcd at ETCD_URL if given, else its embedded one),
# waits until it is ready, and sets DATA_DIR, PORT and KUBECONFIG_FILE.
fresh_server() {
	DATA_DIR="$WORK/$1"
	PORT=$(free_port)
	KUBECONFIG_FILE="$DATA_DIR/admin.kubeconfig"
	SERVER_LOG="$BENCH_OUT/serve-$1.log"
	: >"$SERVER_LOG"
	start_server "$DATA_DIR" "$PORT" "$SERVER_LOG" ${2:+--etcd-servers "$2"}
	wait_ready "$PORT"
	echo "server pid $SERVER_PID on 127.0.0.1:$PORT (log $SERVER_LOG)" >&2
}

# start_echo LABEL starts `leasehold bench echo-server` on a free port,
# waits until it answers, and sets SERVER_PID, PORT and KUBECONFIG_FILE, as
# fresh_server does for a server.
start_echo() {
	local dir="$WORK/$1" deadline=$((SECONDS + 30))
	PORT=$(free_port)
	KUBECONFIG_FILE="$dir/echo.kubeconfig"
	SERVER_LOG="$BENCH_OUT/echo-$1.log"
	"$LEASEHOLD" bench echo-server --dir "$dir" --listen "127.0.0.1:$PORT" >"$SERVER_LOG" 2>&1 &
	SERVER_PID=$!
	until [[ -f $KUBECONFIG_FILE && $(curl -sk -o /dev/null -w '%{http_code}' --max-time 1 "https://127.0.0.1:$PORT/" || true) == 404 ]]; do
		if ! kill -0 "$SERVER_PID" 2>/dev/null || ((SECONDS >= deadline)); then
			echo "bench.sh: the echo server did not start; see $SERVER_LOG" >&2
			return 1
		fi
		sleep 0.05
	done
	echo "echo server pid $SERVER_PID on 127.0.0.1:$PORT (log $SERVER_LOG)" >&2
}

# bench SCENARIO RESULT FLAGS... runs one scenario against the current
# server: progress and the table to the terminal, the JSON to RESULT.
bench() {
	local scenario=$1 result=$2
	shift 2
	"$LEASEHOLD" bench "$scenario" --kubeconfig "$KUBECONFIG_FILE" --server-pid "$SERVER_PID" \
		--report "$result" "$@"
	echo "results: $result" >&2
}

# wanted SCENARIO tells whether BENCH_SCENARIOS names it.
wanted() { [[ " $BENCH_SCENARIOS " == *" $1 "* ]]; }

if wanted throughput; then
log "throughput: 100 clients for $BENCH_THROUGHPUT_DURATION, then a bare etcd"
fresh_server throughput
bench throughput "$BENCH_OUT/throughput.json" --clients 100 --duration "$BENCH_THROUGHPUT_DURATION" --etcd-embedded
stop_server
fi

if wanted ceiling; then
log "ceiling: 100 clients for $BENCH_THROUGHPUT_DURATION, then $BENCH_CEILING_NODES nodes every $BENCH_INTERVAL for $BENCH_DURATION, against an echo server"
start_echo ceiling
bench throughput "$BENCH_OUT/ceiling-throughput.json" --clients 100 --duration "$BENCH_THROUGHPUT_DURATION"
bench fleet "$BENCH_OUT/ceiling-fleet-$BENCH_CEILING_NODES.json" --nodes "$BENCH_CEILING_NODES" --interval "$BENCH_INTERVAL" \
	--lease-duration "$BENCH_LEASE_DURATION" --duration "$BENCH_DURATION"
stop_server
fi

for ((round = 1; round <= BENCH_ROUNDS; round++)); do
wanted fleet || break
((BENCH_ROUNDS == 1)) || log "round $round of $BENCH_ROUNDS"
for n in $BENCH_NODES; do
	# A single round's results keep the names they have always had.
	run=$n
	((BENCH_ROUNDS == 1)) || run=$n-r$round
	interval=$BENCH_INTERVAL lease=$BENCH_LEASE_DURATION report=()
	if [[ -n $BENCH_RATE ]]; then
		# Milliseconds, so that any N and rate give a whole interval.
		ms=$((n * 1000 / BENCH_RATE))
		interval="${ms}ms"
		lease=$((4 * ms / 1000 > 40 ? 4 * ms / 1000 : 40))
		FLEET_SERVE_FLAGS="--node-monitor-grace-period $((lease + 60))s"
		lease="${lease}s"
		# One status post to 30 renewals, as an agent's defaults make them
		# (5 minutes to 10 s), so that posts too come at the same rate
		# whatever N.
		report=(--node-status-report-period "$((30 * ms))ms")
	fi
	log "fleet: $n nodes renewing every $interval, for $BENCH_DURATION"
	fresh_server "fleet-$run"
	bench fleet "$BENCH_OUT/fleet-$run.json" --nodes "$n" --interval "$interval" --lease-duration "$lease" --duration "$BENCH_DURATION" "${report[@]}"

	log "list: the $n leases of kube-node-lease, unpaginated, for $BENCH_LIST_DURATION"
	bench list "$BENCH_OUT/list-$run.json" --duration "$BENCH_LIST_DURATION" --chunk-size 0
	log "list: the same in pages of 500, as kubectl and client-go's pager, for $BENCH_LIST_DURATION"
	bench list "$BENCH_OUT/list-paged-$run.json" --duration "$BENCH_LIST_DURATION" --chunk-size 500
	log "list: the same whole in JSON from the watch cache, as an informer with client-go's defaults, for $BENCH_LIST_DURATION"
	bench list "$BENCH_OUT/list-json-$run.json" --duration "$BENCH_LIST_DURATION" --chunk-size 0 --accept json --resource-version 0

	log "restart with $n nodes and leases, $BENCH_RESTARTS times"
	runs=() fills=()
	for ((i = 0; i < BENCH_RESTARTS; i++)); do
		stop_server
		start_server "$DATA_DIR" "$PORT" "$SERVER_LOG"
		wait_ready "$PORT"
		wait_filled "$PORT"
		runs+=("$(seconds $((READY_AT - SERVER_STARTED)))")
		fills+=("$(seconds $((FILLED_AT - SERVER_STARTED)))")
		echo "ready ${runs[-1]}s after exec, caches filled ${fills[-1]}s after exec, with $n nodes and leases" >&2
	done
	# The median start: one start's time varies by a second and more on a
	# shared virtual machine.
	ready=$(median "${runs[@]}")
	filled=$(median "${fills[@]}")
	printf '{"nodes": %d, "readySeconds": %s, "runs": [%s], "cachesFilledSeconds": %s, "fills": [%s]}\n' \
		"$n" "$ready" "$(IFS=,; echo "${runs[*]}")" "$filled" "$(IFS=,; echo "${fills[*]}")" >"$BENCH_OUT/restart-$run.json"
	echo "ready ${ready}s after exec, caches filled ${filled}s (medians of $BENCH_RESTARTS), with $n nodes and leases" >&2
	echo "results: $BENCH_OUT/restart-$run.json" >&2
	stop_server
	rm -rf "$DATA_DIR"
	FLEET_SERVE_FLAGS=""
done
done

if wanted watch; then
log "watch: $BENCH_WATCHERS watchers for $BENCH_WATCH_DURATION"
fresh_server watch
bench watch "$BENCH_OUT/watch-$BENCH_WATCHERS.json" --watchers "$BENCH_WATCHERS" --duration "$BENCH_WATCH_DURATION"
stop_server
fi

if wanted compare; then
	for target in $BENCH_COMPARE_TARGETS; do
		log "compare: $BENCH_COMPARE_NODES nodes renewing every $BENCH_INTERVAL against $target, for $BENCH_DURATION"
		etcd_flags=()
		case $target in
		leasehold) fresh_server "compare-$target" ;;
		leasehold-etcd)
			start_etcd "compare-$target"
			fresh_server "compare-$target" "$ETCD_URL"
			etcd_flags=(--etcd-pid "$ETCD_PID")
			;;
		kube-apiserver)
			build_kube_apiserver
			start_etcd "compare-$target"
			start_kube_apiserver "compare-$target"
			etcd_flags=(--etcd-pid "$ETCD_PID")
			;;
		*)
			echo "bench.sh: unknown comparison target $target (leasehold, leasehold-etcd or kube-apiserver)" >&2
			exit 1
			;;
		esac
		bench fleet "$BENCH_OUT/compare-$target-$BENCH_COMPARE_NODES.json" "${etcd_flags[@]}" \
			--nodes "$BENCH_COMPARE_NODES" --interval "$BENCH_INTERVAL" --lease-duration "$BENCH_LEASE_DURATION" \
			--duration "$BENCH_DURATION"
		stop_server
		stop_etcd
	done
fi

if wanted outage; then
	log "outage: $BENCH_OUTAGE_NODES nodes renewing every 10 s, half of them stopped at once 20 s in"
	FLEET_SERVE_FLAGS="--node-monitor-grace-period 20s"
	fresh_server outage
	bench fleet "$BENCH_OUT/outage-$BENCH_OUTAGE_NODES.json" --nodes "$BENCH_OUTAGE_NODES" --interval 10s \
		--lease-duration 40s --duration 90s --kill-after 20s --kill-fraction 0.5
	stop_server
	FLEET_SERVE_FLAGS=""
fi

if wanted connections; then
	n=$BENCH_CONNECTIONS_NODES
	anon=()
	for conns in 8 "$n"; do
		log "connections: $n nodes renewing every 10 s on $conns connections, for $BENCH_DURATION"
		fresh_server "connections-$conns"
		bench fleet "$BENCH_OUT/connections-$n-$conns.json" --nodes "$n" --connections "$conns" --interval 10s \
			--lease-duration 40s --duration "$BENCH_DURATION"
		# The server's anonymous memory at the end, while the fleet was
		# connected: the first rssAnonBytes of the report is the server's.
		anon+=("$(grep -o '"rssAnonBytes": *[0-9]*' "$BENCH_OUT/connections-$n-$conns.json" | head -n 1 | grep -o '[0-9]*$')")
		stop_server
	done
	per=$(((anon[1] - anon[0]) / (n - 8)))
	printf '{"nodes": %d, "serverAnonBytes": {"8": %d, "%d": %d}, "bytesPerConnection": %d}\n' \
		"$n" "${anon[0]}" "$n" "${anon[1]}" "$per" >"$BENCH_OUT/connections-$n.json"
	echo "a connection costs the server $((per / 1024)) KiB: anonymous memory $((anon[0] >> 20)) MiB with 8 connections, $((anon[1] >> 20)) MiB with $n" >&2
	echo "results: $BENCH_OUT/connections-$n.json" >&2
fi

if wanted checkpoints; then
	n=$BENCH_CHECKPOINTS_NODES
	rows=() runs=()
	# field NAME prints the first NAME of the report $result: the
	# server's, whose process comes before the load generator's.
	field() { grep -o "\"$1\": *[0-9.e+-]*" "$result" | head -n 1 | sed 's/.*: *//'; }
	for ((round = 1; round <= BENCH_CHECKPOINTS_ROUNDS; round++)); do
		for every in 0s "$BENCH_CHECKPOINT_INTERVAL"; do
			label=written
			[[ $every == 0s ]] || label=checkpoints
			log "checkpoints, round $round: $n nodes renewing every 10 s, --node-lease-checkpoint-interval $every, for $BENCH_DURATION"
			FLEET_SERVE_FLAGS="--node-lease-checkpoint-interval $every"
			result="$BENCH_OUT/checkpoints-$n-$label-r$round.json"
			fresh_server "checkpoints-$label-r$round"
			bench fleet "$result" --nodes "$n" --interval 10s --lease-duration 40s --duration "$BENCH_DURATION"
			stop_server
			rm -rf "$DATA_DIR"
			rows+=("$(printf '%-12s %5d %12.3f %9.1f %9.0f %10.2f' "$label" "$round" "$(field cpuSecondsPer1000Ops)" \
				"$(field p99Ms)" "$(($(field rssBytes) >> 20))" "$(field perOp)")")
			runs+=("$(printf '{"round": %d, "checkpointInterval": "%s", "report": "%s"}' "$round" "$every" "$(basename "$result")")")
		done
	done
	FLEET_SERVE_FLAGS=""
	printf '{"nodes": %d, "runs": [%s]}\n' "$n" "$(IFS=,; echo "${runs[*]}")" >"$BENCH_OUT/checkpoints-$n.json"
	{
		printf '%-12s %5s %12s %9s %9s %10s\n' renewals round 'CPU-s/1000' 'p99 ms' 'RSS MiB' 'puts/op'
		printf '%s\n' "${rows[@]}"
	} >&2
	echo "results: $BENCH_OUT/checkpoints-$n.json" >&2
fi

# One fleet size is no curve: the committed plot stays, unless
# BENCH_PLOT names where to draw it.
sizes=($BENCH_NODES)
if wanted fleet && { [ ${#sizes[@]} -gt 1 ] || [ -n "$plot_given" ]; }; then
	log "plot: $BENCH_PLOT"
	"$LEASEHOLD" bench plot --title "$BENCH_TITLE" --out "$BENCH_PLOT" "$BENCH_OUT"/fleet-*.json
elif wanted fleet; then
	log "plot: skipped for one fleet size ($BENCH_NODES); set BENCH_PLOT to draw it"
fi
