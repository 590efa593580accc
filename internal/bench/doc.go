// Package bench holds the load scenarios of `leasehold bench`: throughput
// (how many lease updates per second one server sustains, beside a bare
// etcd doing one put per update), fleet (many virtual node agents renewing
// on schedule, optionally killing some and timing their nodes' Ready=Unknown)
// watch (how fast renewals reach many watchers) and list (how long a full
// list of a namespace's leases takes). Each scenario speaks the Kubernetes
// API with protobuf over HTTP/2 through client-go's transports, so it can be
// pointed at any Kubernetes API server as well as at leasehold. WritePlot
// draws fleet reports as the scaling curve.
//
// # Model
//
// A scenario is built with its New function from a Config whose zero
// values mean defaults, and Run(ctx) does the work and returns a Report.
// Run starts its goroutines and waits for all of them before it returns:
// the workers (one per client, writer or watcher; the fleet's virtual
// agents share a dispatcher and a few workers instead), one
// printing a progress line per ProgressInterval, and the watches. All of
// them end when the measurement's duration is over or ctx ends.
//
// Clients share a small pool of connections: Connections clientsets, each
// with its own transport, and so each with its own HTTP/2 connection
// carrying many concurrent streams. No client-side rate limit applies.
//
// Latencies go into a log-linear histogram (Histogram) that records from
// any goroutine without locks or allocations and answers percentiles to
// within 1.6%. Each worker or agent keeps its object and rewrites only
// renewTime before each update; the object the server answers with becomes
// its next cached copy, as in package agent. The fleet's renewals are plain
// protobuf PUTs on the clientsets' HTTP clients, the request client-go's
// typed Update sends, without its per-request machinery.
//
// The CPU time and memory of the server process are read from /proc when
// the server runs on the same machine (found by the port it listens on, or
// named by Common.ServerPID), and so are the load generator's own. A server
// elsewhere is measured from its /metrics (process_cpu_seconds_total and
// process_resident_memory_bytes), which leasehold serve and kube-apiserver
// both give.
//
// Virtual agents renew on a fixed grid spread evenly over the interval
// (see schedule), so that N agents offer exactly N/interval renewals per
// second; a renewal still running when the next is due skips that slot
// and counts it as missed, so an overloaded server sees the load a real
// fleet would give it rather than a burst of catch-up. Each agent starts
// renewing as soon as its Node and Lease are registered, as a real one
// does, so that registering a large fleet never lets the first nodes'
// leases expire; the measurement starts when the last has registered.
package bench
