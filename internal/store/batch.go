package store

import (
	"context"
	"errors"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/stack"
)

// batcher is group commit: concurrent, independent compare-and-swap writes
// are sent to etcd as nested transactions of one outer transaction, so many
// writes share one raft round and one fsync. Each nested transaction keeps
// its own compare, so one write's conflict does not fail the others.
//
// Model: writers queue requests; up to maxInFlight batches are at etcd at a
// time; a batch takes everything queued when it starts, up to maxBatch
// requests and maxBatchBytes of values, and never two writes of the same
// key (etcd rejects a transaction that puts one key twice; the second waits
// for the next batch). With no concurrency a write goes alone at once, so
// latency is etcd's.
//
// One batch at a time measured best (2 cores, embedded etcd): etcd applies
// transactions one after another anyway, and while one commits the next
// batch gathers everything that arrives, so there are fewer, larger
// transactions. Against 4 at a time (of at most 100 writes), 10 000 nodes
// renewing every 10 s went from p99 243 ms to about 70 ms, and 100 clients
// updating as fast as they can from about 2 800 to 3 150-3 350 updates/s.
// One batch at a time needs room in it when commits slow down (a large
// heap, a large database): the embedded etcd takes up to 1 000 writes per
// transaction, an external cluster etcd's default of 100.
//
// At moderate rates batches stay small: at 333 renewals a second a commit
// carried 1.3 writes, so nearly every write paid for a raft round and an
// fsync of its own. With a commit delay (Config.CommitDelay) a batch also
// waits until its oldest write has waited that long, unless it fills
// first: the writes that arrive meanwhile share its commit. Under load the
// oldest write has usually waited that long already, behind the commit in
// flight, so the delay adds nothing there.
type batcher struct {
	client   *clientv3.Client
	queue    chan *txnRequest
	maxBatch int
	delay    time.Duration
	clock    clock.Clock
}

const (
	// DefaultMaxBatch is below etcd's default limit of 128 operations per
	// transaction (--max-txn-ops).
	DefaultMaxBatch = 100
	// maxBatchBytes bounds the values of one batch, below etcd's default
	// request limit of 1.5 MiB (--max-request-bytes); a single larger write
	// goes alone.
	maxBatchBytes = 1 << 20
	maxInFlight   = 1
)

type txnRequest struct {
	queued time.Time // set when the batcher has a delay
	ctx    context.Context
	key    string
	cmp    clientv3.Cmp
	then   clientv3.Op
	done   chan txnResult
}

// txnResult is one write's outcome: whether its compare held, and the
// revision of the transaction. A write whose compare failed reads the key
// again itself: an else branch reading it in every transaction would be
// carried by every raft entry and every WAL record for the rare conflict.
type txnResult struct {
	succeeded bool
	rev       int64
	err       error
}

func newBatcher(c *clientv3.Client, maxBatch int, delay time.Duration, clk clock.Clock) *batcher {
	return &batcher{client: c, queue: make(chan *txnRequest, 4*maxBatch), maxBatch: maxBatch, delay: delay, clock: clk}
}

// do runs "if cmp then op" on key through the batcher.
func (b *batcher) do(ctx context.Context, key string, cmp clientv3.Cmp, then clientv3.Op) txnResult {
	req := txnRequests.Get().(*txnRequest)
	req.ctx, req.key, req.cmp, req.then = ctx, key, cmp, then
	if b.delay > 0 {
		req.queued = b.clock.Now()
	}
	select {
	case b.queue <- req:
	case <-ctx.Done():
		req.release()
		return txnResult{err: ctx.Err()}
	}
	select {
	case r := <-req.done:
		req.release()
		return r
	case <-ctx.Done():
		// The write may still happen; the caller reports the timeout, as
		// kube-apiserver does when etcd is slow. The batcher still answers
		// on req.done, so req is not reused.
		return txnResult{err: ctx.Err()}
	}
}

// txnRequests holds requests (and their channels) whose answer has been
// received: the batcher answers each request it takes exactly once.
var txnRequests = sync.Pool{New: func() any { return &txnRequest{done: make(chan txnResult, 1)} }}

