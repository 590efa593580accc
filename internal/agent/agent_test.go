package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	kubeletapis "k8s.io/kubelet/pkg/apis"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

const nodeName = "web-1"

var (
	t0        = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.7"},
		{Type: corev1.NodeHostName, Address: nodeName},
	}
	nodesGVR  = corev1.SchemeGroupVersion.WithResource("nodes")
	leasesGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")
)

// recordingClock is a fake clock that reports every timer the agent arms.
// The agent arms its timer after a pass is complete, so receiving from waits
// is how a test knows the pass is over, and what the agent will wait.
type recordingClock struct {
	*testingclock.FakeClock
	waits chan time.Duration
}

func (c *recordingClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.waits <- d
	return t
}

type harness struct {
	t       *testing.T
	clock   *recordingClock
	agent   *Agent
	cancel  context.CancelFunc
	done    chan error
	pending time.Duration // the wait the agent is in
	// host is what the agent measures of its host, under hostMu.
	hostMu sync.Mutex
	host   HostStats
}

// healthyHost has every signal well above the default thresholds.
var healthyHost = HostStats{
	MemoryAvailable: 4 << 30, MemoryCapacity: 8 << 30,
	FsAvailable: 50 << 30, FsCapacity: 100 << 30,
	InodesFree: 5e6, Inodes: 6e6,
	PIDsAvailable: 4e6, PIDs: 4194304,
	CPUs: 4,
}

// setHost changes what the agent measures next.
func (h *harness) setHost(f func(*HostStats)) {
	h.hostMu.Lock()
	defer h.hostMu.Unlock()
	f(&h.host)
}

// newClient returns a fake clientset that, like a server, gives every object
// it creates a fresh uid.
func newClient(objects ...k8sruntime.Object) *fake.Clientset {
	c := fake.NewSimpleClientset(objects...)
	var n atomic.Int64
	c.PrependReactor("create", "*", func(action k8stesting.Action) (bool, k8sruntime.Object, error) {
		m, err := meta.Accessor(action.(k8stesting.CreateAction).GetObject())
		if err == nil && m.GetUID() == "" {
			m.SetUID(types.UID(fmt.Sprintf("uid-%d", n.Add(1))))
		}
		return false, nil, nil
	})
	return c
}

// sameServer returns a second fake clientset that shares c's objects, as two
// clients of two servers on one etcd would.
func sameServer(c *fake.Clientset) *fake.Clientset {
	other := fake.NewSimpleClientset()
	other.ReactionChain = append([]k8stesting.Reactor(nil), c.ReactionChain...)
	return other
}

// newHarness prepares an agent for web-1 against clients, without jitter.
func newHarness(t *testing.T, clients ...*fake.Clientset) *harness {
	t.Helper()
	h := &harness{
		t:     t,
		clock: &recordingClock{FakeClock: testingclock.NewFakeClock(t0), waits: make(chan time.Duration, 100)},
		done:  make(chan error, 1),
	}
	h.host = healthyHost
	cfg := Config{NodeName: nodeName, Addresses: addresses, Version: "v9.9.9", Clock: h.clock,
		HostStats: func() (HostStats, error) {
			h.hostMu.Lock()
			defer h.hostMu.Unlock()
			return h.host, nil
		}}
	for _, c := range clients {
		cfg.Clients = append(cfg.Clients, c)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	a.jitter = func(d time.Duration) time.Duration { return d }
	h.agent = a
	return h
}

// run starts the agent.
func (h *harness) run() *harness {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.agent.Run(ctx) }()
	h.t.Cleanup(h.stop)
	return h
}

// start runs an agent for web-1 against clients, without jitter.
func start(t *testing.T, clients ...*fake.Clientset) *harness {
	t.Helper()
	return newHarness(t, clients...).run()
}

// nextWait waits for the agent to finish its pass and returns how long it
// will wait before the next one.
func (h *harness) nextWait() time.Duration {
	h.t.Helper()
	select {
	case d := <-h.clock.waits:
		h.pending = d
		return d
	case err := <-h.done:
		h.t.Fatalf("Run returned %v while a wait was expected", err)
	case <-time.After(10 * time.Second):
		h.t.Fatal("the agent did not finish its pass")
	}
	return 0
}

