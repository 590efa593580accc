package agent

import (
	"bufio"
	"strings"
	"testing"
)

func TestParseMeminfo(t *testing.T) {
	total, avail, err := parseMeminfo(bufio.NewScanner(strings.NewReader("MemTotal:       16318452 kB\nMemFree:         1013004 kB\nMemAvailable:    9834676 kB\n")))
	if err != nil || total != 16318452<<10 || avail != 9834676<<10 {
		t.Errorf("parseMeminfo = %d, %d, %v", total, avail, err)
	}
	for _, in := range []string{"MemTotal: 1 kB\n", "MemTotal: x kB\nMemAvailable: 1 kB\n", "MemTotal: 1 MB\nMemAvailable: 1 kB\n"} {
		if _, _, err := parseMeminfo(bufio.NewScanner(strings.NewReader(in))); err == nil {
			t.Errorf("parseMeminfo(%q) took it", in)
		}
	}
}

// TestReadHostStats measures this machine: every signal has a capacity
// (inodes but on file systems that count none, as btrfs), and nothing
// available exceeds it.
func TestReadHostStats(t *testing.T) {
	h, err := readHostStats()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{SignalMemoryAvailable, SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalPIDAvailable} {
		avail, capacity, ok := h.signal(s)
		if !ok && s == SignalNodeFsInodesFree && h.Inodes == 0 {
			continue
		}
		if !ok || avail < 0 || avail > capacity {
			t.Errorf("%s: %d of %d", s, avail, capacity)
		}
	}
}
