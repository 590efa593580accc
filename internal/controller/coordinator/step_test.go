package coordinator

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var testParams = params{electionDuration: 5 * time.Second, leaseDuration: 15 * time.Second, candidateTimeout: 30 * time.Minute}

// now is the coordinator's clock in the step tests; it has watched since t0.
var now = t0.Add(time.Hour)

const never = time.Duration(-1)

// cand is a candidate seen for ten minutes, last seen to renew `renewed` ago
// (never: not since the coordinator started) and pinged `pinged` ago.
func cand(name, binary, emulation string, renewed, pinged time.Duration) *candidate {
	c := &candidate{obj: lc(name, binary, emulation, 0), seenAt: now.Add(-10 * time.Minute)}
	if renewed != never {
		c.renewedAt = now.Add(-renewed)
	}
	if pinged != never {
		c.pingedAt = now.Add(-pinged)
	}
	return c
}

// lease is the Lease "job" held by holder, with transitions.
func lease(holder, preferred string, transitions int32) *coordinationv1.Lease {
	t := metav1.NewMicroTime(t0.Add(-time.Hour)) // remote times: irrelevant
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "job", ResourceVersion: "7"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime: &t, RenewTime: &t, LeaseTransitions: ptr.To(transitions),
		},
	}
	if preferred != "" {
		l.Spec.PreferredHolder = ptr.To(preferred)
		l.Spec.Strategy = ptr.To(coordinationv1.OldestEmulationVersion)
	}
	return l
}

