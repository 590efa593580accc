package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/store/embedded"
)

// startBatcher runs a batcher on a fresh embedded etcd until the test ends.
func startBatcher(t *testing.T, maxBatch int, delay time.Duration, clk *testingclock.FakeClock) *batcher {
	t.Helper()
	e, err := embedded.Start(embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	b := newBatcher(e.KV(), maxBatch, delay, 0, clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return b
}

// create queues a write of key, if it does not exist, as do does, and
// returns where its result will arrive.
func create(b *batcher, key string) <-chan txnResult {
	req := &txnRequest{
		write:  createOf(key),
		queued: b.clock.Now(), ctx: context.Background(), done: make(chan txnResult, 1),
	}
	b.queue <- req
	return req.done
}

// createOf is the write of key with value "v" if key does not exist.
func createOf(key string) write { return write{key: key, created: true, value: []byte("v")} }

func result(t *testing.T, key string, c <-chan txnResult) txnResult {
	t.Helper()
	r := <-c
	if r.err != nil || !r.succeeded {
		t.Fatalf("%s: %+v", key, r)
	}
	return r
}

// settle waits for every result, moving the clock on by step whenever the
// batcher waits on it.
func settle(t *testing.T, clk *testingclock.FakeClock, step time.Duration, res ...<-chan txnResult) {
	t.Helper()
	for i, c := range res {
		what := fmt.Sprintf("write %d", i)
		if r := stepUntil(t, clk, step, what, c); r.err != nil || !r.succeeded {
			t.Fatalf("%s: %+v", what, r)
		}
	}
}

// stepUntil returns the result from c, moving clk on by step whenever
// something waits on it; what names the write if none comes.
func stepUntil(t *testing.T, clk *testingclock.FakeClock, step time.Duration, what string, c <-chan txnResult) txnResult {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case r := <-c:
			return r
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not answered", what)
		}
		if clk.HasWaiters() {
			clk.Step(step)
		}
		runtime.Gosched()
	}
}

// burst queues n writes at one instant of the batcher's clock and waits for
// them: afterwards the batcher takes writes to come often.
func burst(t *testing.T, b *batcher, clk *testingclock.FakeClock, prefix string, n int) {
	t.Helper()
	var res []<-chan txnResult
	for i := range n {
		res = append(res, create(b, fmt.Sprintf("%s%d", prefix, i)))
	}
	settle(t, clk, b.delay, res...)
}

// TestCommitDelayGathers: with a commit delay, once writes come often, the
// writes queued while a batch's oldest write waits share its transaction
// (one revision), and the batch goes when the delay has passed on the
// batcher's clock.
func TestCommitDelayGathers(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	b := startBatcher(t, 100, time.Second, clk)
	burst(t, b, clk, "/burst", 30)
	first := create(b, "/a")
	// The batcher takes /a and waits on the clock, which stands still.
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the batcher did not wait for more writes")
		}
		runtime.Gosched()
	}
	var rest []<-chan txnResult
	for i := range 5 {
		rest = append(rest, create(b, fmt.Sprintf("/b%d", i)))
	}
	clk.Step(time.Second)
	rev := result(t, "/a", first).rev
	for i, c := range rest {
		if r := result(t, fmt.Sprintf("/b%d", i), c); r.rev != rev {
			t.Errorf("/b%d committed at revision %d, /a at %d: not one transaction", i, r.rev, rev)
		}
	}
}

// TestCommitDelayFullBatchGoes: a batch that fills does not wait out the
// delay.
func TestCommitDelayFullBatchGoes(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	b := startBatcher(t, 3, time.Hour, clk)
	burst(t, b, clk, "/burst", 30)
	var res []<-chan txnResult
	for i := range 3 {
		res = append(res, create(b, fmt.Sprintf("/k%d", i)))
	}
	rev := result(t, "/k0", res[0]).rev
	for i, c := range res[1:] {
		if r := result(t, fmt.Sprintf("/k%d", i+1), c); r.rev != rev {
			t.Errorf("/k%d at revision %d, /k0 at %d", i+1, r.rev, rev)
		}
	}
}

