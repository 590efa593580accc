package coordinator_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/controller/coordinator"
)

// The integration test runs the coordinator and coordinated participants
// (a Candidate and an Elector each) against a real leasehold server, on the
// real clock with short durations, waiting with deadlines.

const (
	ns    = "default"
	lease = "job"
)

// leadership checks that no two participants lead at once.
type leadership struct {
	t      *testing.T
	mu     sync.Mutex
	holder string
}

func (l *leadership) enter(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holder != "" {
		l.t.Errorf("%s started leading while %s leads", id, l.holder)
	}
	l.holder = id
}

func (l *leadership) exit(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holder == id {
		l.holder = ""
	}
}

// participant is one coordinated contender: a Candidate and an Elector.
type participant struct {
	id      string
	started chan election.Term
	cancel  context.CancelFunc
	elected chan error // what Elector.Run returned
	cand    chan error // what Candidate.Run returned
	once    sync.Once
	result  error
}

// The leaders' timings. A leader that misses renewals for
// testRenewDeadline stops leading, and the test fails; 3 s rides out the
// stalls of a loaded 2-core machine with the race detector, where a
// renewal has been seen late by 1.7 s. Nothing in the test waits for a
// Lease to expire: leaders release theirs.
const (
	testLeaseDuration = 4 * time.Second
	testRenewDeadline = 3 * time.Second
)

