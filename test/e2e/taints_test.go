package e2e

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestZoneDisruption runs four agents in two zones and stops them zone by
// zone, as a rack or a network would, reading everything with kubectl:
// a zone down while the other is up gets the NoExecute taints; with every
// node down the server adds none and removes those it added, as
// Kubernetes' node lifecycle controller does when it is more likely cut
// off itself; once a node is back, the others get them again after a
// fresh grace period.
func TestZoneDisruption(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newNodeServer(t, filepath.Join(dir, "data"), "", dir, "--node-eviction-rate", "10")
	zones := map[string][]string{"a": {"zone-a-1", "zone-a-2"}, "b": {"zone-b-1", "zone-b-2"}}
	agents := map[string]*agentProc{}
	var all []string
	for _, z := range []string{"a", "b"} {
		for _, n := range zones[z] {
			agents[n] = startAgent(t, s.kubeconfig, dir, n, "--label", "topology.kubernetes.io/region=r1", "--label", "topology.kubernetes.io/zone="+z)
			all = append(all, n)
		}
	}
	// taints returns each node's lifecycle taints, as key:effect sorted.
	taints := func() map[string][]string {
		out := s.kubectl(t, "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}{"="}{range .spec.taints[*]}{.key}{":"}{.effect}{" "}{end}{"\n"}{end}`)
		got := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			name, list, _ := strings.Cut(line, "=")
			got[name] = strings.Fields(list)
			slices.Sort(got[name])
		}
		return got
	}
	const (
		noSchedule = "node.kubernetes.io/unreachable:NoSchedule"
		noExecute  = "node.kubernetes.io/unreachable:NoExecute"
	)
	want := func(what string, timeout time.Duration, expect map[string][]string) {
		t.Helper()
		eventually(t, timeout, func() error {
			got := taints()
			for _, n := range all {
				if !slices.Equal(got[n], expect[n]) {
					return fmt.Errorf("%s: node %s taints %q, want %q (all: %q)", what, n, got[n], expect[n], got)
				}
			}
			return nil
		})
	}
	untainted := map[string][]string{}
	want("all agents running", 30*time.Second, untainted)
	zoneState := func(zone, state string) error {
		out := s.kubectl(t, "get", "--raw", "/metrics")
		re := regexp.MustCompile(`(?m)^leasehold_node_lifecycle_zone_state\{state="` + state + `",zone="r1/` + zone + `"\} 1$`)
		if !re.MatchString(out) {
			return fmt.Errorf("zone r1/%s not %s in /metrics:\n%s", zone, state, grepLines(out, "leasehold_node_lifecycle_zone"))
		}
		return nil
	}
	eventually(t, 10*time.Second, func() error { return zoneState("a", "normal") })

	// Zone a goes down: its nodes get both taints, b's none.
	for _, n := range zones["a"] {
		agents[n].kill9(t)
	}
	aDown := map[string][]string{}
	for _, n := range zones["a"] {
		aDown[n] = []string{noExecute, noSchedule}
	}
	want("zone a down", nodeGrace+5*nodePeriod+pollMargin, aDown)
	eventually(t, 5*time.Second, func() error { return zoneState("a", "full_disruption") })
	eventually(t, 5*time.Second, func() error { return zoneState("b", "normal") })

	// Zone b too: nothing is Ready anywhere. The NoExecute taints go,
	// the NoSchedule ones stay, and b's nodes get no NoExecute.
	for _, n := range zones["b"] {
		agents[n].kill9(t)
	}
	allDown := map[string][]string{}
	for _, n := range all {
		allDown[n] = []string{noSchedule}
	}
	want("every zone down", nodeGrace+5*nodePeriod+pollMargin, allDown)
	for range 3 {
		time.Sleep(nodePeriod)
		if got := taints(); !slices.Equal(got["zone-b-1"], allDown["zone-b-1"]) || !slices.Equal(got["zone-a-1"], allDown["zone-a-1"]) {
			t.Fatalf("taints changed with every node down: %q", got)
		}
	}
	if log := s.logTail(); !strings.Contains(log, "no node is Ready in any zone") {
		t.Errorf("the server's log does not say that no node is Ready in any zone\n%s", log)
	}

	// zone-b-1 is back: it is Ready and untainted at once, and the three
	// others get their NoExecute taints only after a fresh grace period.
	back := time.Now()
	agents["zone-b-1"] = agents["zone-b-1"].restart(t)
	partly := map[string][]string{}
	for _, n := range all {
		partly[n] = []string{noSchedule}
	}
	delete(partly, "zone-b-1")
	want("zone-b-1 back", 10*time.Second+pollMargin, partly)
	for n := range partly {
		partly[n] = []string{noExecute, noSchedule}
	}
	want("after a fresh grace period", nodeGrace+10*nodePeriod+pollMargin, partly)
	if d := time.Since(back); d < nodeGrace {
		t.Errorf("NoExecute taints back %v after a node came back, within the fresh grace period %v", d, nodeGrace)
	}
}