// expectWait waits for the agent to finish its pass and checks that it then
// waits want. The agent stays idle until resume.
func (h *harness) expectWait(want time.Duration) {
	h.t.Helper()
	if got := h.nextWait(); got != want {
		h.t.Fatalf("got wait %v, want %v", got, want)
	}
}

// resume lets the agent's current wait pass.
func (h *harness) resume() { h.clock.Step(h.pending) }

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		h.t.Error("Run did not return after cancel")
	}
}

// node and lease read the stored objects without a request the agent's
// requests would be mixed with.
func (h *harness) node(c *fake.Clientset) *corev1.Node {
	h.t.Helper()
	n, err := c.Tracker().Get(nodesGVR, "", nodeName)
	if err != nil {
		h.t.Fatalf("get node: %v", err)
	}
	return n.(*corev1.Node)
}

func (h *harness) lease(c *fake.Clientset) *coordinationv1.Lease {
	h.t.Helper()
	l, err := c.Tracker().Get(leasesGVR, corev1.NamespaceNodeLease, nodeName)
	if err != nil {
		h.t.Fatalf("get lease: %v", err)
	}
	return l.(*coordinationv1.Lease)
}

// calls returns the requests c received since the last call, as
// "verb resource[/subresource]", and forgets them.
func calls(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		s := a.GetVerb() + " " + a.GetResource().Resource
		if a.GetSubresource() != "" {
			s += "/" + a.GetSubresource()
		}
		out = append(out, s)
	}
	c.ClearActions()
	return out
}

func expectCalls(t *testing.T, c *fake.Clientset, want ...string) {
	t.Helper()
	if got := calls(c); strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("got requests %q, want %q", got, want)
	}
}

// failing makes c answer verb on resource with err while on is true.
func failing(c *fake.Clientset, verb, resource string, err error, on *atomic.Bool) {
	c.PrependReactor(verb, resource, func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		if on.Load() {
			return true, nil, err
		}
		return false, nil, nil
	})
}

func checkLease(t *testing.T, l *coordinationv1.Lease, ownerUID types.UID, renewed time.Time) {
	t.Helper()
	if got := l.Spec.HolderIdentity; got == nil || *got != nodeName {
		t.Errorf("got holderIdentity %v, want %s", got, nodeName)
	}
	if got := l.Spec.LeaseDurationSeconds; got == nil || *got != 40 {
		t.Errorf("got leaseDurationSeconds %v, want 40", got)
	}
	if l.Spec.RenewTime == nil || !l.Spec.RenewTime.Time.Equal(renewed) {
		t.Errorf("got renewTime %v, want %v", l.Spec.RenewTime, renewed)
	}
	want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: ownerUID}}
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0] != want[0] {
		t.Errorf("got ownerReferences %+v, want %+v", l.OwnerReferences, want)
	}
	if owner := l.OwnerReferences; len(owner) == 1 && (owner[0].Controller != nil || owner[0].BlockOwnerDeletion != nil) {
		t.Errorf("got controller %v, blockOwnerDeletion %v, want both unset", owner[0].Controller, owner[0].BlockOwnerDeletion)
	}
}

func readyCondition(t *testing.T, n *corev1.Node) corev1.NodeCondition {
	t.Helper()
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	t.Fatalf("node has no Ready condition: %+v", n.Status.Conditions)
	return corev1.NodeCondition{}
}