func join(t *testing.T, cs kubernetes.Interface, lead *leadership, id, binary, emulation string) *participant {
	t.Helper()
	p := &participant{id: id, started: make(chan election.Term, 10), elected: make(chan error, 1), cand: make(chan error, 1)}
	cand, err := election.NewCandidate(election.CandidateConfig{
		Client: cs.CoordinationV1beta1(), Namespace: ns, LeaseName: lease, Identity: id,
		BinaryVersion: binary, EmulationVersion: emulation,
		RenewInterval: 500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	e, err := election.New(election.Config{
		Client: cs.CoordinationV1(), Namespace: ns, Name: lease, Identity: id, Coordinated: true,
		LeaseDuration: testLeaseDuration, RenewDeadline: testRenewDeadline, RetryPeriod: 300 * time.Millisecond,
		ReleaseOnCancel: true,
		Callbacks: election.Callbacks{OnStartedLeading: func(ctx context.Context, term election.Term) {
			lead.enter(id)
			p.started <- term
			<-ctx.Done()
			lead.exit(id)
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() { p.cand <- cand.Run(ctx) }()
	go func() { p.elected <- e.Run(ctx) }()
	t.Cleanup(func() { p.stop() })
	return p
}

// stop ends both and returns what the Elector's Run returned.
func (p *participant) stop() error {
	p.once.Do(func() {
		p.cancel()
		p.result = <-p.elected
		<-p.cand
	})
	return p.result
}

func (p *participant) waitStart(t *testing.T, within time.Duration) election.Term {
	t.Helper()
	select {
	case term := <-p.started:
		return term
	case <-time.After(within):
		t.Fatalf("%s did not start leading within %v", p.id, within)
		return election.Term{}
	}
}

func (p *participant) mustNotHaveStarted(t *testing.T) {
	t.Helper()
	select {
	case term := <-p.started:
		t.Fatalf("%s started leading (token %d), want not", p.id, term.FencingToken)
	default:
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// TestCoordinatedElection runs the coordinator with its informers fed
// through the API client, and fed by the server's watch cache in process
// as in leasehold serve.
func TestCoordinatedElection(t *testing.T) {
	t.Run("client", func(t *testing.T) { testCoordinatedElection(t, false) })
	t.Run("in-process", func(t *testing.T) { testCoordinatedElection(t, true) })
}

func testCoordinatedElection(t *testing.T, inProcess bool) {
	srv := apiservertest.Start(t, apiservertest.Options{})
	cs := srv.Client(t, "")
	ctx := t.Context()

	lead := &leadership{t: t}
	getLease := func() *coordinationv1.Lease {
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get lease: %v", err)
		}
		return l
	}

	// Two candidates, published before the coordinator starts: the older
	// emulation version leads, and nobody leads before it.
	newer := join(t, cs, lead, "newer", "1.3.0", "1.3.0")
	older := join(t, cs, lead, "older", "1.3.0", "1.2.0")
	waitFor(t, 10*time.Second, "both candidates are published", func() bool {
		l, err := cs.CoordinationV1beta1().LeaseCandidates(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 2
	})
	cfg := coordinator.Config{
		Client: cs, ElectionDuration: 500 * time.Millisecond, LeaseDuration: testLeaseDuration, CandidateTimeout: 3 * time.Second,
	}
	if inProcess {
		cfg.Reads = srv.API.ListerWatcher
	}
	co, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	coCtx, stopCo := context.WithCancel(ctx)
	coDone := make(chan error, 1)
	go func() { coDone <- co.Run(coCtx) }()
	t.Cleanup(func() { stopCo(); <-coDone })

	first := older.waitStart(t, 10*time.Second)
	newer.mustNotHaveStarted(t)
	l := getLease()
	if *l.Spec.HolderIdentity != "older" || l.Spec.Strategy == nil || *l.Spec.Strategy != coordinationv1.OldestEmulationVersion {
		t.Fatalf("lease spec %+v, want held by older with strategy OldestEmulationVersion", l.Spec)
	}
	if int64(*l.Spec.LeaseTransitions) != first.FencingToken {
		t.Errorf("token %d, lease transitions %d", first.FencingToken, *l.Spec.LeaseTransitions)
	}

	// The leader stops (its candidate is withdrawn, the Lease released):
	// the other takes over with a higher token.
	if err := older.stop(); err != nil {
		t.Errorf("older: Run = %v", err)
	}
	second := newer.waitStart(t, 10*time.Second)
	if second.FencingToken <= first.FencingToken {
		t.Errorf("token %d after %d, want higher", second.FencingToken, first.FencingToken)
	}

	// A new candidate with an older version: the coordinator sets
	// preferredHolder and the leader hands over.
	oldest := join(t, cs, lead, "oldest", "1.2.5", "1.1.0")
	third := oldest.waitStart(t, 15*time.Second)
	select {
	case err := <-newer.elected:
		if !errors.Is(err, election.ErrHandedOver) {
			t.Errorf("newer: Run = %v, want ErrHandedOver", err)
		}
		newer.elected <- err // for stop
	case <-time.After(10 * time.Second):
		t.Fatal("newer did not stop after handing over")
	}
	if third.FencingToken <= second.FencingToken {
		t.Errorf("token %d after %d, want higher", third.FencingToken, second.FencingToken)
	}
	if l := getLease(); *l.Spec.HolderIdentity != "oldest" || l.Spec.PreferredHolder != nil {
		t.Errorf("lease spec %+v, want held by oldest, no preferred holder", l.Spec)
	}

	// A candidate that never renews (no process behind it) is collected.
	ghost := &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ghost"},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName: lease, BinaryVersion: "1.9.0", EmulationVersion: "1.9.0", Strategy: coordinationv1.OldestEmulationVersion,
			RenewTime: ptr.To(metav1.NewMicroTime(time.Now())),
		},
	}
	if _, err := cs.CoordinationV1beta1().LeaseCandidates(ns).Create(ctx, ghost, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the stale candidate is collected", func() bool {
		_, err := cs.CoordinationV1beta1().LeaseCandidates(ns).Get(ctx, "ghost", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if l := getLease(); *l.Spec.HolderIdentity != "oldest" {
		t.Errorf("holder %q, want oldest to keep leading", *l.Spec.HolderIdentity)
	}
	// The live candidates are still there.
	for _, name := range []string{"oldest", "newer"} {
		if _, err := cs.CoordinationV1beta1().LeaseCandidates(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("candidate %s: %v", name, err)
		}
	}
	_ = oldest.stop()
}