// TestCordonTaint: an agent registers its node with the taints of
// --register-with-taints; kubectl drain (a cordon, and no pods to evict)
// gives the node the
// node.kubernetes.io/unschedulable NoSchedule taint, as Kubernetes' node
// lifecycle controller does, and uncordon takes it away, leaving the
// registration taint; the agent's renewals leave them all alone. Each
// records the kubelet's event.
func TestCordonTaint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newNodeServer(t, filepath.Join(dir, "data"), "", dir)
	const node = "cordon-1"
	startAgent(t, s.kubeconfig, dir, node, "--register-with-taints", "dedicated=db:NoSchedule")
	status := func(want string) func() error {
		return func() error {
			if r := nodesTable(t, s)[node]; r == nil || r[1] != want {
				return fmt.Errorf("node %s row %q, want STATUS %s", node, r, want)
			}
			return nil
		}
	}
	taints := func(want ...string) func() error {
		return func() error {
			out := s.kubectl(t, "describe", "node", node)
			if got := describeField(out, "Taints"); !slices.Equal(got, want) {
				return fmt.Errorf("kubectl describe node %s: Taints %q, want %q\n%s", node, got, want, out)
			}
			return nil
		}
	}
	eventually(t, 30*time.Second, status("Ready"))
	if err := taints("dedicated=db:NoSchedule")(); err != nil {
		t.Errorf("registered with --register-with-taints: %v", err)
	}

	if out := s.kubectl(t, "drain", node); !strings.Contains(out, "node/"+node+" cordoned") || !strings.Contains(out, "node/"+node+" drained") {
		t.Errorf("kubectl drain: %q", out)
	}
	if out := s.kubectl(t, "describe", "node", node); !strings.Contains(out, "Non-terminated Pods:          (0 in total)") {
		t.Errorf("kubectl describe node %s lists no pods:\n%s", node, out)
	}
	eventually(t, 3*nodePeriod+pollMargin, taints("dedicated=db:NoSchedule", "node.kubernetes.io/unschedulable:NoSchedule"))
	eventually(t, 5*time.Second, status("Ready,SchedulingDisabled"))
	// Through a few renewals and the lifecycle controller's passes.
	time.Sleep(agentLease)
	if err := taints("dedicated=db:NoSchedule", "node.kubernetes.io/unschedulable:NoSchedule")(); err != nil {
		t.Error(err)
	}

	s.kubectl(t, "uncordon", node)
	eventually(t, 3*nodePeriod+pollMargin, taints("dedicated=db:NoSchedule"))
	eventually(t, 5*time.Second, status("Ready"))

	// The kubelet's events of both, from the lifecycle controller, one
	// each however many passes went by.
	eventually(t, 5*time.Second, func() error {
		out := s.kubectl(t, "get", "events", "-n", "default", "--field-selector", "involvedObject.name="+node,
			"-o", `jsonpath={range .items[*]}{.reason}={.message}{"\n"}{end}`)
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.Contains(line, "Schedulable") {
				got = append(got, line)
			}
		}
		want := []string{
			"NodeNotSchedulable=Node cordon-1 status is now: NodeNotSchedulable",
			"NodeSchedulable=Node cordon-1 status is now: NodeSchedulable",
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("the node's schedulable events %q, want %q\n%s", got, want, out)
		}
		return nil
	})
}

