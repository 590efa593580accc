package identity_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/controller/identity"
)

// The integration test runs publishers and a collector against a real
// leasehold server, on the real clock with second-long leases, waiting
// with deadlines.

func TestLeaseName(t *testing.T) {
	a := identity.LeaseName("host-a", "127.0.0.1:6443")
	if a != identity.LeaseName("host-a", "127.0.0.1:6443") {
		t.Error("LeaseName is not deterministic")
	}
	for _, other := range []string{identity.LeaseName("host-b", "127.0.0.1:6443"), identity.LeaseName("host-a", "127.0.0.1:6444")} {
		if other == a {
			t.Errorf("two replicas share the lease name %s", a)
		}
	}
	if !strings.HasPrefix(a, "apiserver-") || len(a) != len("apiserver-")+26 || len(validation.IsDNS1123Subdomain(a)) != 0 {
		t.Errorf("LeaseName = %q, want apiserver- and 26 lower-case base32 characters", a)
	}
}

func TestNewPublisherRejects(t *testing.T) {
	cs := kubernetes.New(nil)
	for _, cfg := range []identity.PublisherConfig{
		{},
		{Client: cs, Duration: 1500 * time.Millisecond},
		{Client: cs, Duration: 500 * time.Millisecond},
		{Client: cs, Duration: 10 * time.Second, RenewInterval: 10 * time.Second},
		{Client: cs, RenewInterval: -time.Second},
	} {
		if _, err := identity.NewPublisher(cfg); err == nil {
			t.Errorf("NewPublisher(%+v) accepted", cfg)
		}
	}
}

// identityLeaseFor is a labelled identity lease, last renewed a day ago.
func identityLeaseFor(name, holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: identity.Namespace, Labels: map[string]string{identity.Label: identity.LabelValue}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](1),
			RenewTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-24 * time.Hour))),
		},
	}
}

// waitFor polls cond every 50 ms until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// idDuration is the test's identity lease duration: its publishers renew
// every 100 ms, and a live replica's lease is collected only once its
// renewals stall this long, which on a loaded 2-core machine with the
// race detector they have for 1.7 s.
const idDuration = 3 * time.Second

func TestPublishAndCollect(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	cs := s.Client(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leases := cs.CoordinationV1().Leases(identity.Namespace)

	publishAs := func(host, addr string) (*identity.Publisher, func()) {
		p, err := identity.NewPublisher(identity.PublisherConfig{
			Client: cs, Host: host, Addr: addr, Duration: idDuration, RenewInterval: 100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		if err := p.Start(stop); err != nil {
			t.Fatal(err)
		}
		crash := sync.OnceFunc(func() { close(stop) })
		t.Cleanup(crash)
		return p, crash
	}
	publish := func(addr string) (*identity.Publisher, func()) { return publishAs("test-host", addr) }

	// A lease an earlier start of the first replica left behind is
	// replaced, not adopted.
	first := identity.LeaseName("test-host", "127.0.0.1:1")
	stale := identityLeaseFor(first, first+"_earlier")
	if _, err := leases.Create(ctx, stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	long, crashLong := publishAs(strings.Repeat("h", 64), "127.0.0.1:3")
	waitFor(t, 10*time.Second, "a lease published for a host name no label can carry", func() bool {
		l, err := leases.Get(ctx, long.Name, metav1.GetOptions{})
		return err == nil && l.Labels[identity.Label] == identity.LabelValue && l.Labels[corev1.LabelHostname] == ""
	})
	crashLong()
	long.Stop()
	a, crashA := publish("127.0.0.1:1")
	b, crashB := publish("127.0.0.1:2")
	if a.Name != first || !strings.HasPrefix(a.HolderIdentity, first+"_") || a.Name == b.Name {
		t.Fatalf("publishers %+v and %+v", a, b)
	}
	waitFor(t, 10*time.Second, "both identity leases published and renewed", func() bool {
		l, err := cs.CoordinationV1().Leases(identity.Namespace).List(ctx, metav1.ListOptions{LabelSelector: identity.Label + "=" + identity.LabelValue})
		if err != nil || len(l.Items) != 2 {
			return false
		}
		for _, it := range l.Items {
			if it.Spec.RenewTime == nil || it.Spec.LeaseDurationSeconds == nil || time.Duration(*it.Spec.LeaseDurationSeconds)*time.Second != idDuration ||
				it.Labels[corev1.LabelHostname] != "test-host" || it.Spec.HolderIdentity == nil ||
				(*it.Spec.HolderIdentity != a.HolderIdentity && *it.Spec.HolderIdentity != b.HolderIdentity) {
				return false
			}
		}
		return true
	})

	// An unlabelled lease in kube-system is none of the collector's
	// business, however old.
	other := identityLeaseFor("not-an-identity", "someone")
	other.Labels = nil
	if _, err := leases.Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Nor is another kind of server's.
	kube := identityLeaseFor("apiserver-of-kube", "apiserver-of-kube_1")
	kube.Labels[identity.Label] = "kube-apiserver"
	if _, err := leases.Create(ctx, kube, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	c, err := identity.NewCollector(identity.CollectorConfig{Client: cs, CheckPeriod: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	// The first replica crashes: its renewals stop, its lease stays.
	crashA()
	waitFor(t, 10*time.Second, "the crashed replica's lease collected", func() bool {
		_, err := leases.Get(ctx, a.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	// Meanwhile, and for a few lease durations more, the live one stays.
	for range 6 {
		if _, err := leases.Get(ctx, b.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("the live replica's lease: %v", err)
		}
		time.Sleep(idDuration / 2)
	}
	for _, l := range []string{other.Name, kube.Name} {
		if _, err := leases.Get(ctx, l, metav1.GetOptions{}); err != nil {
			t.Errorf("a lease not leasehold's: %v", err)
		}
	}

	// A clean stop deletes the lease at once.
	crashB()
	b.Stop()
	if _, err := leases.Get(ctx, b.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after Stop the lease is still there: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("collector: %v", err)
	}
}