func TestNew(t *testing.T) {
	client := []kubernetes.Interface{fake.NewSimpleClientset()}
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"defaults", Config{Clients: client}, ""},
		{"no clients", Config{}, "at least one client"},
		{"nil client", Config{Clients: []kubernetes.Interface{nil}}, "client 0 is nil"},
		{"bad node name", Config{Clients: client, NodeName: "Web_1"}, "invalid node name"},
		{"fractional duration", Config{Clients: client, LeaseDuration: 1500 * time.Millisecond}, "whole number of seconds"},
		{"short duration", Config{Clients: client, LeaseDuration: time.Millisecond}, "whole number of seconds"},
		{"renew not shorter than duration", Config{Clients: client, LeaseDuration: 10 * time.Second, RenewInterval: 10 * time.Second}, "shorter than the lease duration"},
		{"negative renew", Config{Clients: client, RenewInterval: -time.Second}, "must be positive"},
		{"negative report period", Config{Clients: client, NodeStatusReportPeriod: -time.Second}, "must be positive"},
		{"reserved label", Config{Clients: client, Labels: map[string]string{corev1.LabelOSStable: "plan9"}}, "set by the agent"},
		{"bad label key", Config{Clients: client, Labels: map[string]string{"a b": "c"}}, "invalid label key"},
		{"bad label value", Config{Clients: client, Labels: map[string]string{"rack": "a b"}}, "invalid value"},
		{"good label", Config{Clients: client, Labels: map[string]string{"example.com/rack": "r12"}}, ""},
		{"kubelet labels", Config{Clients: client, Labels: map[string]string{corev1.LabelTopologyZone: "rack-4", "node.kubernetes.io/pool": "a"}}, ""},
		{"role label, as the kubelet refuses it", Config{Clients: client, Labels: map[string]string{"node-role.kubernetes.io/db": ""}}, "a node may not set the labels node-role.kubernetes.io/db"},
		{"restricted label", Config{Clients: client, Labels: map[string]string{"node-restriction.kubernetes.io/secure": "true"}}, "node-restriction.kubernetes.io/secure"},
		{"node IPs", Config{Clients: client, NodeIPs: []net.IP{net.ParseIP("10.0.0.7"), net.ParseIP("fd00::7")}}, ""},
		{"two node IPs of a family", Config{Clients: client, NodeIPs: []net.IP{net.ParseIP("10.0.0.7"), net.ParseIP("10.0.0.8")}}, "node IPs: must contain either a single IP or a dual-stack pair"},
		{"loopback node IP", Config{Clients: client, NodeIPs: []net.IP{net.ParseIP("127.0.0.1")}}, "node IPs: 127.0.0.1 is a loopback address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cfg.NodeName == "" && tt.wantErr == "" {
				tt.cfg.NodeName = nodeName // the host name may not be a valid node name
			}
			_, err := New(tt.cfg)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("got error %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	a, err := New(Config{Clients: []kubernetes.Interface{fake.NewSimpleClientset()}, NodeName: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	if a.cfg.LeaseDuration != 40*time.Second || a.cfg.RenewInterval != 10*time.Second || a.cfg.NodeStatusReportPeriod != 5*time.Minute {
		t.Errorf("got duration %v, renew %v, report %v; want 40s, 10s, 5m", a.cfg.LeaseDuration, a.cfg.RenewInterval, a.cfg.NodeStatusReportPeriod)
	}
	if a.cfg.Version == "" || a.nodeInfo.KubeletVersion != a.cfg.Version || a.nodeInfo.KubeProxyVersion != "" {
		t.Errorf("got version %q, nodeInfo %+v", a.cfg.Version, a.nodeInfo)
	}

	host, err := os.Hostname()
	if err != nil {
		t.Skip("no host name")
	}
	a, err = New(Config{Clients: []kubernetes.Interface{fake.NewSimpleClientset()}})
	if err != nil {
		t.Skipf("host name %q is not a valid node name: %v", host, err)
	}
	if want := strings.ToLower(host); a.cfg.NodeName != want {
		t.Errorf("got node name %q, want %q", a.cfg.NodeName, want)
	}
}

func TestJitter(t *testing.T) {
	d := 10 * time.Second
	for range 1000 {
		if got := jitter(d); got < d || got > d+d*4/100 {
			t.Fatalf("got jitter(%v) = %v, want within [%v, %v]", d, got, d, d+d*4/100)
		}
	}
}

