// Package bench holds the load scenarios of `leasehold bench`: throughput
// (how many lease updates per second one server sustains, beside a bare
// etcd doing one put per update), fleet (many virtual node agents renewing
// on schedule, optionally killing some and timing their nodes' Ready=Unknown)
// and watch (how fast renewals reach many watchers). Each scenario speaks
// the Kubernetes API through client-go with protobuf over HTTP/2, so it can
// be pointed at any Kubernetes API server as well as at leasehold.
//
// # Model
//
// A scenario is built with its New function from a Config whose zero
// values mean defaults, and Run(ctx) does the work and returns a Report.
// Run starts its goroutines and waits for all of them before it returns:
// the workers (one per client, virtual agent, writer or watcher), one
// printing a progress line per ProgressInterval, and the watches. All of
// them end when the measurement's duration is over or ctx ends.
//
// Clients share a small pool of connections: Connections clientsets, each
// with its own transport, and so each with its own HTTP/2 connection
// carrying many concurrent streams. No client-side rate limit applies.
//
// Latencies go into a log-linear histogram (Histogram) that records from
// any goroutine without locks or allocations and answers percentiles to
// within 1.6%. Each worker keeps its object and rewrites only renewTime
// before each Update; the object the server answers with becomes its next
// cached copy, as in package agent.
//
// The CPU time and memory of the server process are read from /proc when
// the server runs on the same machine (found by the port it listens on, or
// named by Common.ServerPID), and so are the load generator's own.
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
