package coordinator

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// lc returns a LeaseCandidate for lease "job" created at t0+age.
func lc(name, binary, emulation string, created time.Duration) *coordinationv1beta1.LeaseCandidate {
	return &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: metav1.NewTime(t0.Add(created))},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName: "job", BinaryVersion: binary, EmulationVersion: emulation, Strategy: coordinationv1.OldestEmulationVersion,
		},
	}
}

func TestBest(t *testing.T) {
	tests := []struct {
		name  string
		cands []*coordinationv1beta1.LeaseCandidate
		want  string
	}{
		{"none", nil, ""},
		{"one", []*coordinationv1beta1.LeaseCandidate{lc("a", "1.2.0", "1.2.0", 0)}, "a"},
		{"lowest emulation version wins over binary version",
			[]*coordinationv1beta1.LeaseCandidate{lc("a", "1.31.0", "1.31.0", 0), lc("b", "1.32.0", "1.30.0", 0)}, "b"},
		{"then lowest binary version",
			[]*coordinationv1beta1.LeaseCandidate{lc("a", "1.32.1", "1.31.0", 0), lc("b", "1.32.0", "1.31.0", time.Hour)}, "b"},
		{"versions compare numerically",
			[]*coordinationv1beta1.LeaseCandidate{lc("a", "1.10.0", "1.10.0", 0), lc("b", "1.9.0", "1.9.0", time.Hour)}, "b"},
		{"pre-release before release",
			[]*coordinationv1beta1.LeaseCandidate{lc("a", "1.2.0", "1.2.0", 0), lc("b", "1.2.0-rc.1", "1.2.0-rc.1", time.Hour)}, "b"},
		{"then oldest candidate",
			[]*coordinationv1beta1.LeaseCandidate{lc("a", "1.2.0", "1.2.0", time.Second), lc("b", "1.2.0", "1.2.0", 0)}, "b"},
		{"then lowest name, whatever the order",
			[]*coordinationv1beta1.LeaseCandidate{lc("b", "1.2.0", "1.2.0", 0), lc("a", "1.2.0", "1.2.0", 0), lc("c", "1.2.0", "1.2.0", 0)}, "a"},
		{"unparsable versions are not eligible",
			[]*coordinationv1beta1.LeaseCandidate{lc("a", "1.2.0", "x", 0), lc("b", "1.3.0", "1.3.0", 0)}, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if b := best(tt.cands); b != nil {
				got = b.Name
			}
			if got != tt.want {
				t.Errorf("best = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStrategyOf(t *testing.T) {
	third := func(c *coordinationv1beta1.LeaseCandidate) *coordinationv1beta1.LeaseCandidate {
		c.Spec.Strategy = "example.com/Custom"
		return c
	}
	tests := []struct {
		name    string
		cands   []*coordinationv1beta1.LeaseCandidate
		want    coordinationv1.CoordinatedLeaseStrategy
		wantErr string
	}{
		{"all agree", []*coordinationv1beta1.LeaseCandidate{lc("a", "1.2.0", "1.2.0", 0), lc("b", "1.3.0", "1.2.0", 0)}, coordinationv1.OldestEmulationVersion, ""},
		{"newest binary decides", []*coordinationv1beta1.LeaseCandidate{lc("a", "1.2.0", "1.2.0", 0), third(lc("b", "1.3.0", "1.2.0", 0))}, "example.com/Custom", ""},
		{"older binary does not", []*coordinationv1beta1.LeaseCandidate{third(lc("a", "1.2.0", "1.2.0", 0)), lc("b", "1.3.0", "1.2.0", 0)}, coordinationv1.OldestEmulationVersion, ""},
		{"conflict at the newest binary", []*coordinationv1beta1.LeaseCandidate{lc("a", "1.3.0", "1.2.0", 0), third(lc("b", "1.3.0", "1.2.0", 0))}, "", "strategies"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := strategyOf(tt.cands)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
