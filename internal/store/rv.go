package store

import clientv3 "go.etcd.io/etcd/client/v3"

// A resourceVersion names one change, finer than an etcd revision. Group
// commit writes many objects in one etcd transaction, so they share its
// revision, where kube-apiserver gives every change a revision of its own.
// A client resumes a watch after the resourceVersion of the last event it
// saw; were that the revision, a watch cut off in the middle of one (a
// network cut, a client's own deadline) would resume without the rest of
// it.
//
// So the change at place n among a kind's changes in revision r has the
// resourceVersion r*rvPerRevision + n, and the state after all of r (a
// list's, a bookmark's, a watch's initial state) r*rvPerRevision +
// rvPerRevision - 1. In decimal the last three digits are the place: the
// changes of revision 5123 are 5123000, 5123001, ..., and its end 5123999.
// The store works in resourceVersions throughout and speaks revisions to
// etcd alone.
//
// Places follow etcd's order of a transaction's changes. Group commit
// gives each put of a kind in a batch its index among the batch's writes
// of that kind, and stores it with the value (appendPlace), so that every
// read of that version, from etcd or a watch, on any server, before or
// after a restart, gives the same resourceVersion; a deletion, which
// stores nothing, takes the place after its kind's previous change in the
// revision (nextPlace), which every watch of the kind can tell. A write
// whose compare fails leaves its place unused. A value stored without a
// place (by a write alone in its transaction, or before places were kept)
// is at place 0.
const rvPerRevision = 1000

// MaxChangesPerRevision is the most changes of one kind that one revision
// can hold: the bound on group commit's batch.
const MaxChangesPerRevision = rvPerRevision - 1

// changeRV is the resourceVersion of the n-th change of a kind in revision
// rev.
func changeRV(rev int64, n int) int64 { return rev*rvPerRevision + int64(n) }

// revisionRV is the resourceVersion of the state after all of revision rev.
func revisionRV(rev int64) int64 { return rev*rvPerRevision + rvPerRevision - 1 }

// revisionOf is the etcd revision of resourceVersion rv.
func revisionOf(rv int64) int64 { return rv / rvPerRevision }

// nextPlace is the revision and place of ev, a change of a kind that a
// watch of the whole kind delivers after the change at place last of
// revision rev: a put's place is the one stored with it (group commit
// stores it, appendPlace), a deletion's the place after the kind's
// previous change in the same revision, as group commit answers it.
func nextPlace(ev *clientv3.Event, rev int64, last int) (int64, int) {
	if ev.Type == clientv3.EventTypePut {
		return ev.Kv.ModRevision, storedPlace(ev.Kv.Value)
	}
	if ev.Kv.ModRevision != rev {
		return ev.Kv.ModRevision, 0
	}
	return rev, last + 1
}
