package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
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
// heap, a large database): the embedded etcd takes up to 999 writes per
// transaction, an external cluster etcd's default of 100.
//
// At moderate rates batches stay small: at 333 renewals a second a commit
// carried 1.3 writes, so nearly every write paid for a raft round and an
// fsync of its own. With a commit delay (Config.CommitDelay) a batch also
// waits until its oldest write has waited that long, unless it fills
// first: the writes that arrive meanwhile share its commit. Under load the
// oldest write has usually waited that long already, behind the commit in
// flight, so the delay adds nothing there.
//
// A batch waits only when the commits of late have had company: when
// they carried, on a moving average, at least a quarter of a write besides
// their first (company). Writes from several independent writers soon
// share commits on their own, while one commits; a lone write, a client
// that writes one thing after another (its next write waits for this
// one's answer, so no wait would ever gather it), or a trickle goes at
// once. So the delay costs latency only where it saves commits.
//
// The transactions are built as etcd's own request messages and sent
// through its KV API directly: clientv3's builders copy every value and
// clone every compare three times, by reflection, on the way to the same
// messages (2 % of the server's CPU in a throughput profile).
type batcher struct {
	kv       pb.KVClient
	queue    chan *txnRequest
	maxBatch int
	delay    time.Duration
	clock    clock.Clock
	// timeout bounds a commit (0: no bound); see Config.CommitTimeout.
	timeout time.Duration

	// company is the mean number of writes a commit carried besides its
	// first, weighted towards the latest commits. Kept by run's goroutine
	// alone.
	company float64
	// written counts the writes committed: each a new version of its key
	// in etcd's history until a compaction.
	written atomic.Int64
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
	// maxStalled is how many commits past a tenth of their timeout may be
	// in flight besides the maxInFlight others.
	maxStalled = 8

	// Each batch moves company an eighth of the way to its own; a batch
	// waits when company is at least minCompany.
	companyWeight = 8
	minCompany    = 0.25
)

type txnRequest struct {
	write
	queued time.Time // set when the batcher has a delay
	ctx    context.Context
	done   chan txnResult
}

// write is one compare-and-swap of a key: if the key's compared revision is
// rev, put value (attached to lease, unless 0) or delete the key.
type write struct {
	key string
	// kind is the key prefix of the object's kind: the changes of a kind
	// in one revision are numbered, in etcd's order, for their
	// resourceVersions (rv.go).
	kind string
	// created compares the key's create revision, 0 when the key does not
	// exist; otherwise its mod revision.
	created bool
	rev     int64
	// del deletes the key instead of putting value.
	del   bool
	value []byte // not copied: the caller does not modify it
	lease int64
}

// txnResult is one write's outcome: whether its compare held, and the
// revision of the transaction. A write whose compare failed reads the key
// again itself: an else branch reading it in every transaction would be
// carried by every raft entry and every WAL record for the rare conflict.
type txnResult struct {
	succeeded bool
	rev       int64
	// place is the write's place among the changes of its kind in rev
	// (rv.go), when it succeeded.
	place int
	err   error
	// abandoned: the caller stopped waiting while the write was queued or
	// at etcd, so its value may still be read.
	abandoned bool
}

// release releases the value of the write that res answers, unless the
// write may still be reading it.
func (res txnResult) release(v *encodedValue) {
	if !res.abandoned {
		v.release()
	}
}

func newBatcher(kv pb.KVClient, maxBatch int, delay, timeout time.Duration, clk clock.Clock) *batcher {
	return &batcher{kv: kv, queue: make(chan *txnRequest, 4*maxBatch), maxBatch: maxBatch, delay: delay, timeout: timeout, clock: clk}
}

// commitError is what the writes of a commit sent within ctx are answered
// when etcd answered err: the context's own error for a call it ended.
func commitError(ctx context.Context, err error) error {
	if err != nil && context.Cause(ctx) == errCommitTimeout {
		return errCommitTimeout
	}
	return clientv3.ContextError(ctx, err)
}

// isNoSpace tells whether etcd refused a transaction because its database
// is at its quota.
func isNoSpace(err error) bool { return rpctypes.Error(err) == rpctypes.ErrNoSpace }

// errCommitTimeout is the answer to the writes of a commit that etcd did
// not answer within the batcher's timeout. They may still be committed, as
// with any timeout.
var errCommitTimeout = fmt.Errorf("etcd did not answer the commit in time: %w", context.DeadlineExceeded)

