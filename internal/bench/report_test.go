package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestTableServerToLoad: the table sets the server's CPU against the load
// generator's, with and without the server's collector, when they are two
// processes; not when they are one, or the load generator used none.
func TestTableServerToLoad(t *testing.T) {
	report := func(serverPID, loadPID int, loadCPU float64, collector bool) *Report {
		r := &Report{Scenario: "fleet",
			ServerProcess: &ProcessStats{PID: serverPID, CPUSeconds: 24},
			LoadGenerator: &ProcessStats{PID: loadPID, CPUSeconds: loadCPU}}
		if collector {
			r.ServerCollector = &CollectorStats{CPUSeconds: 3, Collections: 5}
		}
		return r
	}
	tests := []struct {
		name string
		r    *Report
		want string // the row's figures; "" for no row
		json string // the report's serverToLoadCPU, "" for none
	}{
		{"two processes, with the collector", report(10, 20, 10, true), "2.40 (2.10 without the server's collector)", `{"all":2.4,"withoutCollector":2.1}`},
		{"two processes", report(10, 20, 10, false), "2.40", `{"all":2.4}`},
		{"one process", report(10, 10, 10, true), "", ""},
		{"no load CPU", report(10, 20, 0, true), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tt.r.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			var got string
			for line := range strings.Lines(b.String()) {
				if rest, ok := strings.CutPrefix(line, "server ÷ load CPU"); ok {
					got = strings.TrimSpace(rest)
				}
			}
			if got != tt.want {
				t.Errorf("row %q, want %q in:\n%s", got, tt.want, b.String())
			}

			// The JSON gives the same figures, as meters.stop sets them.
			tt.r.ServerToLoadCPU = tt.r.serverToLoadCPU()
			b.Reset()
			if err := tt.r.WriteJSON(&b); err != nil {
				t.Fatal(err)
			}
			var doc struct{ ServerToLoadCPU json.RawMessage }
			if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			var compact bytes.Buffer
			if len(doc.ServerToLoadCPU) > 0 {
				if err := json.Compact(&compact, doc.ServerToLoadCPU); err != nil {
					t.Fatal(err)
				}
			}
			if compact.String() != tt.json {
				t.Errorf("serverToLoadCPU %s, want %s", compact.String(), tt.json)
			}
		})
	}
}
