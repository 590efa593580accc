package identity

import (
	"context"
	"log/slog"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func identityLease(name, rv string, renew time.Time, seconds int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: Namespace, UID: types.UID(name + "-uid"), ResourceVersion: rv,
			Labels: map[string]string{Label: LabelValue},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(name + "_1"), LeaseDurationSeconds: ptr.To(seconds),
			RenewTime: ptr.To(metav1.NewMicroTime(renew)),
		},
	}
}

// deletes returns the leases the client was asked to delete, with the
// preconditions each delete carried.
func deletes(cs *fake.Clientset) map[string]metav1.Preconditions {
	out := map[string]metav1.Preconditions{}
	for _, a := range cs.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok && d.GetResource().Resource == "leases" {
			p := metav1.Preconditions{}
			if d.DeleteOptions.Preconditions != nil {
				p = *d.DeleteOptions.Preconditions
			}
			out[d.Name] = p
		}
	}
	return out
}

// The collector times each lease from when it saw the lease change, on its
// own clock: a writer's renewTime from a clock running ahead (here an hour)
// does not keep a lease that stopped changing.
func TestCollectorExpiry(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	old := clk.Now().Add(time.Hour)
	cs := fake.NewClientset()
	c, err := NewCollector(CollectorConfig{Client: cs, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	c.observe(identityLease("gone", "1", old, 3))
	c.observe(identityLease("live", "2", old, 3))
	c.observe(identityLease("slow", "3", old, 60))
	clk.Step(2 * time.Second)
	// live renews; gone only gets a new resourceVersion (a label change,
	// say), which is no renewal.
	c.observe(identityLease("live", "4", old.Add(time.Second), 3))
	c.observe(identityLease("gone", "5", old, 3))
	c.collect(ctx)
	if d := deletes(cs); len(d) != 0 {
		t.Fatalf("deleted %v within the duration", d)
	}

	clk.Step(1500 * time.Millisecond) // gone: 3.5 s unrenewed; live 1.5 s; slow 3.5 of 60
	c.collect(ctx)
	d := deletes(cs)
	if len(d) != 1 {
		t.Fatalf("deleted %v, want gone alone", d)
	}
	if p, ok := d["gone"]; !ok || ptr.Deref(p.UID, "") != "gone-uid" || ptr.Deref(p.ResourceVersion, "") != "5" {
		t.Errorf("delete of gone carried %+v, want its uid and the last resourceVersion seen", p)
	}

	c.forget(identityLease("gone", "5", old, 3)) // as the informer reports the delete

	// A holder change is a renewal too.
	clk.Step(2 * time.Second) // live: 3.5 s since its renewal
	l := identityLease("live", "6", old.Add(time.Second), 3)
	l.Spec.HolderIdentity = ptr.To("live_2")
	c.observe(l)
	cs.ClearActions()
	c.collect(ctx)
	if d := deletes(cs); len(d) != 0 {
		t.Errorf("deleted %v right after a new holder took over", d)
	}
}

// As Kubernetes' collector: a lease whose renewTime is more than its
// duration in the past, or that lacks a renewTime or a duration, is expired
// at the first check, even one the collector has only just seen (a replica
// that stopped before the collector started).
func TestCollectorExpiryByRenewTime(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	cs := fake.NewClientset()
	c, err := NewCollector(CollectorConfig{Client: cs, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c.observe(identityLease("stale", "1", clk.Now().Add(-time.Hour-time.Second), 3600))
	c.observe(identityLease("fresh", "2", clk.Now().Add(-time.Hour+time.Second), 3600))
	noDuration := identityLease("no-duration", "3", clk.Now(), 3600)
	noDuration.Spec.LeaseDurationSeconds = nil
	c.observe(noDuration)
	noRenewal := identityLease("no-renewal", "4", clk.Now(), 3600)
	noRenewal.Spec.RenewTime = nil
	c.observe(noRenewal)
	c.collect(context.Background())
	d := deletes(cs)
	if len(d) != 3 || d["stale"].UID == nil || d["no-duration"].UID == nil || d["no-renewal"].UID == nil {
		t.Errorf("deleted %v, want stale, no-duration and no-renewal", d)
	}
}

// A delete the server refuses because the lease changed meanwhile (409) or
// is gone (404) is not retried and not an error: the informer brings the
// news.
func TestCollectorDeleteRaces(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"renewed meanwhile", apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "x", nil)},
		{"gone meanwhile", apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "x")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			cs := fake.NewClientset()
			cs.PrependReactor("delete", "leases", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tt.err })
			c, err := NewCollector(CollectorConfig{Client: cs, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			c.observe(identityLease("x", "1", clk.Now(), 1))
			clk.Step(2 * time.Second)
			c.collect(context.Background())
			if d := deletes(cs); len(d) != 1 {
				t.Errorf("deletes %v, want one attempt", d)
			}
			c.mu.Lock()
			_, kept := c.seen["x-uid"]
			c.mu.Unlock()
			if !kept {
				t.Error("the sighting was dropped before the informer reported a change")
			}
		})
	}
}
