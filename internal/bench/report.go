package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"
)

// Report is the outcome of one scenario run. Latencies are in
// milliseconds, rates per second.
type Report struct {
	Scenario string `json:"scenario"`
	// Server is the URL of the API server under test.
	Server string `json:"server"`
	// Parameters are the scenario's settings, as given on the command line.
	Parameters map[string]string `json:"parameters"`
	// StartedAt is when the measurement started, by the load generator's
	// clock; Seconds is its length.
	StartedAt time.Time `json:"startedAt,omitzero"`
	Seconds   float64   `json:"seconds"`
	// Ops counts the operations that succeeded during the measurement
	// (lease updates, renewals, writes), Errors those that failed.
	Ops          uint64  `json:"ops"`
	Errors       uint64  `json:"errors"`
	OpsPerSecond float64 `json:"opsPerSecond"`
	// TargetOpsPerSecond is the load offered, when the scenario paces it.
	TargetOpsPerSecond float64     `json:"targetOpsPerSecond,omitempty"`
	Latency            Percentiles `json:"latency"`
	// ServerProcess, EtcdProcess and LoadGenerator are the CPU time and
	// memory of the server process (from /proc when it runs on this
	// machine, else from its /metrics when it gives them there), of its
	// etcd (when Common.EtcdPID names it) and of this process.
	ServerProcess *ProcessStats `json:"serverProcess,omitempty"`
	EtcdProcess   *ProcessStats `json:"etcdProcess,omitempty"`
	LoadGenerator *ProcessStats `json:"loadGenerator,omitempty"`
	// ServerCollector is the server's Go garbage collector over the
	// measurement, as the server reports it on /metrics; nil when it
	// reports no such figures (another API server) or /metrics is refused.
	ServerCollector *CollectorStats `json:"serverCollector,omitempty"`
	// ServerEtcdPuts are the puts the server's embedded etcd made over the
	// measurement, when its /metrics gives them: one for each object a
	// committed write stores, so one a renewal where every renewal is
	// written (--node-lease-checkpoint-interval writes fewer).
	ServerEtcdPuts *EtcdPutStats `json:"serverEtcdPuts,omitempty"`
	// ServerToLoadCPU sets the server's CPU against the load generator's;
	// nil unless both were measured as separate processes and the load
	// generator used some.
	ServerToLoadCPU *CPURatio `json:"serverToLoadCPU,omitempty"`
	// ErrorSamples are the first distinct error messages.
	ErrorSamples []string `json:"errorSamples,omitempty"`

	Etcd  *EtcdReport  `json:"etcd,omitempty"`
	Fleet *FleetReport `json:"fleet,omitempty"`
	Kill  *KillReport  `json:"kill,omitempty"`
	Watch *WatchReport `json:"watch,omitempty"`
	List  *ListReport  `json:"list,omitempty"`
}

// CPURatio is the server's CPU time over the measurement divided by the load
// generator's. The load generator does the same work per operation
// whatever the server does and however many nodes the fleet has, so the
// ratio compares runs made while the machine's speed drifted, as a
// shared machine's does.
type CPURatio struct {
	All float64 `json:"all"`
	// WithoutCollector leaves the server's Go collector out of the
	// server's CPU; absent when the server does not report its collector.
	WithoutCollector float64 `json:"withoutCollector,omitempty"`
}

// serverToLoadCPU works out r.ServerToLoadCPU from the process and
// collector figures, so that reports written before the field existed
// give it too.
func (r *Report) serverToLoadCPU() *CPURatio {
	s, l := r.ServerProcess, r.LoadGenerator
	if s == nil || l == nil || (s.PID == l.PID && s.PID != 0) || l.CPUSeconds <= 0 {
		return nil
	}
	c := &CPURatio{All: s.CPUSeconds / l.CPUSeconds}
	if gc := r.ServerCollector; gc != nil {
		c.WithoutCollector = (s.CPUSeconds - gc.CPUSeconds) / l.CPUSeconds
	}
	return c
}

// EtcdReport is the bare etcd doing one put per update at the same
// concurrency, in the same run.
type EtcdReport struct {
	Endpoint     string      `json:"endpoint"`
	ValueBytes   int         `json:"valueBytes"`
	Seconds      float64     `json:"seconds"`
	Ops          uint64      `json:"ops"`
	Errors       uint64      `json:"errors"`
	OpsPerSecond float64     `json:"opsPerSecond"`
	Latency      Percentiles `json:"latency"`
	// Ratio is the API server's updates per second divided by etcd's puts
	// per second.
	Ratio        float64  `json:"ratio"`
	ErrorSamples []string `json:"errorSamples,omitempty"`
}

