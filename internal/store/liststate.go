package store

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// listState holds what paginated lists keep between their pages (the watch
// caches' snapshots, the keys read from etcd ahead of a page): at most
// maxListSnapshots entries, each dropped listSnapshotIdle after it was last
// kept or read. Store.Run drops expired entries every listSnapshotIdle, and
// so does every keep.
type listState[K comparable, V comparable] struct {
	clock   clock.PassiveClock
	mu      sync.Mutex
	entries map[K]*listEntry[V]
}

type listEntry[V any] struct {
	v    V
	used time.Time
}

func newListState[K comparable, V comparable](clk clock.PassiveClock) *listState[K, V] {
	return &listState[K, V]{clock: clk, entries: map[K]*listEntry[V]{}}
}

// keep holds v under k, unless as many entries are held as may be.
func (s *listState[K, V]) keep(k K, v V) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	if len(s.entries) < maxListSnapshots {
		s.entries[k] = &listEntry[V]{v: v, used: now}
	}
}

// read returns what is held under k, counting this as a use of it.
func (s *listState[K, V]) read(k K) (v V, ok bool) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[k]
	if e == nil || now.Sub(e.used) > listSnapshotIdle {
		delete(s.entries, k)
		return v, false
	}
	e.used = now
	return e.v, true
}

// take returns and drops what is held under k.
func (s *listState[K, V]) take(k K) (v V, ok bool) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[k]
	delete(s.entries, k)
	if e == nil || now.Sub(e.used) > listSnapshotIdle {
		return v, false
	}
	return e.v, true
}

// drop forgets k if it still holds v.
func (s *listState[K, V]) drop(k K, v V) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[k]; e != nil && e.v == v {
		delete(s.entries, k)
	}
}

// expire drops the entries unused for longer than listSnapshotIdle.
func (s *listState[K, V]) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(s.clock.Now())
}

func (s *listState[K, V]) expireLocked(now time.Time) {
	for k, e := range s.entries {
		if now.Sub(e.used) > listSnapshotIdle {
			delete(s.entries, k)
		}
	}
}
