package store

import (
	"context"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Objects of a kind with a TTL (Events, as kube-apiserver's --event-ttl) are
// written with an etcd lease attached, so etcd deletes them ttl after their
// last write; the watch cache then sees an ordinary DELETE. Granting a lease
// per write would cost one more raft round per write and leave etcd one
// lease per object, so writes share leases as kube-apiserver's do: a lease is
// granted for ttl plus a reuse window (5 % of ttl, at most a minute), and
// later writes take it while it still outlives their own ttl, for at most
// leaseMaxObjects objects. An object may so live up to the window longer
// than ttl, never shorter. After an etcd leader change or restart etcd
// extends every lease by its full TTL, so objects then live longer too.

const (
	leaseReuseMax     = time.Minute
	leaseReusePercent = 5
	// leaseMaxObjects bounds how many keys one lease deletes when it
	// expires, so no single expiry is one huge transaction.
	leaseMaxObjects = 1000
)

// ttlLeases hands out the lease a write of a kind with a TTL attaches.
type ttlLeases struct {
	s   *Store
	ttl time.Duration

	mu       sync.Mutex
	id       clientv3.LeaseID
	expires  time.Time
	attached int
}

// SetTTL gives the kind's objects a time to live: every create and update
// from then on attaches an etcd lease that expires ttl (and up to a minute
// more) after the write. Call it before the store serves writes.
func (k *Kind) SetTTL(ttl time.Duration) {
	if ttl <= 0 {
		k.ttl = nil
		return
	}
	k.ttl = &ttlLeases{s: k.s, ttl: ttl}
}

// leaseFor returns the etcd lease a write attaches: the kind's current
// one if it has a TTL, else 0 (none).
func (k *Kind) leaseFor(ctx context.Context) (int64, error) {
	if k.ttl == nil {
		return 0, nil
	}
	id, err := k.ttl.lease(ctx)
	return int64(id), err
}

// lease returns a lease that expires no sooner than ttl from now, granting
// a new one when the current one would expire too soon, too late, or has
// enough objects.
func (l *ttlLeases) lease(ctx context.Context) (clientv3.LeaseID, error) {
	reuse := min(l.ttl*leaseReusePercent/100, leaseReuseMax)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.s.cfg.Clock.Now()
	if l.id != 0 && l.attached < leaseMaxObjects &&
		l.expires.After(now.Add(l.ttl)) && !l.expires.After(now.Add(l.ttl+reuse)) {
		l.attached++
		return l.id, nil
	}
	resp, err := l.s.client.Grant(ctx, int64(math.Ceil((l.ttl + reuse).Seconds())))
	if err != nil {
		return 0, err
	}
	// etcd may grant more than asked (its minimum TTL); the lease expires
	// when etcd says.
	l.id, l.expires, l.attached = resp.ID, now.Add(time.Duration(resp.TTL)*time.Second), 1
	return l.id, nil
}

// failed forgets the current lease when a write failed because etcd no
// longer has it (revoked behind leasehold's back, or a restored etcd), so
// the next write gets a new one. etcd refuses the whole transaction then,
// so the other writes of that group commit fail with it, once.
func (k *Kind) failed(err error) {
	if k.ttl == nil || err == nil || rpctypes.Error(err) != rpctypes.ErrLeaseNotFound {
		return
	}
	k.ttl.mu.Lock()
	k.ttl.id = 0
	k.ttl.mu.Unlock()
}
