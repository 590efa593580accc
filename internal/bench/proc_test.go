package bench

import (
	"net"
	"os"
	"testing"
	"time"
)

func TestReadProcSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	m := startProcMeter(0, time.Now())
	// Burn a little CPU so that the figures are not all zero.
	x := 0
	for i := range 20_000_000 {
		x += i % 7
	}
	_ = x
	st := m.stop(time.Now().Add(time.Second), 1000)
	if st == nil {
		t.Fatal("no figures for this process")
	}
	if st.PID != os.Getpid() {
		t.Errorf("PID = %d, want %d", st.PID, os.Getpid())
	}
	if st.RSSBytes == 0 || st.PeakRSSBytes < st.RSSBytes {
		t.Errorf("RSS %d, peak %d", st.RSSBytes, st.PeakRSSBytes)
	}
	// The test binary's own code is a mapped file; the heap is anonymous.
	// (RssShmem, the rest of RSS, is 0 here.)
	if st.RSSAnonBytes == 0 || st.RSSFileBytes == 0 || st.RSSAnonBytes+st.RSSFileBytes > st.RSSBytes {
		t.Errorf("RSS %d: anonymous %d, files %d", st.RSSBytes, st.RSSAnonBytes, st.RSSFileBytes)
	}
	if st.CPUSeconds < 0 {
		t.Errorf("CPUSeconds = %v", st.CPUSeconds)
	}
	// A sampler counts from the meter's start, then from its last call.
	sample := m.sampler()
	t0 := m.first.at
	if cores, rss, ok := sample(t0.Add(1000 * time.Second)); !ok || rss == 0 || cores < 0 || cores > 1 {
		t.Errorf("first sample: %.3f cores, RSS %d, %v", cores, rss, ok)
	}
	if cores, _, ok := sample(t0.Add(2000 * time.Second)); !ok || cores > 0.01 {
		t.Errorf("second sample, 1 000 s later and idle: %.3f cores, %v", cores, ok)
	}
	if _, _, ok := (procMeter{}).sampler()(time.Now()); ok {
		t.Error("a meter of no process sampled something")
	}
}

func TestFindServerPID(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tests := []struct {
		name string
		url  string
		want int
	}{
		{"our listener", "https://" + l.Addr().String(), os.Getpid()},
		{"localhost", "https://localhost:" + portOf(l), os.Getpid()},
		{"not local", "https://192.0.2.1:" + portOf(l), 0},
		{"garbage", "::", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := findServerPID(tt.url); got != tt.want {
				t.Errorf("findServerPID(%q) = %d, want %d", tt.url, got, tt.want)
			}
		})
	}
}

func portOf(l net.Listener) string {
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}