func TestStep(t *testing.T) {
	old := func(renewed, pinged time.Duration) *candidate {
		return cand("old", "1.31.0", "1.30.0", renewed, pinged)
	}
	mid := func(renewed, pinged time.Duration) *candidate {
		return cand("mid", "1.31.0", "1.31.0", renewed, pinged)
	}
	young := func(renewed, pinged time.Duration) *candidate {
		return cand("young", "1.32.0", "1.32.0", renewed, pinged)
	}
	stale := cand("old", "1.31.0", "1.30.0", never, never)
	stale.seenAt = now.Add(-31 * time.Minute)
	custom := mid(time.Second, never)
	custom.obj.Spec.Strategy = "example.com/Custom"

	type want struct {
		ping              []string
		round             time.Time
		create            bool
		update            bool
		holder, preferred string
		transitions       int32
		wake              time.Time
	}
	tests := []struct {
		name      string
		lease     *coordinationv1.Lease
		leaseSeen time.Duration // ago
		cands     []*candidate
		round     time.Duration // ago; never: none
		want      want
	}{
		{name: "no candidates", round: never},
		{name: "only a stale candidate", cands: []*candidate{stale}, round: never},
		{name: "strategy left to another coordinator", cands: []*candidate{custom}, round: never},
		{
			name: "missing lease: ping candidates not seen renewing lately", round: never,
			cands: []*candidate{old(never, never), mid(time.Minute, never), young(time.Second, never)},
			want:  want{ping: []string{"old", "mid"}, round: now, wake: now.Add(5 * time.Second)},
		},
		{
			name: "missing lease, every candidate just renewed: elect at once", round: never,
			cands: []*candidate{mid(time.Second, never), young(2*time.Second, never)},
			want:  want{create: true, holder: "mid", transitions: 0},
		},
		{
			name: "round in progress, one still to answer", round: 2 * time.Second,
			cands: []*candidate{old(never, 2*time.Second), young(time.Second, 2*time.Second)},
			want:  want{round: now.Add(-2 * time.Second), wake: now.Add(3 * time.Second)},
		},
		{
			name: "round in progress, all answered: elect the oldest emulation version", round: 2 * time.Second,
			cands: []*candidate{old(time.Second, 2*time.Second), young(time.Second, 2*time.Second)},
			want:  want{create: true, holder: "old"},
		},
		{
			name: "round over: elect among those that answered", round: 5 * time.Second,
			cands: []*candidate{old(never, 5*time.Second), young(time.Second, 5*time.Second)},
			want:  want{create: true, holder: "young"},
		},
		{
			name: "round over, nobody answered: ping again", round: 5 * time.Second,
			cands: []*candidate{old(never, 5*time.Second)},
			want:  want{wake: now},
		},
		{
			// As Kubernetes' coordinator: no ping to candidates that all
			// let the last go unanswered, until one renews (which wakes
			// the coordinator).
			name: "no round, every candidate ignored the last ping: quiet", round: never,
			cands: []*candidate{old(time.Minute, 10*time.Second), young(never, 10*time.Second)},
			want:  want{},
		},
		{
			name: "no round, one that ignored a ping renewed since: election", round: never,
			cands: []*candidate{old(time.Minute, 10*time.Second), young(time.Second, 10*time.Second)},
			want:  want{ping: []string{"old"}, round: now, wake: now.Add(5 * time.Second)},
		},
		{
			name: "live holder is the best candidate", lease: lease("old", "", 4), leaseSeen: 10 * time.Second, round: never,
			cands: []*candidate{old(never, never), young(never, never)},
			want:  want{wake: now.Add(5 * time.Second)},
		},
		{
			name: "expired lease: election", lease: lease("old", "", 4), leaseSeen: 15 * time.Second, round: never,
			cands: []*candidate{old(never, never), young(time.Minute, never)},
			want:  want{ping: []string{"old", "young"}, round: now, wake: now.Add(5 * time.Second)},
		},
		{
			name: "expired lease, round over: assign to the one that answered", lease: lease("old", "", 4), leaseSeen: 20 * time.Second, round: 5 * time.Second,
			cands: []*candidate{old(never, 5*time.Second), young(time.Second, 5*time.Second)},
			want:  want{update: true, holder: "young", transitions: 5},
		},
		{
			name: "expired lease, its holder answered: assigned again, new term", lease: lease("old", "", 4), leaseSeen: 20 * time.Second, round: 5 * time.Second,
			cands: []*candidate{old(time.Second, 5*time.Second), young(time.Second, 5*time.Second)},
			want:  want{update: true, holder: "old", transitions: 5},
		},
		{
			name: "released lease: election at once when all are fresh", lease: lease("", "", 4), leaseSeen: 0, round: never,
			cands: []*candidate{mid(time.Second, never), young(time.Second, never)},
			want:  want{update: true, holder: "mid", transitions: 5},
		},
		{
			name: "released to a preferred holder: elected like any", lease: lease("", "mid", 4), leaseSeen: 0, round: never,
			cands: []*candidate{mid(time.Second, never), young(time.Second, never)},
			want:  want{update: true, holder: "mid", transitions: 5},
		},
		{
			name: "better candidate appears while the holder leads: ping", lease: lease("young", "", 2), leaseSeen: time.Second, round: never,
			cands: []*candidate{old(0, never), young(time.Minute, never)},
			want:  want{ping: []string{"young"}, round: now, wake: now.Add(5 * time.Second)},
		},
		{
			name: "better candidate answered: preferred holder", lease: lease("young", "", 2), leaseSeen: time.Second, round: 3 * time.Second,
			cands: []*candidate{old(4*time.Second, never), young(2*time.Second, 3*time.Second)},
			want:  want{update: true, holder: "young", preferred: "old", transitions: 2, wake: now.Add(14 * time.Second)},
		},
		{
			name: "handover already asked for", lease: lease("young", "old", 2), leaseSeen: time.Second, round: never,
			cands: []*candidate{old(time.Minute, never), young(time.Minute, never)},
			want:  want{wake: now.Add(14 * time.Second)},
		},
		{
			name: "better candidate ignored a ping: left alone while the holder leads", lease: lease("young", "", 2), leaseSeen: time.Second, round: never,
			cands: []*candidate{old(time.Minute, 10*time.Second), young(time.Minute, 10*time.Second)},
			want:  want{wake: now.Add(14 * time.Second)},
		},
		{
			name: "holder that is no candidate is asked to hand over", lease: lease("someone", "", 2), leaseSeen: time.Second, round: never,
			cands: []*candidate{mid(time.Second, never)},
			want:  want{update: true, holder: "someone", preferred: "mid", transitions: 2, wake: now.Add(14 * time.Second)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := election{namespace: "default", name: "job", lease: tt.lease, leaseSeenAt: now.Add(-tt.leaseSeen), candidates: tt.cands}
			if tt.round != never {
				e.round = now.Add(-tt.round)
			}
			p := step(e, testParams, now)
			var pinged []string
			for _, c := range p.ping {
				pinged = append(pinged, c.obj.Name)
			}
			if !slices.Equal(pinged, tt.want.ping) || !p.round.Equal(tt.want.round) || !p.wake.Equal(tt.want.wake) {
				t.Errorf("ping %q round %v wake %v; want ping %q round %v wake %v (%s)", pinged, p.round, p.wake, tt.want.ping, tt.want.round, tt.want.wake, p.why)
			}
			if (p.create != nil) != tt.want.create || (p.update != nil) != tt.want.update {
				t.Fatalf("create %v update %v; want %v, %v (%s)", p.create != nil, p.update != nil, tt.want.create, tt.want.update, p.why)
			}
			l := p.create
			if l == nil {
				l = p.update
			}
			if l == nil {
				return
			}
			if holderOf(l) != tt.want.holder || preferredOf(l) != tt.want.preferred || *l.Spec.LeaseTransitions != tt.want.transitions ||
				l.Spec.Strategy == nil || *l.Spec.Strategy != coordinationv1.OldestEmulationVersion {
				t.Errorf("lease spec %+v; want holder %q preferred %q transitions %d strategy OldestEmulationVersion", l.Spec, tt.want.holder, tt.want.preferred, tt.want.transitions)
			}
			if tt.want.preferred == "" {
				// A new term: written now, with the coordinator's duration.
				if !l.Spec.AcquireTime.Time.Equal(now) || !l.Spec.RenewTime.Time.Equal(now) || *l.Spec.LeaseDurationSeconds != 15 {
					t.Errorf("lease spec %+v; want acquireTime = renewTime = now, duration 15", l.Spec)
				}
			} else if !l.Spec.RenewTime.Equal(tt.lease.Spec.RenewTime) {
				t.Errorf("asking for a handover changed renewTime")
			}
			if p.create != nil && (l.Namespace != "default" || l.Name != "job") {
				t.Errorf("created %s/%s, want default/job", l.Namespace, l.Name)
			}
			if p.update != nil && l.ResourceVersion != "7" {
				t.Errorf("update without the observed resourceVersion (compare-and-swap): %q", l.ResourceVersion)
			}
		})
	}
}