// FleetReport adds what the virtual agents did besides renewing.
type FleetReport struct {
	Nodes int `json:"nodes"`
	// RegistrationSeconds is how long registering every Node and Lease took.
	RegistrationSeconds float64 `json:"registrationSeconds"`
	// MissedSlots counts renewals skipped because the previous one was
	// still running when the next was due.
	MissedSlots uint64 `json:"missedSlots"`
	// Conflicts counts renewals answered 409 and retried after a GET;
	// LeaseCreations leases found deleted and created again during the
	// run; StatusPosts
	// periodic node status updates.
	Conflicts      uint64 `json:"conflicts"`
	LeaseCreations uint64 `json:"leaseCreations"`
	StatusPosts    uint64 `json:"statusPosts"`
}

// KillReport is the delay from the death of killed virtual agents to their
// Nodes' Ready=Unknown.
type KillReport struct {
	Killed int `json:"killed"`
	// KilledAfterSeconds is when, from the start of the measurement, they
	// were killed.
	KilledAfterSeconds float64 `json:"killedAfterSeconds"`
	Flipped            int     `json:"flipped"`
	// NeverFlipped were still not Unknown when the run ended.
	NeverFlipped int `json:"neverFlipped"`
	// DeathToUnknown is measured from the moment of the kill,
	// LastRenewalToUnknown from each agent's last renewal (the renewTime it
	// wrote).
	DeathToUnknown       Percentiles `json:"deathToUnknown"`
	LastRenewalToUnknown Percentiles `json:"lastRenewalToUnknown"`
	// LiveMarkedUnknown counts nodes of agents that were never killed but
	// were marked Unknown all the same: false alarms.
	LiveMarkedUnknown int `json:"liveMarkedUnknown"`
}

// WatchReport is the delivery of writes to the watchers.
type WatchReport struct {
	Watchers int `json:"watchers"`
	Writers  int `json:"writers"`
	// Delivered counts the events of the scenario's leases the watchers
	// received; Expected is writes × watchers; Lost the difference when
	// fewer arrived.
	Delivered          uint64  `json:"delivered"`
	Expected           uint64  `json:"expected"`
	Lost               uint64  `json:"lost"`
	DeliveredPerSecond float64 `json:"deliveredPerSecond"`
	// FromWrite is measured from the renewTime the writer put in the lease
	// (just before it sent the request), FromAck from the moment the writer
	// had the server's answer; events that arrived before the answer count
	// in BeforeAck, not in FromAck.
	FromWrite Percentiles `json:"fromWrite"`
	FromAck   Percentiles `json:"fromAck"`
	BeforeAck uint64      `json:"beforeAck"`
	// Restarts counts watches that ended and were resumed.
	Restarts uint64 `json:"restarts"`
}