func TestRegisters(t *testing.T) {
	c := newClient()
	h := start(t, c)
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "create nodes", "get leases", "get nodes", "create leases")
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "update leases")

	n := h.node(c)
	for k, want := range map[string]string{
		corev1.LabelHostname:   nodeName,
		corev1.LabelOSStable:   runtime.GOOS,
		corev1.LabelArchStable: runtime.GOARCH,
		kubeletapis.LabelOS:    runtime.GOOS, // the kubelet's beta labels too
		kubeletapis.LabelArch:  runtime.GOARCH,
	} {
		if got := n.Labels[k]; got != want {
			t.Errorf("got label %s=%q, want %q", k, got, want)
		}
	}
	if got := fmt.Sprint(n.Status.Addresses); got != fmt.Sprint(addresses) {
		t.Errorf("got addresses %s, want %s", got, fmt.Sprint(addresses))
	}
	info := n.Status.NodeInfo
	if info.KubeletVersion != "v9.9.9" || info.KubeProxyVersion != "" || info.OperatingSystem != runtime.GOOS || info.Architecture != runtime.GOARCH {
		t.Errorf("got nodeInfo %+v", info)
	}
	ready := readyCondition(t, n)
	if ready.Status != corev1.ConditionTrue || ready.Reason != ReadyReason || ready.Message != ReadyMessage ||
		!ready.LastHeartbeatTime.Time.Equal(t0) || !ready.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("got Ready condition %+v", ready)
	}
	if n.Status.Capacity != nil || n.Status.Allocatable != nil {
		t.Errorf("capacity %v and allocatable %v posted without ReportCapacity", n.Status.Capacity, n.Status.Allocatable)
	}
	checkLease(t, h.lease(c), n.UID, t0.Add(10*time.Second))
}

func TestReportCapacity(t *testing.T) {
	c := newClient()
	h := newHarness(t, c)
	h.agent.cfg.ReportCapacity = true
	h.run()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "create nodes", "get leases", "get nodes", "create leases") // the status went with the Node
	// As the kubelet's, with the default thresholds taken off allocatable.
	wantCapacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	wantAllocatable := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8092Mi"), corev1.ResourceEphemeralStorage: resource.MustParse("90Gi"),
	}
	n := h.node(c)
	if !equality.Semantic.DeepEqual(n.Status.Capacity, wantCapacity) || !equality.Semantic.DeepEqual(n.Status.Allocatable, wantAllocatable) {
		t.Errorf("capacity %v, allocatable %v\nwant %v, %v", n.Status.Capacity, n.Status.Allocatable, wantCapacity, wantAllocatable)
	}
	// Unchanged, it is posted again only with the report period.
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "update leases")
	// A disk grown is posted at the next renewal.
	h.setHost(func(s *HostStats) { s.FsCapacity = 200 << 30 })
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "update leases", "update nodes/status")
	if got := h.node(c).Status.Capacity[corev1.ResourceEphemeralStorage]; got.Cmp(resource.MustParse("200Gi")) != 0 {
		t.Errorf("ephemeral-storage capacity %v after the disk grew, want 200Gi", &got)
	}
}

func TestRenewCadence(t *testing.T) {
	c := newClient()
	h := start(t, c)
	h.expectWait(10 * time.Second)
	uid := h.node(c).UID
	calls(c)

	// Renewals every 10s straight from the cached copy; the node status is
	// posted again once the 5 minute report period has passed.
	for i := 1; i <= 31; i++ {
		h.resume()
		h.expectWait(10 * time.Second)
		if i == 30 {
			expectCalls(t, c, "update leases", "update nodes/status")
		} else {
			expectCalls(t, c, "update leases")
		}
		checkLease(t, h.lease(c), uid, t0.Add(time.Duration(i)*10*time.Second))
	}
	ready := readyCondition(t, h.node(c))
	if !ready.LastHeartbeatTime.Time.Equal(t0.Add(5*time.Minute)) || !ready.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("got Ready condition %+v, want heartbeat at 5m and transition at start", ready)
	}
}

func TestStatusPostedOnChange(t *testing.T) {
	c := newClient()
	h := newHarness(t, c)
	var changed atomic.Bool
	moved := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.8"}}
	h.agent.addresses = func() []corev1.NodeAddress {
		if changed.Load() {
			return moved
		}
		return addresses
	}
	h.run()
	h.expectWait(10 * time.Second)
	calls(c)

	changed.Store(true)
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "update leases", "update nodes/status")
	if got := h.node(c).Status.Addresses; fmt.Sprint(got) != fmt.Sprint(moved) {
		t.Errorf("got addresses %v, want %v", got, moved)
	}
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "update leases")
}

