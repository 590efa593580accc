package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestEventTTL: with --event-ttl, an Event created with kubectl is listed,
// then gone once its time is up, as kube-apiserver's --event-ttl does; a
// Lease written at the same time stays.
func TestEventTTL(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	// Long enough that the event is still there when kubectl lists it on
	// a busy machine.
	s := newServer(t, "--event-ttl", "5s")
	event := `apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: short-lived
  namespace: default
eventTime: "2026-01-01T00:00:00.000000Z"
reportingController: e2e.leasehold.io/test
reportingInstance: e2e
action: Testing
reason: Testing
type: Normal
regarding:
  kind: Node
  name: nowhere
note: gone in a few seconds
`
	s.kubectlStdin(t, event, "create", "-f", "-")
	if out := s.kubectl(t, "get", "events", "-n", "default", "-o", "name"); !strings.Contains(out, "short-lived") {
		t.Fatalf("the new event is not listed:\n%s", out)
	}
	s.kubectlStdin(t, leaseManifest("stays", "default", "e2e"), "create", "-f", "-")
	// etcd expires leases on its own real clock, a few seconds at the
	// least; the event must be gone well within this.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, errOut, err := s.runKubectl(t, "get", "event", "short-lived", "-n", "default")
		if err != nil && strings.Contains(errOut, notFoundLine("events", "short-lived")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the event outlived its 5 s TTL by 30 s:\n%s", describeRun([]string{"get", "event", "short-lived"}, out, errOut))
		}
		time.Sleep(250 * time.Millisecond)
	}
	if l := getLease(t, s, "default", "stays"); holder(l) != "e2e" {
		t.Fatalf("the lease changed: holder %q", holder(l))
	}
}