// guard runs beside a commit that holds one of slots, whose calls to etcd
// go within the context it returns: parent's, and with a timeout, one that
// also ends with errCommitTimeout at the timeout. With a timeout, once
// the commit has been in flight for a tenth of it, the commit gives its
// slot back for one of stalled (when one is free), so that the batches
// after it go. The commit calls done when it is over, which frees what it
// holds.
//
// A member of an external cluster that stops answering with its
// connections open (a frozen machine, a partition) holds every call the
// client sends it until the client's keepalive gives it up. Without the
// guard, one batch held there would hold every write behind it.
func (b *batcher) guard(parent context.Context, slots, stalled chan struct{}) (ctx context.Context, done func()) {
	if b.timeout <= 0 {
		return parent, func() { <-slots }
	}
	ctx, cancel := context.WithCancelCause(parent)
	finished := make(chan struct{})
	var mu sync.Mutex
	over, moved := false, false
	go func() {
		t := b.clock.NewTimer(b.timeout / 10)
		defer t.Stop()
		select {
		case <-finished:
			return
		case <-t.C():
		}
		mu.Lock()
		if !over {
			select {
			case stalled <- struct{}{}:
				moved = true
				<-slots
			default: // as many stalled as may be: this one keeps its slot
			}
		}
		mu.Unlock()
		t.Reset(b.timeout - b.timeout/10)
		select {
		case <-finished:
		case <-t.C():
			cancel(errCommitTimeout)
		}
	}()
	return ctx, func() {
		mu.Lock()
		over = true
		if moved {
			<-stalled
		} else {
			<-slots
		}
		mu.Unlock()
		close(finished)
		cancel(nil)
	}
}

// observe counts a batch of n writes in company.
func (b *batcher) observe(n int) {
	b.company += (float64(n-1) - b.company) / companyWeight
}

// lingers reports whether a batch should wait for company: whether the
// commits of late have had some.
func (b *batcher) lingers() bool { return b.delay > 0 && b.company >= minCompany }