// TestStatusPostedAfterSilence: an agent that could not renew for longer
// than its lease (stopped, or cut off) posts its status with the next
// renewal, unchanged as it is, since the node lifecycle controller has
// likely set its conditions to Unknown meanwhile.
func TestStatusPostedAfterSilence(t *testing.T) {
	c := newClient()
	h := newHarness(t, c)
	h.run()
	h.expectWait(10 * time.Second)
	calls(c)
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "update leases")

	// Each silence below is one step of the clock: the step fires the
	// agent's 10 s timer, and the agent reads the time after it, so two
	// steps would race with its reading.
	h.clock.Step(time.Minute) // the agent stopped for a minute, past its 40 s lease
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "update leases", "update nodes/status")
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "update leases")

	// Stopped for 35 s, short of the lease's 40 s but longer than a server
	// with a 20 s grace period waits: posted again too. A renewal a little
	// late is not.
	h.clock.Step(35 * time.Second)
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "update leases", "update nodes/status")
	h.clock.Step(20 * time.Second)
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "update leases")
}

func TestAdoptsExistingNode(t *testing.T) {
	old := metav1.NewTime(t0.Add(-time.Hour))
	existing := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "existing", Labels: map[string]string{"rack": "r1"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", LastTransitionTime: old, LastHeartbeatTime: old},
			{Type: "Custom", Status: corev1.ConditionFalse},
		}},
	}
	c := newClient(existing)
	h := start(t, c)
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "create nodes", "get nodes", "update nodes", "get leases", "get nodes", "create leases", "update nodes/status")

	n := h.node(c)
	if n.UID != "existing" || n.Labels["rack"] != "r1" || n.Labels[corev1.LabelHostname] != nodeName {
		t.Errorf("got node uid %s, labels %v", n.UID, n.Labels)
	}
	if ready := readyCondition(t, n); ready.Status != corev1.ConditionTrue || !ready.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("got Ready condition %+v, want True since start", ready)
	}
	if !slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == "Custom" }) || len(n.Status.Conditions) != 5 {
		t.Errorf("got conditions %+v, want the custom one kept beside Ready and the three pressures", n.Status.Conditions)
	}
	checkLease(t, h.lease(c), "existing", t0)
}

func TestFixesLeaseOwnedByOldNode(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "current"}}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: nodeName, Namespace: corev1.NamespaceNodeLease,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: "gone"}},
		},
	}
	c := newClient(node, lease)
	h := start(t, c)
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "create nodes", "get nodes", "update nodes", "get leases", "update leases", "update nodes/status")
	checkLease(t, h.lease(c), "current", t0)
}

func TestBackoff(t *testing.T) {
	c := newClient()
	var broken atomic.Bool
	failing(c, "update", "leases", apierrors.NewServiceUnavailable("down"), &broken)
	h := start(t, c)
	h.expectWait(10 * time.Second)

	broken.Store(true)
	for _, want := range []time.Duration{
		200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond,
		3200 * time.Millisecond, 6400 * time.Millisecond, 7 * time.Second, 7 * time.Second, 7 * time.Second,
	} {
		h.resume()
		h.expectWait(want)
	}
	broken.Store(false)
	h.resume()
	h.expectWait(10 * time.Second) // back to the renew interval
	broken.Store(true)
	h.resume()
	h.expectWait(200 * time.Millisecond) // and the backoff starts over
	h.resume()
	h.expectWait(400 * time.Millisecond)
}

// TestBackoffShortLease: an agent that renews more often than the
// backoff's 7 s cap waits no longer than its renew interval between
// attempts, so that it renews within that of a server coming back (whose
// node lifecycle controller then gives its node a grace period of little
// more than its lease).
func TestBackoffShortLease(t *testing.T) {
	c := newClient()
	var broken atomic.Bool
	failing(c, "update", "leases", apierrors.NewServiceUnavailable("down"), &broken)
	h := newHarness(t, c)
	h.agent.cfg.RenewInterval = time.Second
	h.run()
	h.expectWait(time.Second)

	broken.Store(true)
	for _, want := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second} {
		h.resume()
		h.expectWait(want)
	}
	h.agent.cfg.RenewInterval = 100 * time.Millisecond
	h.resume()
	h.expectWait(100 * time.Millisecond)
}

func TestConflictRereadsLease(t *testing.T) {
	c := newClient()
	h := start(t, c)
	h.expectWait(10 * time.Second)
	h.resume()
	h.expectWait(10 * time.Second)
	calls(c)

	var conflict atomic.Bool
	conflict.Store(true)
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		if conflict.Swap(false) {
			return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), nodeName, errors.New("stale"))
		}
		return false, nil, nil
	})
	h.resume()
	h.expectWait(10 * time.Second) // no backoff: the retry succeeded
	expectCalls(t, c, "update leases", "get leases", "update leases")
	checkLease(t, h.lease(c), h.node(c).UID, t0.Add(20*time.Second))
}

