package election

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

func TestExpired(t *testing.T) {
	tests := []struct {
		name     string
		observed time.Time
		d        time.Duration
		now      time.Time
		want     bool
	}{
		{"just observed", t0, 15 * time.Second, t0, false},
		{"a moment before", t0, 15 * time.Second, t0.Add(15*time.Second - 1), false},
		{"at the end", t0, 15 * time.Second, t0.Add(15 * time.Second), true},
		{"long after", t0, 15 * time.Second, t0.Add(time.Hour), true},
		{"zero duration", t0, 0, t0, true},
		{"clock behind the observation", t0, 15 * time.Second, t0.Add(-time.Hour), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := expired(tt.observed, tt.d, tt.now); got != tt.want {
				t.Errorf("expired(%v, %v, %v) = %v, want %v", tt.observed, tt.d, tt.now, got, tt.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	held := func(holder, preferred string) *coordinationv1.Lease {
		l := heldLease(holder, 3, t0.Add(-24*time.Hour)) // renewTime is never used
		if preferred != "" {
			l.Spec.PreferredHolder = ptr.To(preferred)
		}
		return l
	}
	released := func(preferred string) *coordinationv1.Lease {
		return releaseRecord(held("x", preferred), t0)
	}
	noDuration := held("x", "")
	noDuration.Spec.LeaseDurationSeconds = nil
	noHolder := held("x", "")
	noHolder.Spec.HolderIdentity = nil

	tests := []struct {
		name   string
		obs    observation
		now    time.Time
		want   action
		wantAt time.Time
	}{
		{"not read yet", observation{}, t0, actWait, time.Time{}},
		{"missing", observation{known: true, at: t0}, t0, actCreate, time.Time{}},
		{"released", observation{known: true, lease: released(""), at: t0}, t0, actAcquire, time.Time{}},
		{"holder field unset", observation{known: true, lease: noHolder, at: t0}, t0, actAcquire, time.Time{}},
		{"released to me", observation{known: true, lease: released("me"), at: t0}, t0, actAcquire, time.Time{}},
		{"released to another", observation{known: true, lease: released("other"), at: t0}, t0.Add(999 * time.Millisecond), actWait, t0.Add(time.Second)},
		{"released to another, not taken in time", observation{known: true, lease: released("other"), at: t0}, t0.Add(time.Second), actAcquire, time.Time{}},
		{"held", observation{known: true, lease: held("x", ""), at: t0}, t0.Add(14 * time.Second), actWait, t0.Add(15 * time.Second)},
		{"held, expired", observation{known: true, lease: held("x", ""), at: t0}, t0.Add(15 * time.Second), actAcquire, time.Time{}},
		{"held by me, not expired", observation{known: true, lease: held("me", ""), at: t0}, t0, actWait, t0.Add(15 * time.Second)},
		{"held by me, expired", observation{known: true, lease: held("me", ""), at: t0}, t0.Add(15 * time.Second), actAcquire, time.Time{}},
		{"held, preferred me", observation{known: true, lease: held("x", "me"), at: t0}, t0.Add(time.Second), actWait, t0.Add(15 * time.Second)},
		{"held, preferred another, expired", observation{known: true, lease: held("x", "other"), at: t0}, t0.Add(15 * time.Second), actAcquire, time.Time{}},
		{"held without duration", observation{known: true, lease: noDuration, at: t0}, t0, actAcquire, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decide("me", tt.obs, tt.now)
			if got.act != tt.want || !got.at.Equal(tt.wantAt) {
				t.Errorf("decide = %v at %v (%s), want %v at %v", got.act, got.at, got.why, tt.want, tt.wantAt)
			}
			if got.why == "" {
				t.Error("decision without a reason")
			}
		})
	}
}

func TestRecords(t *testing.T) {
	now := t0.Add(time.Minute)
	cur := heldLease("old", 3, t0)
	cur.Spec.PreferredHolder = ptr.To("me")
	cur.Spec.Strategy = ptr.To(coordinationv1.OldestEmulationVersion)
	cur.Labels = map[string]string{"app": "job"}

	a := acquireRecord(cur, "me", 20, now)
	if holderOf(a) != "me" || transitionsOf(a) != 4 || *a.Spec.LeaseDurationSeconds != 20 ||
		!a.Spec.AcquireTime.Time.Equal(now) || !a.Spec.RenewTime.Time.Equal(now) ||
		a.Spec.PreferredHolder != nil || *a.Spec.Strategy != coordinationv1.OldestEmulationVersion || a.Labels["app"] != "job" {
		t.Errorf("acquireRecord: %+v", a)
	}
	r := renewRecord(a, "me", 20, now.Add(time.Second))
	if transitionsOf(r) != 4 || !r.Spec.AcquireTime.Time.Equal(now) || !r.Spec.RenewTime.Time.Equal(now.Add(time.Second)) {
		t.Errorf("renewRecord: %+v", r.Spec)
	}
	rel := releaseRecord(r, now.Add(2*time.Second))
	if rel.Spec.HolderIdentity == nil || *rel.Spec.HolderIdentity != "" || *rel.Spec.LeaseDurationSeconds != 1 ||
		transitionsOf(rel) != 4 || !rel.Spec.AcquireTime.Time.Equal(now.Add(2*time.Second)) {
		t.Errorf("releaseRecord: %+v", rel.Spec)
	}
	if cur.Spec.PreferredHolder == nil || holderOf(cur) != "old" {
		t.Error("records modified their input")
	}
	c := createRecord("ns", "n", "me", 15, now)
	if holderOf(c) != "me" || transitionsOf(c) != 0 || c.Namespace != "ns" || c.Name != "n" {
		t.Errorf("createRecord: %+v", c)
	}
}

// FuzzDecide checks the safety rules of decide for any Lease: it never takes
// a Lease held by someone, or reserved for someone else, before that record
// has expired in this contender's view, and takes a free one at once.
func FuzzDecide(f *testing.F) {
	f.Add("x", "", int32(15), int64(0), int64(14e9), true)
	f.Add("", "other", int32(1), int64(0), int64(5e8), true)
	f.Add("me", "", int32(15), int64(100), int64(0), false)
	f.Fuzz(func(t *testing.T, holder, preferred string, seconds int32, observedNs, elapsedNs int64, exists bool) {
		o := observation{known: true, at: t0.Add(time.Duration(observedNs))}
		if exists {
			o.lease = heldLease(holder, 0, t0)
			o.lease.Spec.LeaseDurationSeconds = ptr.To(seconds)
			if preferred != "" {
				o.lease.Spec.PreferredHolder = ptr.To(preferred)
			}
		}
		now := o.at.Add(time.Duration(elapsedNs))
		d := decide("me", o, now)
		isExpired := exists && expired(o.at, time.Duration(seconds)*time.Second, now)
		switch {
		case !exists:
			if d.act != actCreate {
				t.Fatalf("missing lease: %v", d.act)
			}
		case holder != "" && !isExpired, holder == "" && preferred != "" && preferred != "me" && !isExpired:
			if d.act != actWait {
				t.Fatalf("holder %q preferred %q, not expired: %v (%s)", holder, preferred, d.act, d.why)
			}
			if !d.at.After(now) {
				t.Fatalf("wait until %v, not after now %v", d.at, now)
			}
		case holder == "" && (preferred == "" || preferred == "me"):
			if d.act != actAcquire {
				t.Fatalf("free lease: %v", d.act)
			}
		default:
			if d.act != actAcquire {
				t.Fatalf("expired lease: %v (%s)", d.act, d.why)
			}
		}
	})
}
