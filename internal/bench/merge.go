package bench

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// minOverlap is how much of the shortest measurement the measurements of
// merged reports must have in common.
const minOverlap = 0.9

// Merge combines the fleet reports of load generators that ran at the same
// time against one server, each with a fleet of its own (FleetConfig's
// NodePrefix and StartAt): one fleet too large for one machine to drive.
//
// What the generators did adds up: operations, errors, rates, nodes, the
// generators' own CPU and memory. Latency percentiles come from the sum of
// their histograms. Each report's server figures are the one server seen
// over that report's window, so the merged ones are their mean (the
// largest memory), set against the combined rate. Reports whose windows
// share less than nine tenths of the shortest are refused, and so are
// reports of one fleet (the same node prefix) and reports of killed
// agents, whose death times do not add up.
func Merge(reports []*Report) (*Report, error) {
	if len(reports) < 2 {
		return nil, errors.New("merge needs two reports or more")
	}
	for i, r := range reports {
		switch {
		case r.Scenario != "fleet" || r.Fleet == nil:
			return nil, fmt.Errorf("report %d: a %q report; only fleet reports merge", i+1, r.Scenario)
		case r.Kill != nil:
			return nil, fmt.Errorf("report %d: a fleet with killed agents does not merge", i+1)
		case r.StartedAt.IsZero() || r.Seconds <= 0:
			return nil, fmt.Errorf("report %d: no start time and length of its measurement (written before leasehold bench merge existed?)", i+1)
		case r.Latency.Count > 0 && len(r.Latency.Buckets) == 0:
			return nil, fmt.Errorf("report %d: no latency histogram (written before leasehold bench merge existed?)", i+1)
		}
	}
	if err := checkOverlap(reports); err != nil {
		return nil, err
	}
	prefixes := map[string]int{}
	for i, r := range reports {
		p, ok := r.Parameters["nodePrefix"]
		if !ok {
			continue
		}
		if j, dup := prefixes[p]; dup {
			return nil, fmt.Errorf("reports %d and %d: the same fleet (node prefix %q): give each load generator a --node-prefix of its own", j+1, i+1, p)
		}
		prefixes[p] = i
	}

	m := &Report{Scenario: "fleet", Fleet: &FleetReport{}, Parameters: mergeParameters(reports)}
	var servers []string
	lat := &Snapshot{}
	var serverProcs, etcdProcs, loadProcs []*ProcessStats
	var collectors []window[*CollectorStats]
	var puts []window[*EtcdPutStats]
	for i, r := range reports {
		if !slices.Contains(servers, r.Server) {
			servers = append(servers, r.Server)
		}
		m.StartedAt = later(m.StartedAt, r.StartedAt)
		m.Seconds = max(m.Seconds, r.Seconds)
		m.Ops += r.Ops
		m.Errors += r.Errors
		m.OpsPerSecond += r.OpsPerSecond
		m.TargetOpsPerSecond += r.TargetOpsPerSecond
		s, err := r.Latency.snapshot()
		if err != nil {
			return nil, fmt.Errorf("report %d: latency: %w", i+1, err)
		}
		lat.add(s)
		for _, e := range r.ErrorSamples {
			if len(m.ErrorSamples) < maxErrorSamples && !slices.Contains(m.ErrorSamples, e) {
				m.ErrorSamples = append(m.ErrorSamples, e)
			}
		}
		f := r.Fleet
		m.Fleet.Nodes += f.Nodes
		m.Fleet.RegistrationSeconds = max(m.Fleet.RegistrationSeconds, f.RegistrationSeconds)
		m.Fleet.MissedSlots += f.MissedSlots
		m.Fleet.Conflicts += f.Conflicts
		m.Fleet.LeaseCreations += f.LeaseCreations
		m.Fleet.StatusPosts += f.StatusPosts
		serverProcs = appendNonNil(serverProcs, r.ServerProcess)
		etcdProcs = appendNonNil(etcdProcs, r.EtcdProcess)
		loadProcs = appendNonNil(loadProcs, r.LoadGenerator)
		if r.ServerCollector != nil {
			collectors = append(collectors, window[*CollectorStats]{r.ServerCollector, r.Seconds})
		}
		if r.ServerEtcdPuts != nil {
			puts = append(puts, window[*EtcdPutStats]{r.ServerEtcdPuts, r.Seconds})
		}
	}
	m.Server = strings.Join(servers, ", ")
	m.Latency = lat.Percentiles()
	m.ServerProcess = meanProcess(serverProcs, m.OpsPerSecond)
	m.EtcdProcess = meanProcess(etcdProcs, m.OpsPerSecond)
	m.LoadGenerator = sumProcesses(loadProcs, m.Ops)
	m.ServerCollector = meanCollector(collectors, m.OpsPerSecond)
	m.ServerEtcdPuts = meanPuts(puts, m.OpsPerSecond)
	m.ServerToLoadCPU = m.serverToLoadCPU()
	return m, nil
}