// answered waits for c's result without moving the batcher's clock: a write
// that waits for company on it is never answered.
func answered(t *testing.T, key string, c <-chan txnResult) {
	t.Helper()
	select {
	case r := <-c:
		if r.err != nil || !r.succeeded {
			t.Fatalf("%s: %+v", key, r)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was not answered: it waits for the clock", key)
	}
}

// TestNoCommitDelayGoesAtOnce: without a delay a lone write does not wait
// for the clock.
func TestNoCommitDelayGoesAtOnce(t *testing.T) {
	b := startBatcher(t, 100, 0, testingclock.NewFakeClock(time.Now()))
	answered(t, "/x", create(b, "/x"))
}

// TestCommitDelayLoneWriteGoesAtOnce: with a delay, a write does not wait
// while commits have had no company: the first write of all, and the
// writes of a client that writes one thing after another, once the
// commits of an earlier burst are long enough ago.
func TestCommitDelayLoneWriteGoesAtOnce(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	b := startBatcher(t, 100, time.Second, clk)
	answered(t, "/first", create(b, "/first"))

	burst(t, b, clk, "/burst", 30)
	// One write at a time: the first few still wait for company (settle
	// moves the clock on for them) and find none.
	for i := range 30 {
		settle(t, clk, time.Second, create(b, fmt.Sprintf("/seq%d", i)))
	}
	answered(t, "/lone", create(b, "/lone"))
}

// TestCompanyEstimate: batches wait once commits have had company, and
// stop within a few tens of commits that carried one write each.
func TestCompanyEstimate(t *testing.T) {
	b := &batcher{delay: time.Millisecond}
	if b.lingers() {
		t.Fatal("a batcher that has committed nothing waits for company")
	}
	for range 3 {
		b.observe(1)
	}
	if b.lingers() {
		t.Fatalf("after three lone writes, company %v: waits", b.company)
	}
	// Writers that share commits on their own: two writes a commit.
	n := 0
	for ; !b.lingers(); n++ {
		b.observe(2)
	}
	if n > 3 {
		t.Errorf("waiting began after %d commits of two writes, want at most 3", n)
	}
	// Waiting gathers, say, ten writes a commit; then the writers go quiet
	// but for one that waits for each answer.
	for range 50 {
		b.observe(10)
	}
	n = 0
	for ; b.lingers(); n++ {
		b.observe(1)
	}
	if n < 5 || n > 40 {
		t.Errorf("waiting stopped after %d lone commits, want 5 to 40", n)
	}
	if (&batcher{company: 10}).lingers() {
		t.Error("without a delay a batch waits")
	}
}

// TestAbandonedRequestNotReused: a write whose caller gave up while the
// batcher held it is still answered by the batcher, so its request must
// not carry the next write (requests are pooled once answered), and its
// value must not be released.
func TestAbandonedRequestNotReused(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	b := startBatcher(t, 100, time.Second, clk)
	waitForBatcher := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for len(b.queue) > 0 || !clk.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatal("the batcher did not wait for more writes")
			}
			runtime.Gosched()
		}
	}
	burst(t, b, clk, "/burst", 30)
	exists := create(b, "/exists")
	waitForBatcher()
	clk.Step(time.Second)
	result(t, "/exists", exists)

	ctx, cancel := context.WithCancel(context.Background())
	abandoned := make(chan txnResult, 1)
	go func() {
		abandoned <- b.do(ctx, createOf("/exists"))
	}()
	// The batcher takes the write and waits on the clock.
	waitForBatcher()
	cancel()
	// Nor must its value be recycled: the batcher may still send it.
	if r := <-abandoned; r.err == nil || !r.abandoned {
		t.Fatalf("abandoned write: %+v, want the context's error, abandoned", r)
	}
	next := make(chan txnResult, 1)
	go func() {
		next <- b.do(context.Background(), createOf("/new"))
	}()
	// Move the clock on whenever the batcher waits, until the second write
	// is answered (with the abandoned one or in a batch of its own).
	const what = "the write after an abandoned one"
	if r := stepUntil(t, clk, time.Second, what, next); r.err != nil || !r.succeeded {
		t.Fatalf("%s: %+v", what, r)
	}
}

