package agent

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestParseThresholds(t *testing.T) {
	ts, err := ParseThresholds(DefaultEvictionHard)
	if err != nil || len(ts) != 3 || ts[0].Signal != SignalMemoryAvailable || ts[0].Quantity.Value() != 100<<20 || ts[1].Percent != 10 || ts[2].Percent != 5 {
		t.Fatalf("ParseThresholds(%q) = %+v, %v", DefaultEvictionHard, ts, err)
	}
	if ts, err := ParseThresholds(" pid.available<1k , "); err != nil || len(ts) != 1 || ts[0].Quantity.Value() != 1000 {
		t.Errorf("pid.available<1k: %+v, %v", ts, err)
	}
	for in, msg := range map[string]string{
		"memory.available=100Mi":                     "want SIGNAL<QUANTITY",
		"imagefs.available<15%":                      `unknown signal "imagefs.available"`,
		"memory.available<lots":                      "quantities must match",
		"memory.available<-1Gi":                      "must not be negative",
		"nodefs.available<0%":                        "above 0 and at most 100",
		"nodefs.available<101%":                      "above 0 and at most 100",
		"memory.available<1Gi,memory.available<10%":  "given twice",
		"nodefs.inodesFree<5%,nodefs.available<abc%": "above 0 and at most 100",
	} {
		if _, err := ParseThresholds(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseThresholds(%q) error %v, want one saying %q", in, err, msg)
		}
	}
}

// FuzzParseThresholds: any value is parsed or refused without a panic, and
// what is parsed names each known signal at most once.
func FuzzParseThresholds(f *testing.F) {
	f.Add(DefaultEvictionHard)
	f.Add("pid.available<1k,nodefs.available<0.5%")
	f.Add("memory.available<<1")
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := ParseThresholds(s)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, th := range ts {
			if _, ok := conditionOf[th.Signal]; !ok || seen[th.Signal] {
				t.Fatalf("%q gave %+v", s, ts)
			}
			seen[th.Signal] = true
			if th.Quantity == nil && !(th.Percent > 0 && th.Percent <= 100) || th.Quantity != nil && th.Quantity.Sign() < 0 {
				t.Fatalf("%q gave threshold %+v", s, th)
			}
		}
	})
}

// TestPressureTracker: a signal below its threshold puts its condition
// True at once, and it stays True until the transition period has passed
// since the signal was last below.
func TestPressureTracker(t *testing.T) {
	ts, err := ParseThresholds(DefaultEvictionHard + ",pid.available<1000")
	if err != nil {
		t.Fatal(err)
	}
	p := newPressureTracker(ts, time.Minute)
	h := HostStats{MemoryAvailable: 200 << 20, MemoryCapacity: 1 << 30, FsAvailable: 20, FsCapacity: 100, InodesFree: 50, Inodes: 100, PIDsAvailable: 5000, PIDs: 10000}
	now := time.Unix(1e9, 0)
	if got := p.observe(h, now); got != (pressure{}) {
		t.Fatalf("a healthy host: %+v", got)
	}
	h.MemoryAvailable = 99 << 20
	h.InodesFree = 4
	if got := p.observe(h, now); got != (pressure{memory: true, disk: true}) {
		t.Fatalf("memory and inodes low: %+v", got)
	}
	h.MemoryAvailable, h.InodesFree = 100<<20, 5 // at the thresholds: not below
	if got := p.observe(h, now.Add(59*time.Second)); got != (pressure{memory: true, disk: true}) {
		t.Errorf("recovered within the transition period: %+v, want still True", got)
	}
	h.PIDsAvailable = 999
	if got := p.observe(h, now.Add(time.Minute)); got != (pressure{pid: true}) {
		t.Errorf("a transition period after: %+v, want PID pressure alone", got)
	}
	// A host that does not say (no capacity) is under no pressure.
	if got := newPressureTracker(ts, time.Minute).observe(HostStats{}, now); got != (pressure{}) {
		t.Errorf("nothing measured: %+v", got)
	}
}

