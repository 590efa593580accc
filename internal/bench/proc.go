package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat. It is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// procSample is a process's CPU time and memory at one moment, read from
// /proc.
type procSample struct {
	at      time.Time
	cpu     time.Duration // user + system
	rss     uint64        // bytes
	peakRSS uint64        // bytes (VmHWM)
	rssAnon uint64        // bytes: heap and stacks
	rssFile uint64        // bytes: mapped files (etcd's database among them)
}

// readProc samples process pid (0: this process).
func readProc(pid int, now time.Time) (procSample, error) {
	dir := "/proc/self"
	if pid != 0 {
		dir = "/proc/" + strconv.Itoa(pid)
	}
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return procSample{}, err
	}
	// The command name is in parentheses and may hold spaces: the fields
	// that follow start after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return procSample{}, fmt.Errorf("%s/stat: no command name", dir)
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return procSample{}, fmt.Errorf("%s/stat: %d fields", dir, len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return procSample{}, fmt.Errorf("%s/stat: %w", dir, err)
	}
	s := procSample{at: now, cpu: time.Duration(utime+stime) * time.Second / clockTicks}
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return procSample{}, err
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch k {
		case "VmRSS":
			dst = &s.rss
		case "VmHWM":
			dst = &s.peakRSS
		case "RssAnon":
			dst = &s.rssAnon
		case "RssFile":
			dst = &s.rssFile
		default:
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err == nil {
			*dst = kb << 10
		}
	}
	return s, nil
}

// ProcessStats is what a process spent during a measurement.
type ProcessStats struct {
	// PID is the process read from /proc; 0 when Source is SourceMetrics.
	PID int `json:"pid"`
	// Source is where the figures come from: empty for /proc on this
	// machine, SourceMetrics for the server's own /metrics, SourceMerged
	// for figures Merge combined from several reports.
	Source string `json:"source,omitempty"`
	// Processes, when more than one, is how many processes' figures are
	// added up (the load generators of merged reports).
	Processes int `json:"processes,omitempty"`
	// CPUSeconds is user plus system CPU time over the measurement.
	CPUSeconds float64 `json:"cpuSeconds"`
	// CPUCores is CPUSeconds per second of the measurement.
	CPUCores float64 `json:"cpuCores"`
	// CPUSecondsPer1000Ops is CPUSeconds per thousand operations of the
	// scenario (renewals, updates), when any were done.
	CPUSecondsPer1000Ops float64 `json:"cpuSecondsPer1000Ops,omitempty"`
	// RSSBytes is the resident set at the end; PeakRSSBytes the highest it
	// has been since the process started.
	RSSBytes     uint64 `json:"rssBytes"`
	PeakRSSBytes uint64 `json:"peakRssBytes"`
	// RSSAnonBytes and RSSFileBytes split RSSBytes at the end: anonymous
	// memory (Go's heap, stacks) and mapped files, which for a server with
	// etcd embedded is mostly etcd's database, resident whole.
	RSSAnonBytes uint64 `json:"rssAnonBytes,omitempty"`
	RSSFileBytes uint64 `json:"rssFileBytes,omitempty"`
}

// SourceMetrics marks process figures read from the server's /metrics, for
// a server that does not run on the load generator's machine: its CPU time
// and its resident memory at the end, without a peak or a split.
const SourceMetrics = "metrics"

// SourceMerged marks process figures Merge combined: a sum over several
// load generators, or one process seen through several reports that do not
// name it alike.
const SourceMerged = "merged"

// procMeter measures one process between start and stop; a zero procMeter
// (no process known) measures nothing.
type procMeter struct {
	pid   int // 0 is this process
	ok    bool
	first procSample
}

func startProcMeter(pid int, now time.Time) procMeter {
	s, err := readProc(pid, now)
	return procMeter{pid: pid, ok: err == nil, first: s}
}

// stop returns the process's figures since start, or nil if it could not be
// read.
func (m procMeter) stop(now time.Time, ops uint64) *ProcessStats {
	if !m.ok {
		return nil
	}
	s, err := readProc(m.pid, now)
	if err != nil {
		return nil
	}
	pid := m.pid
	if pid == 0 {
		pid = os.Getpid()
	}
	cpu := (s.cpu - m.first.cpu).Seconds()
	st := &ProcessStats{PID: pid, CPUSeconds: cpu, RSSBytes: s.rss, PeakRSSBytes: s.peakRSS, RSSAnonBytes: s.rssAnon, RSSFileBytes: s.rssFile}
	if wall := s.at.Sub(m.first.at).Seconds(); wall > 0 {
		st.CPUCores = cpu / wall
	}
	if ops > 0 {
		st.CPUSecondsPer1000Ops = cpu * 1000 / float64(ops)
	}
	return st
}

// sampler returns a function that reads the process again at each call and
// gives the cores it used since the call before (the first: since m
// started) and its RSS; ok is false when the process cannot be read.
func (m procMeter) sampler() func(now time.Time) (cores float64, rss uint64, ok bool) {
	prev := m.first
	return func(now time.Time) (float64, uint64, bool) {
		if !m.ok {
			return 0, 0, false
		}
		s, err := readProc(m.pid, now)
		if err != nil {
			return 0, 0, false
		}
		var cores float64
		if wall := s.at.Sub(prev.at).Seconds(); wall > 0 {
			cores = (s.cpu - prev.cpu).Seconds() / wall
		}
		prev = s
		return cores, s.rss, true
	}
}

// findServerPID returns the process on this machine listening on the port
// of serverURL, or 0 if the URL is not a loopback or local address or no
// such process can be seen.
func findServerPID(serverURL string) int {
	u, err := url.Parse(serverURL)
	if err != nil {
		return 0
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	if !isLocalHost(host) {
		return 0
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return 0
	}
	inodes := listeningInodes(uint16(p))
	if len(inodes) == 0 {
		return 0
	}
	return pidOwningSocket(inodes)
}

func isLocalHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// listeningInodes returns the socket inodes listening on port, from
// /proc/net/tcp and tcp6.
func listeningInodes(port uint16) map[string]bool {
	out := map[string]bool{}
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			if len(fs) < 10 || fs[3] != "0A" || !strings.HasSuffix(fs[1], want) {
				continue
			}
			out[fs[9]] = true
		}
	}
	return out
}

// pidOwningSocket returns the first process holding one of the socket
// inodes open.
func pidOwningSocket(inodes map[string]bool) int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		fds, err := os.ReadDir(p + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(p + "/fd/" + fd.Name())
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				pid, _ := strconv.Atoi(filepath.Base(p))
				return pid
			}
		}
	}
	return 0
}