func TestRecreatesDeletedLease(t *testing.T) {
	c := newClient()
	h := start(t, c)
	h.expectWait(10 * time.Second)
	uid := h.node(c).UID
	if err := c.Tracker().Delete(leasesGVR, corev1.NamespaceNodeLease, nodeName); err != nil {
		t.Fatal(err)
	}
	calls(c)
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "update leases", "get nodes", "create leases")
	checkLease(t, h.lease(c), uid, t0.Add(10*time.Second))
}

func TestReregistersDeletedNode(t *testing.T) {
	n := reregisters(t, newClient(), "update leases", "get nodes", "create nodes", "create leases")
	if ready := readyCondition(t, n); ready.Status != corev1.ConditionTrue {
		t.Errorf("got Ready condition %+v", ready)
	}
}

// reregisters does what the garbage collector does after `kubectl delete
// node` (the Node goes, then its lease) to an agent running against c,
// and checks that its next renewal makes the calls want and leaves a new
// Node, owning the lease. It returns that Node.
func reregisters(t *testing.T, c *fake.Clientset, want ...string) *corev1.Node {
	t.Helper()
	h := start(t, c)
	h.expectWait(10 * time.Second)
	oldUID := h.node(c).UID
	if err := c.Tracker().Delete(nodesGVR, "", nodeName); err != nil {
		t.Fatal(err)
	}
	if err := c.Tracker().Delete(leasesGVR, corev1.NamespaceNodeLease, nodeName); err != nil {
		t.Fatal(err)
	}
	calls(c)
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, want...)
	n := h.node(c)
	if n.UID == oldUID {
		t.Fatalf("got node uid %s, want a new one", n.UID)
	}
	checkLease(t, h.lease(c), n.UID, t0.Add(10*time.Second))
	return n
}

// createsOnUpdate makes c create a missing Lease on its update, with a
// fresh uid, as a server does since a PUT of a missing Lease creates it.
func createsOnUpdate(c *fake.Clientset) {
	c.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, k8sruntime.Object, error) {
		u := action.(k8stesting.UpdateAction)
		l := u.GetObject().(*coordinationv1.Lease)
		if _, err := c.Tracker().Get(leasesGVR, u.GetNamespace(), l.Name); !apierrors.IsNotFound(err) {
			return false, nil, nil
		}
		created := l.DeepCopy()
		created.UID, created.ResourceVersion = types.UID("put-"+string(l.UID)), ""
		if err := c.Tracker().Create(leasesGVR, created, u.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, created, nil
	})
}

func TestDeletedLeaseCreatedByTheRenewal(t *testing.T) {
	c := newClient()
	createsOnUpdate(c)
	h := start(t, c)
	h.expectWait(10 * time.Second)
	uid := h.node(c).UID
	old := h.lease(c).UID
	if err := c.Tracker().Delete(leasesGVR, corev1.NamespaceNodeLease, nodeName); err != nil {
		t.Fatal(err)
	}
	calls(c)
	h.resume()
	h.expectWait(10 * time.Second)
	// The Node it names is still there: nothing more to do.
	expectCalls(t, c, "update leases", "get nodes")
	l := h.lease(c)
	if l.UID == old {
		t.Fatalf("the lease kept its uid %s", old)
	}
	checkLease(t, l, uid, t0.Add(10*time.Second))
}

func TestDeletedNodeAndLeaseCreatedByTheRenewal(t *testing.T) {
	// Against a server whose PUT creates the missing Lease, the renewal
	// creates it owned by the deleted Node; the agent registers the Node
	// again and renews at once, owned by the new one.
	c := newClient()
	createsOnUpdate(c)
	reregisters(t, c, "update leases", "get nodes", "create nodes", "update leases")
}