// do runs w through the batcher.
func (b *batcher) do(ctx context.Context, w write) txnResult {
	req := txnRequests.Get().(*txnRequest)
	req.ctx, req.write = ctx, w
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
		// on req.done, so req is not reused, nor its value.
		return txnResult{err: ctx.Err(), abandoned: true}
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
	stalled := make(chan struct{}, maxStalled)
	var carry []*txnRequest   // requests that did not fit the last batch
	keys := map[string]bool{} // the keys the batch being gathered writes
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
		clear(keys)
		size := 0
		add := func(r *txnRequest) {
			n := len(r.key) + len(r.value)
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
		if b.lingers() && !full() {
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
		b.observe(len(batch))
		// A lone write's call ends with its caller, as it would without
		// group commit; a batch's calls go on for its other writes.
		parent := context.Background()
		if len(batch) == 1 {
			parent = batch[0].ctx
		}
		go func() {
			ctx, done := b.guard(parent, slots, stalled)
			defer done()
			stack.Grow() // etcd's in-process call runs deep
			b.commit(ctx, batch)
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

// commit sends batch to etcd within ctx (see guard).
func (b *batcher) commit(ctx context.Context, batch []*txnRequest) {
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
	m := batchMessagesPool.Get().(*batchMessages)
	defer m.release()
	ops := m.build(live)
	if len(live) == 1 {
		r := live[0]
		m.txn.Compare, m.txn.Success = ops[0].cmps[:], ops[0].ops[:]
		resp, err := b.kv.Txn(ctx, &m.txn, callOptions...)
		res := single(resp, commitError(ctx, err))
		if res.succeeded {
			b.written.Add(1)
		}
		r.done <- res
		return
	}
	// Each write is a nested transaction of its own.
	m.outer = slices.Grow(m.outer[:0], len(ops))
	for i := range ops {
		m.outer = append(m.outer, ops[i].nest())
	}
	m.txn.Success = m.outer
	resp, err := b.kv.Txn(ctx, &m.txn, callOptions...)
	if err != nil && isNoSpace(err) {
		// A full database takes deletions, which free it, but refuses a
		// transaction that puts anything, whole and before applying any of
		// it: the deletions that shared this one with puts go again on
		// their own (a batch of deletions alone is not split again).
		dels := slices.DeleteFunc(slices.Clone(live), func(r *txnRequest) bool { return !r.del })
		if len(dels) > 0 && len(dels) < len(live) {
			for _, r := range live {
				if !r.del {
					r.done <- txnResult{err: err}
				}
			}
			b.commit(ctx, dels)
			return
		}
	}
	if err != nil {
		err = commitError(ctx, err)
		for _, r := range live {
			r.done <- txnResult{err: err}
		}
		return
	}
	written := 0
	// last is the place of each kind's latest change so far.
	var last places
	for i, r := range live {
		nested := resp.Responses[i].GetResponseTxn()
		if nested == nil {
			r.done <- txnResult{err: errors.New("etcd returned no nested transaction response")}
			continue
		}
		res := txnResult{succeeded: nested.Succeeded, rev: resp.Header.Revision}
		if nested.Succeeded {
			written++
			res.place = ops[i].place
			if r.del {
				res.place = last.get(r.kind) + 1
			}
			last.set(r.kind, res.place)
		}
		r.done <- res
	}
	b.written.Add(int64(written))
}

// places holds a number for each kind of a transaction's writes: a batch
// is nearly always of one kind, or of a few.
type places []kindPlace

type kindPlace struct {
	kind string
	n    int
}

// get returns kind's number, -1 for none.
func (p places) get(kind string) int {
	for _, e := range p {
		if e.kind == kind {
			return e.n
		}
	}
	return -1
}

func (p *places) set(kind string, n int) {
	for i := range *p {
		if (*p)[i].kind == kind {
			(*p)[i].n = n
			return
		}
	}
	*p = append(*p, kindPlace{kind, n})
}

// callOptions are clientv3's defaults for its own calls: wait for a
// connection to an etcd member rather than fail at once while the client
// fails over, and its message size limits. Calls to the in-process etcd
// ignore them.
var callOptions = []grpc.CallOption{
	grpc.WaitForReady(true),
	grpc.MaxCallSendMsgSize(2 << 20),
	grpc.MaxCallRecvMsgSize(math.MaxInt32),
}

// writeOps are the messages of one write's transaction, allocated for a
// whole batch at once rather than one by one.
type writeOps struct {
	// place is the write's place among its kind's in the batch, which a
	// put stores with its value (appendPlace): as its resourceVersion's
	// place in the revision should it succeed (rv.go). A deletion, which
	// stores nothing, takes the place after its kind's last change before
	// it, as every watch numbers it.
	place   int
	cmp     pb.Compare
	modRev  pb.Compare_ModRevision
	create  pb.Compare_CreateRevision
	put     pb.PutRequest
	putOp   pb.RequestOp_RequestPut
	op      pb.RequestOp
	cmps    [1]*pb.Compare
	ops     [1]*pb.RequestOp
	txn     pb.TxnRequest
	txnOp   pb.RequestOp_RequestTxn
	outerOp pb.RequestOp
}

// batchMessages are the messages of one batch's transaction. They are
// recycled through batchMessagesPool once etcd has answered the batch: its
// KV API has marshalled them by then (into a raft entry in process, onto
// the wire over gRPC), and nothing keeps them. They were 2 % of the bytes a
// renewal allocated.
type batchMessages struct {
	ops   []writeOps // as long as its capacity; build uses the start
	used  int        // how many of ops the last build filled
	keys  []byte     // the writes' keys, which ops point into
	vals  []byte     // the values that carry a place, which ops point into
	outer []*pb.RequestOp
	txn   pb.TxnRequest
}

var batchMessagesPool = sync.Pool{New: func() any { return new(batchMessages) }}

// build fills the compare and the operation of each write. The keys share
// one buffer; so do the values that carry a place (all puts of a kind but
// its first), copied there with their place; other values are not copied.
func (m *batchMessages) build(writes []*txnRequest) []writeOps {
	if len(m.ops) < len(writes) {
		m.ops = make([]writeOps, len(writes))
	}
	m.used = len(writes)
	all := m.ops[:len(writes)]
	var count places
	n, v := 0, 0
	for i, w := range writes {
		n += len(w.key)
		place := count.get(w.kind) + 1
		count.set(w.kind, place)
		all[i].place = place
		if place > 0 && !w.del {
			v += len(w.value) + 2*binary.MaxVarintLen16
		}
	}
	m.keys = slices.Grow(m.keys[:0], n)
	m.vals = slices.Grow(m.vals[:0], v)
	for i, w := range writes {
		start := len(m.keys)
		m.keys = append(m.keys, w.key...)
		key := m.keys[start:len(m.keys):len(m.keys)]
		o := &all[i]
		o.cmp.Key, o.cmp.Result = key, pb.Compare_EQUAL
		if w.created {
			o.cmp.Target, o.create.CreateRevision = pb.Compare_CREATE, w.rev
			o.cmp.TargetUnion = &o.create
		} else {
			o.cmp.Target, o.modRev.ModRevision = pb.Compare_MOD, w.rev
			o.cmp.TargetUnion = &o.modRev
		}
		if w.del {
			o.op.Request = &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: key}}
		} else {
			value := w.value
			if o.place > 0 {
				start := len(m.vals)
				m.vals = appendPlace(append(m.vals, w.value...), o.place)
				value = m.vals[start:len(m.vals):len(m.vals)]
			}
			o.put.Key, o.put.Value, o.put.Lease = key, value, w.lease
			o.putOp.RequestPut = &o.put
			o.op.Request = &o.putOp
		}
		o.cmps[0], o.ops[0] = &o.cmp, &o.op
	}
	return all
}

// release zeroes the messages (they point at the writes' values, which
// their callers recycle in turn) and returns m to batchMessagesPool.
func (m *batchMessages) release() {
	clear(m.ops[:m.used])
	clear(m.outer)
	m.outer = m.outer[:0]
	m.txn = pb.TxnRequest{}
	m.used = 0
	batchMessagesPool.Put(m)
}

// nest returns o as a transaction nested in another: its compare and
// operation, and no else branch.
func (o *writeOps) nest() *pb.RequestOp {
	o.txn.Compare, o.txn.Success = o.cmps[:], o.ops[:]
	o.txnOp.RequestTxn = &o.txn
	o.outerOp.Request = &o.txnOp
	return &o.outerOp
}

func single(resp *pb.TxnResponse, err error) txnResult {
	if err != nil {
		return txnResult{err: err}
	}
	return txnResult{succeeded: resp.Succeeded, rev: resp.Header.Revision}
}