// TestPressureTaint: an agent whose host is under memory pressure by its
// --eviction-hard reports MemoryPressure True, and the server gives the
// node the node.kubernetes.io/memory-pressure NoSchedule taint; an agent
// with thresholds no working machine is below reports the three pressures
// False.
func TestPressureTaint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newNodeServer(t, filepath.Join(dir, "data"), "", dir)
	startAgent(t, s.kubeconfig, dir, "pressed", "--eviction-hard", "memory.available<1000Ti")
	// Thresholds no working machine is below, measured as the defaults are.
	roomy := startAgent(t, s.kubeconfig, dir, "roomy", "--eviction-hard", "memory.available<1Mi,nodefs.available<1Mi,nodefs.inodesFree<1,pid.available<1")
	conditions := func(node string) map[string]string {
		out := s.kubectl(t, "get", "node", node, "-o", `jsonpath={range .status.conditions[*]}{.type}={.status}{" "}{end}`)
		got := map[string]string{}
		for _, kv := range strings.Fields(out) {
			k, v, _ := strings.Cut(kv, "=")
			got[k] = v
		}
		return got
	}
	eventually(t, 30*time.Second, func() error {
		if c := conditions("pressed"); c["Ready"] != "True" || c["MemoryPressure"] != "True" || c["DiskPressure"] != "False" || c["PIDPressure"] != "False" {
			return fmt.Errorf("node pressed: conditions %v, want Ready and MemoryPressure True, the others False", c)
		}
		if c := conditions("roomy"); c["Ready"] != "True" || c["MemoryPressure"] != "False" || c["DiskPressure"] != "False" || c["PIDPressure"] != "False" {
			return fmt.Errorf("node roomy: conditions %v, want Ready True, the pressures False", c)
		}
		return nil
	})
	eventually(t, 3*nodePeriod+pollMargin, func() error {
		out := s.kubectl(t, "describe", "node", "pressed")
		if got := describeField(out, "Taints"); !slices.Equal(got, []string{"node.kubernetes.io/memory-pressure:NoSchedule"}) {
			return fmt.Errorf("kubectl describe node pressed: Taints %q, want the memory-pressure taint\n%s", got, out)
		}
		if !strings.Contains(out, "LeaseholdAgentHasInsufficientMemory") {
			return fmt.Errorf("kubectl describe node pressed shows no MemoryPressure reason\n%s", out)
		}
		return nil
	})
	if got := describeField(s.kubectl(t, "describe", "node", "roomy"), "Taints"); !slices.Equal(got, []string{"<none>"}) {
		t.Errorf("node roomy: Taints %q, want none", got)
	}

	// The agent records the kubelet's event when a pressure it posted
	// changes, here across a restart with a threshold the machine is
	// below; a new node's first post records none.
	roomy.term(t)
	startAgent(t, s.kubeconfig, dir, "roomy", "--eviction-hard", "memory.available<1000Ti")
	eventually(t, 15*time.Second, func() error {
		if !hasNodeEvent(t, s, "roomy", "NodeHasInsufficientMemory") {
			return errors.New("kubectl get events -A shows no NodeHasInsufficientMemory event for node/roomy")
		}
		return nil
	})
	if hasNodeEvent(t, s, "pressed", "NodeHasInsufficientMemory") {
		t.Error("node pressed has a NodeHasInsufficientMemory event for the first post of its status")
	}
}
