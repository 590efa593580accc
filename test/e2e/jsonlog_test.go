package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJSONLog: with --log-format json every line the server writes, from
// its start to its stop, is a JSON object with a level and a message,
// those of the libraries it runs included, so that a log collector reads
// all of them.
func TestJSONLog(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	s := newServer(t, "--log-format", "json")
	s.kubectl(t, "create", "namespace", "json-log")
	s.kubectl(t, "delete", "namespace", "json-log")
	if err := s.stop(); err != nil {
		t.Fatalf("stopping the server: %v", err)
	}
	f, err := os.Open(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines, msgs := 0, map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "=== leasehold ") || line == "" {
			continue // the test's own header, before the server's first line
		}
		lines++
		var entry struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &entry); err != nil || entry.Level == "" || entry.Msg == "" {
			t.Errorf("a line that is no JSON log entry: %q", line)
			continue
		}
		msgs[entry.Msg] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// The first is the server's own; the others come through klog, from
	// the identity lease's controller.
	for _, m := range []string{"leasehold is serving", "Deleting old lease on startup", "Cleaning up lease on exit"} {
		if !msgs[m] {
			t.Errorf("no %q among the %d entries", m, lines)
		}
	}

	// And a `leasehold etcd` member's, from its start to its stop.
	addrs := freeAddrs(t, 2)
	p := startProcess(t, "etcd", "--data-dir", filepath.Join(t.TempDir(), "etcd"), "--log-format", "json",
		"--listen-client-urls", "http://"+addrs[0], "--listen-peer-urls", "http://"+addrs[1])
	p.waitOutput(t, "etcd member serving clients", startTimeout)
	if err := p.stop(); err != nil {
		t.Fatalf("leasehold etcd: %v\n%s", err, p.out.String())
	}
	for line := range strings.Lines(p.out.String()) {
		if !json.Valid([]byte(line)) {
			t.Errorf("leasehold etcd wrote a line that is no JSON: %q", line)
		}
	}
}