// checkOverlap refuses reports whose measurements have less than
// minOverlap of the shortest in common.
func checkOverlap(reports []*Report) error {
	var from, to time.Time
	shortest := reports[0].Seconds
	for _, r := range reports {
		end := r.StartedAt.Add(time.Duration(r.Seconds * float64(time.Second)))
		from = later(from, r.StartedAt)
		if to.IsZero() || end.Before(to) {
			to = end
		}
		shortest = min(shortest, r.Seconds)
	}
	common := to.Sub(from).Seconds()
	if common < minOverlap*shortest {
		return fmt.Errorf("the measurements have %.1fs in common, less than %.0f%% of the shortest (%.1fs): start the load generators with the same --start-at", max(common, 0), minOverlap*100, shortest)
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func appendNonNil[T any](s []*T, v *T) []*T {
	if v == nil {
		return s
	}
	return append(s, v)
}

// mergeParameters keeps the parameters every report gives alike; one that
// differs lists each report's value, in order. "loadGenerators" counts the
// reports.
func mergeParameters(reports []*Report) map[string]string {
	keys := map[string]bool{}
	for _, r := range reports {
		for k := range r.Parameters {
			keys[k] = true
		}
	}
	out := map[string]string{"loadGenerators": strconv.Itoa(len(reports))}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		vals := make([]string, len(reports))
		for i, r := range reports {
			vals[i] = r.Parameters[k]
		}
		if len(slices.Compact(slices.Clone(vals))) == 1 {
			out[k] = vals[0]
		} else {
			out[k] = strings.Join(vals, ", ")
		}
	}
	return out
}

// meanProcess is one process seen by several load generators, each over
// its own window: the mean of their CPU figures, per 1000 of the combined
// rate, and the largest memory. Its identity is the first report's when
// they all name the same one.
func meanProcess(ps []*ProcessStats, opsPerSecond float64) *ProcessStats {
	if len(ps) == 0 {
		return nil
	}
	m := &ProcessStats{PID: ps[0].PID, Source: ps[0].Source}
	n := float64(len(ps))
	for _, p := range ps {
		if p.PID != m.PID || p.Source != m.Source {
			m.PID, m.Source = 0, SourceMerged
		}
		m.CPUSeconds += p.CPUSeconds / n
		m.CPUCores += p.CPUCores / n
		if p.RSSBytes > m.RSSBytes {
			m.RSSBytes, m.RSSAnonBytes, m.RSSFileBytes = p.RSSBytes, p.RSSAnonBytes, p.RSSFileBytes
		}
		m.PeakRSSBytes = max(m.PeakRSSBytes, p.PeakRSSBytes)
	}
	if opsPerSecond > 0 {
		m.CPUSecondsPer1000Ops = m.CPUCores * 1000 / opsPerSecond
	}
	return m
}

// sumProcesses is several processes, one per report: their CPU and memory
// added up.
func sumProcesses(ps []*ProcessStats, ops uint64) *ProcessStats {
	if len(ps) == 0 {
		return nil
	}
	m := &ProcessStats{Source: SourceMerged, Processes: len(ps)}
	for _, p := range ps {
		m.CPUSeconds += p.CPUSeconds
		m.CPUCores += p.CPUCores
		m.RSSBytes += p.RSSBytes
		m.PeakRSSBytes += p.PeakRSSBytes
		m.RSSAnonBytes += p.RSSAnonBytes
		m.RSSFileBytes += p.RSSFileBytes
	}
	if ops > 0 {
		m.CPUSecondsPer1000Ops = m.CPUSeconds * 1000 / float64(ops)
	}
	return m
}

// window is a figure of the server as one load generator saw it, over its
// measurement of that many seconds.
type window[T any] struct {
	stats   T
	seconds float64
}

// windowMean is the mean of what several load generators saw of one
// server figure, value, each over its own window, and the mean of its rate
// per second.
func windowMean[T any](ws []window[T], value func(T) float64) (mean, perSecond float64) {
	n := float64(len(ws))
	for _, w := range ws {
		v := value(w.stats)
		mean += v / n
		if w.seconds > 0 {
			perSecond += v / w.seconds / n
		}
	}
	return mean, perSecond
}

// meanCollector is the server's collector as several load generators saw
// it: the mean of their figures, and the mean of its CPU per second per
// 1000 of the combined rate.
func meanCollector(cs []window[*CollectorStats], opsPerSecond float64) *CollectorStats {
	if len(cs) == 0 {
		return nil
	}
	cpu, perSecond := windowMean(cs, func(c *CollectorStats) float64 { return c.CPUSeconds })
	collections, _ := windowMean(cs, func(c *CollectorStats) float64 { return float64(c.Collections) })
	m := &CollectorStats{CPUSeconds: cpu, Collections: uint64(math.Round(collections))}
	if opsPerSecond > 0 {
		m.CPUSecondsPer1000Ops = perSecond * 1000 / opsPerSecond
	}
	return m
}

// meanPuts is the server's etcd puts as several load generators saw them:
// the mean of their counts, and the mean of the puts per second over the
// combined rate.
func meanPuts(ps []window[*EtcdPutStats], opsPerSecond float64) *EtcdPutStats {
	if len(ps) == 0 {
		return nil
	}
	puts, perSecond := windowMean(ps, func(p *EtcdPutStats) float64 { return float64(p.Puts) })
	m := &EtcdPutStats{Puts: uint64(math.Round(puts))}
	if opsPerSecond > 0 {
		m.PerOp = perSecond / opsPerSecond
	}
	return m
}