// ListReport is what the full lists of a namespace's leases returned.
type ListReport struct {
	Namespace string `json:"namespace"`
	// ChunkSize is the page size asked for; 0 is one unpaginated list.
	ChunkSize int64 `json:"chunkSize"`
	// Items is the number of leases in the last complete list.
	Items int `json:"items"`
	// PagesPerList and BytesPerList are means over the lists; the bytes are
	// the response bodies of all of a list's pages.
	PagesPerList   float64 `json:"pagesPerList"`
	BytesPerList   float64 `json:"bytesPerList"`
	ItemsPerSecond float64 `json:"itemsPerSecond"`
	// Received is the time until each list's pages were read, before the
	// client decoded them: the server's part of a list, and the network's.
	Received Percentiles `json:"received"`
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r as a two-column table for people.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k string, format string, a ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...)
	}
	lat := func(k string, p Percentiles) {
		row(k, "p50 %.2fms  p99 %.2fms  p999 %.2fms  max %.2fms  (mean %.2fms, n=%d)", p.P50, p.P99, p.P999, p.Max, p.Mean, p.Count)
	}
	proc := func(k string, p *ProcessStats) {
		if p == nil {
			return
		}
		per := ""
		if p.CPUSecondsPer1000Ops > 0 {
			per = fmt.Sprintf(", %.3f CPU-s per 1000 ops", p.CPUSecondsPer1000Ops)
		}
		split := ""
		if p.RSSAnonBytes+p.RSSFileBytes > 0 {
			split = fmt.Sprintf(" (anonymous %s, files %s)", mib(p.RSSAnonBytes), mib(p.RSSFileBytes))
		}
		switch {
		case p.Source == SourceMetrics:
			row(k, "from its /metrics: %.1f CPU-s (%.2f cores%s), RSS %s", p.CPUSeconds, p.CPUCores, per, mib(p.RSSBytes))
			return
		case p.Processes > 1:
			row(k, "%d processes: %.1f CPU-s (%.2f cores%s), RSS %s%s", p.Processes, p.CPUSeconds, p.CPUCores, per, mib(p.RSSBytes), split)
			return
		case p.Source == SourceMerged:
			row(k, "%.1f CPU-s (%.2f cores%s), RSS %s%s, peak %s", p.CPUSeconds, p.CPUCores, per, mib(p.RSSBytes), split, mib(p.PeakRSSBytes))
			return
		}
		row(k, "pid %d: %.1f CPU-s (%.2f cores%s), RSS %s%s, peak %s", p.PID, p.CPUSeconds, p.CPUCores, per, mib(p.RSSBytes), split, mib(p.PeakRSSBytes))
	}
	row("scenario", "%s", r.Scenario)
	row("server", "%s", r.Server)
	for _, k := range slices.Sorted(maps.Keys(r.Parameters)) {
		row("  "+k, "%s", r.Parameters[k])
	}
	if r.StartedAt.IsZero() {
		row("measured", "%.1fs", r.Seconds)
	} else {
		row("measured", "%.1fs from %s", r.Seconds, r.StartedAt.UTC().Format(time.RFC3339))
	}
	row("ops", "%d ok, %d errors", r.Ops, r.Errors)
	if r.TargetOpsPerSecond > 0 {
		row("ops/s", "%.0f (offered %.0f)", r.OpsPerSecond, r.TargetOpsPerSecond)
	} else {
		row("ops/s", "%.0f", r.OpsPerSecond)
	}
	lat("latency", r.Latency)
	proc("server process", r.ServerProcess)
	proc("etcd process", r.EtcdProcess)
	proc("load generator", r.LoadGenerator)
	if c := r.ServerCollector; c != nil {
		row("server collector", "%.1f CPU-s in %d collections (%.3f CPU-s per 1000 ops)", c.CPUSeconds, c.Collections, c.CPUSecondsPer1000Ops)
	}
	if p := r.ServerEtcdPuts; p != nil {
		row("server etcd puts", "%d (%.2f per op)", p.Puts, p.PerOp)
	}
	if c := r.serverToLoadCPU(); c != nil {
		ratio := fmt.Sprintf("%.2f", c.All)
		if r.ServerCollector != nil {
			ratio += fmt.Sprintf(" (%.2f without the server's collector)", c.WithoutCollector)
		}
		row("server ÷ load CPU", "%s", ratio)
	}
	if e := r.Etcd; e != nil {
		row("raw etcd", "%s, %d-byte values", e.Endpoint, e.ValueBytes)
		row("  puts", "%d ok, %d errors in %.1fs", e.Ops, e.Errors, e.Seconds)
		row("  puts/s", "%.0f", e.OpsPerSecond)
		lat("  latency", e.Latency)
		row("leasehold ÷ etcd", "%.2f", e.Ratio)
		for _, s := range e.ErrorSamples {
			row("  etcd error", "%s", s)
		}
	}
	if f := r.Fleet; f != nil {
		row("nodes", "%d (registered in %.1fs)", f.Nodes, f.RegistrationSeconds)
		row("missed slots", "%d", f.MissedSlots)
		row("conflicts", "%d", f.Conflicts)
		row("lease re-creations", "%d", f.LeaseCreations)
		row("status posts", "%d", f.StatusPosts)
	}
	if k := r.Kill; k != nil {
		row("killed", "%d agents at +%.1fs", k.Killed, k.KilledAfterSeconds)
		row("  marked Unknown", "%d (never within the run: %d)", k.Flipped, k.NeverFlipped)
		lat("  death → Unknown", k.DeathToUnknown)
		lat("  last renewal → Unknown", k.LastRenewalToUnknown)
		row("  live nodes marked Unknown", "%d", k.LiveMarkedUnknown)
	}
	if wr := r.Watch; wr != nil {
		row("watchers / writers", "%d / %d", wr.Watchers, wr.Writers)
		row("events delivered", "%d of %d expected (%d lost), %.0f/s", wr.Delivered, wr.Expected, wr.Lost, wr.DeliveredPerSecond)
		lat("  write → delivery", wr.FromWrite)
		lat("  ack → delivery", wr.FromAck)
		row("  before the ack", "%d", wr.BeforeAck)
		row("  watch restarts", "%d", wr.Restarts)
	}
	if l := r.List; l != nil {
		row("items per list", "%d in %s (chunk size %d, %.1f pages), %.0f items/s", l.Items, l.Namespace, l.ChunkSize, l.PagesPerList, l.ItemsPerSecond)
		row("  bytes per list", "%s", byteSize(l.BytesPerList))
		lat("  received", l.Received)
	}
	for _, s := range r.ErrorSamples {
		row("error", "%s", s)
	}
	return tw.Flush()
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