// TestPressureConditionsPosted: the agent posts MemoryPressure True as soon
// as it measures it, and False again once the transition period has
// passed, with the transition times of each change.
func TestPressureConditionsPosted(t *testing.T) {
	c := newClient()
	h := start(t, c)
	h.expectWait(10 * time.Second)
	want := func(status corev1.ConditionStatus, reason string, since time.Time) {
		t.Helper()
		for _, cond := range h.node(c).Status.Conditions {
			if cond.Type == corev1.NodeMemoryPressure {
				if cond.Status != status || cond.Reason != reason || !cond.LastTransitionTime.Time.Equal(since) {
					t.Errorf("MemoryPressure %s/%s since %v, want %s/%s since %v", cond.Status, cond.Reason, cond.LastTransitionTime.Time, status, reason, since)
				}
				return
			}
		}
		t.Errorf("no MemoryPressure condition")
	}
	want(corev1.ConditionFalse, "LeaseholdAgentHasSufficientMemory", t0)

	h.setHost(func(s *HostStats) { s.MemoryAvailable = 50 << 20 })
	h.resume()
	h.expectWait(10 * time.Second)
	low := t0.Add(10 * time.Second)
	want(corev1.ConditionTrue, "LeaseholdAgentHasInsufficientMemory", low)

	h.setHost(func(s *HostStats) { s.MemoryAvailable = 1 << 30 })
	for range int(DefaultPressureTransitionPeriod/(10*time.Second)) - 1 {
		h.resume()
		h.expectWait(10 * time.Second)
	}
	want(corev1.ConditionTrue, "LeaseholdAgentHasInsufficientMemory", low)
	h.resume()
	h.expectWait(10 * time.Second)
	want(corev1.ConditionFalse, "LeaseholdAgentHasSufficientMemory", low.Add(DefaultPressureTransitionPeriod))
}

func TestNodeResources(t *testing.T) {
	defaults, err := ParseThresholds(DefaultEvictionHard)
	if err != nil {
		t.Fatal(err)
	}
	tight, err := ParseThresholds("memory.available<10%,nodefs.available<200Gi")
	if err != nil {
		t.Fatal(err)
	}
	host := HostStats{CPUs: 2, MemoryCapacity: 16331052 << 10, FsCapacity: 105152176128}
	for _, tc := range []struct {
		name                  string
		host                  HostStats
		thresholds            []Threshold
		capacity, allocatable string
	}{
		{"default thresholds", host, defaults,
			"cpu=2 ephemeral-storage=102687672Ki memory=16331052Ki", "cpu=2 ephemeral-storage=94636958516 memory=16228652Ki"},
		{"none", host, nil,
			"cpu=2 ephemeral-storage=102687672Ki memory=16331052Ki", "cpu=2 ephemeral-storage=102687672Ki memory=16331052Ki"},
		{"a percent of memory, more disk than there is", host, tight,
			"cpu=2 ephemeral-storage=102687672Ki memory=16331052Ki", "cpu=2 ephemeral-storage=0 memory=15050697524"},
		{"memory not measured", HostStats{CPUs: 1, FsCapacity: 1 << 30}, defaults,
			"cpu=1 ephemeral-storage=1Gi", "cpu=1 ephemeral-storage=966367642"},
		{"nothing measured", HostStats{}, defaults, "", ""},
	} {
		capacity, allocatable := nodeResources(tc.host, tc.thresholds)
		if got := resourceString(capacity); got != tc.capacity {
			t.Errorf("%s: capacity %s, want %s", tc.name, got, tc.capacity)
		}
		if got := resourceString(allocatable); got != tc.allocatable {
			t.Errorf("%s: allocatable %s, want %s", tc.name, got, tc.allocatable)
		}
	}
}

// resourceString prints a ResourceList as NAME=QUANTITY in name order.
func resourceString(l corev1.ResourceList) string {
	var out []string
	for name, q := range l {
		out = append(out, string(name)+"="+q.String())
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