// hangingKV answers like its KVClient, except that it holds the first
// transaction it is sent until its caller gives up, as a member of an
// external cluster that stopped answering holds a call.
type hangingKV struct {
	pb.KVClient
	once sync.Once
	held chan struct{} // closed when the first transaction is held
}

func (h *hangingKV) Txn(ctx context.Context, in *pb.TxnRequest, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
	hang := false
	h.once.Do(func() { hang = true })
	if !hang {
		return h.KVClient.Txn(ctx, in, opts...)
	}
	close(h.held)
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// TestStalledCommitDoesNotHoldOthers: with a commit timeout, a commit that
// etcd holds stops holding back the batches after it once it has been in
// flight for a tenth of the timeout on the batcher's clock, and its write
// is answered with a timeout at the timeout. Without the timeout, the write
// after it would wait as long as the first.
func TestStalledCommitDoesNotHoldOthers(t *testing.T) {
	e, err := embedded.Start(embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	clk := testingclock.NewFakeClock(time.Now())
	kv := &hangingKV{KVClient: e.KV(), held: make(chan struct{})}
	b := newBatcher(kv, 100, 0, 10*time.Second, clk)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { b.run(ctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })

	held := create(b, "/held")
	<-kv.held
	next := create(b, "/next")
	waitForTimer(t, clk)
	clk.Step(time.Second)
	answered(t, "/next", next)

	if r := stepUntil(t, clk, 9*time.Second, "the held write", held); !errors.Is(r.err, context.DeadlineExceeded) || r.succeeded {
		t.Fatalf("the held write was answered %+v, want a timeout", r)
	}
}

// waitForTimer returns once something waits on clk.
func waitForTimer(t *testing.T, clk *testingclock.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("nothing waits on the clock")
		}
		runtime.Gosched()
	}
}

// TestDeletionsGoThroughAFullDatabase: at its quota etcd refuses a
// transaction that puts anything, and takes one that only deletes; a
// deletion that shares a batch with a put still goes through, and the put
// is refused with etcd's error.
func TestDeletionsGoThroughAFullDatabase(t *testing.T) {
	e, err := embedded.Start(embedded.Config{Dir: t.TempDir(), QuotaBackendBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ctx := context.Background()
	kept, err := e.Client().Put(ctx, "/kept", "v")
	if err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("x", 256<<10)
	for i := 0; ; i++ {
		if i > 64 {
			t.Fatal("the database took 16 MiB under a quota of 4 MiB")
		}
		if _, err := e.Client().Put(ctx, fmt.Sprintf("/fill/%d", i), value); err != nil {
			if !isNoSpace(err) {
				t.Fatalf("filling the database: %v", err)
			}
			break
		}
	}
	// Both queued before the batcher runs: one batch.
	b := newBatcher(e.KV(), 10, 0, 0, testingclock.NewFakeClock(time.Now()))
	del := &txnRequest{write: write{key: "/kept", rev: kept.Header.Revision, del: true}, ctx: ctx, done: make(chan txnResult, 1)}
	put := &txnRequest{write: createOf("/new"), ctx: ctx, done: make(chan txnResult, 1)}
	b.queue <- put
	b.queue <- del
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { b.run(rctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if r := <-del.done; r.err != nil || !r.succeeded {
		t.Errorf("the deletion at the quota: %+v; want it made", r)
	}
	if r := <-put.done; !isNoSpace(r.err) {
		t.Errorf("the put at the quota: %+v; want etcd's no-space error", r)
	}
	if got, err := e.Client().Get(ctx, "/kept"); err != nil || len(got.Kvs) != 0 {
		t.Errorf("/kept after its deletion: %v, %v", got, err)
	}
}