func (r *txnRequest) release() {
	*r = txnRequest{done: r.done}
	txnRequests.Put(r)
}

func (b *batcher) run(ctx context.Context) {
	slots := make(chan struct{}, maxInFlight)
	var carry []*txnRequest // requests that did not fit the last batch
	for {
		// Wait for room at etcd first, so that a batch takes everything
		// that queued up meanwhile.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			b.fail(carry, ctx.Err())
			b.drain(ctx.Err())
			return
		}
		var batch []*txnRequest
		if len(carry) > 0 {
			batch, carry = carry, nil
		} else {
			select {
			case <-ctx.Done():
				b.drain(ctx.Err())
				return
			case r := <-b.queue:
				batch = append(batch, r)
			}
		}
		// A request joins the batch unless it writes a key the batch
		// already writes, or the batch is full (by count or by size; a lone
		// write always goes); then it waits for the next batch.
		pending := batch
		batch = make([]*txnRequest, 0, len(pending))
		keys := make(map[string]bool, len(pending))
		size := 0
		add := func(r *txnRequest) {
			n := len(r.key) + len(r.then.ValueBytes())
			if keys[r.key] || len(batch) >= b.maxBatch || len(batch) > 0 && size+n > maxBatchBytes {
				carry = append(carry, r)
				return
			}
			keys[r.key] = true
			size += n
			batch = append(batch, r)
		}
		for _, r := range pending {
			add(r)
		}
		full := func() bool { return len(batch) >= b.maxBatch || size >= maxBatchBytes }
		if b.delay > 0 && !full() {
			// batch[0] is the oldest: what was carried over comes first.
			if wait := b.delay - b.clock.Since(batch[0].queued); wait > 0 {
				t := b.clock.NewTimer(wait)
			linger:
				for !full() {
					select {
					case r := <-b.queue:
						add(r)
					case <-t.C():
						break linger
					case <-ctx.Done():
						break linger
					}
				}
				t.Stop()
			}
		}
		// Whatever else is queued goes too, up to the limits.
	fill:
		for !full() {
			select {
			case r := <-b.queue:
				add(r)
			default:
				break fill
			}
		}
		go func() {
			defer func() { <-slots }()
			stack.Grow() // etcd's in-process call runs deep
			b.commit(batch)
		}()
	}
}

func (b *batcher) fail(reqs []*txnRequest, err error) {
	for _, r := range reqs {
		r.done <- txnResult{err: err}
	}
}

func (b *batcher) drain(err error) {
	for {
		select {
		case r := <-b.queue:
			r.done <- txnResult{err: err}
		default:
			return
		}
	}
}

func (b *batcher) commit(batch []*txnRequest) {
	// Drop requests whose caller gave up before the batch went out.
	live := batch[:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- txnResult{err: err}
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	batchSize.Observe(float64(len(live)))
	if len(live) == 1 {
		r := live[0]
		resp, err := b.client.Txn(r.ctx).If(r.cmp).Then(r.then).Commit()
		r.done <- single(resp, err)
		return
	}
	// Each nested transaction's compare and op are a slice of one, cut
	// from one array each for the whole batch.
	ops := make([]clientv3.Op, len(live))
	cmps := make([]clientv3.Cmp, len(live))
	thens := make([]clientv3.Op, len(live))
	for i, r := range live {
		cmps[i], thens[i] = r.cmp, r.then
		ops[i] = clientv3.OpTxn(cmps[i:i+1:i+1], thens[i:i+1:i+1], nil)
	}
	resp, err := b.client.Txn(context.Background()).Then(ops...).Commit()
	if err != nil {
		for _, r := range live {
			r.done <- txnResult{err: err}
		}
		return
	}
	for i, r := range live {
		nested := resp.Responses[i].GetResponseTxn()
		if nested == nil {
			r.done <- txnResult{err: errors.New("etcd returned no nested transaction response")}
			continue
		}
		r.done <- txnResult{succeeded: nested.Succeeded, rev: resp.Header.Revision}
	}
}

func single(resp *clientv3.TxnResponse, err error) txnResult {
	if err != nil {
		return txnResult{err: err}
	}
	return txnResult{succeeded: resp.Succeeded, rev: resp.Header.Revision}
}