func TestReregistersDeletedNodeWithoutGC(t *testing.T) {
	// With no garbage collector the lease outlives its Node: the agent finds
	// out when it next posts the node status, registers the Node again and
	// points the lease at it.
	c := newClient()
	h := start(t, c)
	h.expectWait(10 * time.Second)
	oldUID := h.node(c).UID
	if err := c.Tracker().Delete(nodesGVR, "", nodeName); err != nil {
		t.Fatal(err)
	}
	for range 29 {
		h.resume()
		h.expectWait(10 * time.Second)
	}
	calls(c)
	h.resume()
	h.expectWait(200 * time.Millisecond)
	expectCalls(t, c, "update leases", "update nodes/status")
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "create nodes", "update leases")
	n := h.node(c)
	if n.UID == oldUID {
		t.Fatalf("got node uid %s, want a new one", n.UID)
	}
	checkLease(t, h.lease(c), n.UID, t0.Add(5*time.Minute+200*time.Millisecond))
}

func TestFailover(t *testing.T) {
	first := newClient()
	second := sameServer(first)
	var down atomic.Bool
	down.Store(true)
	failing(first, "*", "*", &url.Error{Op: "Post", URL: "https://first:6443", Err: errors.New("connection refused")}, &down)
	h := start(t, first, second)

	h.expectWait(200 * time.Millisecond) // the first server failed
	expectCalls(t, first, "create nodes")
	expectCalls(t, second)
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, first)
	expectCalls(t, second, "create nodes", "get leases", "get nodes", "create leases")

	// The agent sticks to the second server even once the first is back.
	down.Store(false)
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, first)
	expectCalls(t, second, "update leases")

	// A 5xx from the second sends it back to the first.
	var broken atomic.Bool
	broken.Store(true)
	failing(second, "update", "leases", apierrors.NewInternalError(errors.New("boom")), &broken)
	h.resume()
	h.expectWait(200 * time.Millisecond)
	expectCalls(t, second, "update leases")
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, first, "update leases")
	expectCalls(t, second)
	checkLease(t, h.lease(first), h.node(first).UID, t0.Add(20400*time.Millisecond))
}

func TestNoFailoverOnClientErrors(t *testing.T) {
	first := newClient()
	second := sameServer(first)
	var on atomic.Bool
	on.Store(true)
	failing(first, "create", "nodes", apierrors.NewForbidden(nodesGVR.GroupResource(), nodeName, errors.New("no")), &on)
	h := start(t, first, second)
	h.expectWait(200 * time.Millisecond)
	h.resume()
	h.expectWait(400 * time.Millisecond)
	expectCalls(t, first, "create nodes", "create nodes")
	expectCalls(t, second)
}

func TestServerUnavailable(t *testing.T) {
	gr := schema.GroupResource{Resource: "leases"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", &url.Error{Op: "Put", URL: "https://x", Err: errors.New("connection refused")}, true},
		{"timeout", context.DeadlineExceeded, true},
		{"500", apierrors.NewInternalError(errors.New("x")), true},
		{"503 wrapped", fmt.Errorf("renewing: %w", apierrors.NewServiceUnavailable("x")), true},
		{"504", apierrors.NewTimeoutError("x", 1), true},
		{"429", apierrors.NewTooManyRequests("x", 1), true},
		{"403", apierrors.NewForbidden(gr, "x", errors.New("x")), false},
		{"404", apierrors.NewNotFound(gr, "x"), false},
		{"409", apierrors.NewConflict(gr, "x", errors.New("x")), false},
		{"422", apierrors.NewInvalid(schema.GroupKind{Kind: "Lease"}, "x", nil), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := serverUnavailable(tt.err); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestStop(t *testing.T) {
	tests := []struct {
		name  string
		setup func(c *fake.Clientset)
		wait  time.Duration
	}{
		{"while waiting to renew", func(*fake.Clientset) {}, 10 * time.Second},
		{"while backing off", func(c *fake.Clientset) {
			var on atomic.Bool
			on.Store(true)
			failing(c, "create", "nodes", errors.New("connection refused"), &on)
		}, 200 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient()
			tt.setup(c)
			h := start(t, c)
			if got := h.nextWait(); got != tt.wait {
				t.Fatalf("got wait %v, want %v", got, tt.wait)
			}
			h.stop()
			for _, call := range calls(c) {
				if strings.HasPrefix(call, "delete") {
					t.Errorf("got %q on stop, want nothing deleted", call)
				}
			}
		})
	}
}
