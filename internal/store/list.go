package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ListOptions select what List returns.
type ListOptions struct {
	// Namespace restricts to one namespace; "" is all.
	Namespace string
	// ResourceVersion and Match follow Kubernetes' list semantics: "" is a
	// fresh consistent read, "0" any cached state, "N" state at least as new
	// as N (NotOlderThan, served from the cache) or exactly N (Exact, or the
	// legacy form: N with a limit; read from etcd).
	ResourceVersion string
	Match           metav1.ResourceVersionMatch
	// Limit and Continue paginate; every page of a list is read at the
	// revision of its first, from the watch cache's snapshot of the list
	// while it keeps one, else from etcd.
	Limit    int64
	Continue string
	// Filter keeps an object when it returns true; nil keeps all.
	Filter func(obj runtime.Object) bool
}

// ListResult is one page.
type ListResult struct {
	Items              []runtime.Object
	ResourceVersion    int64
	Continue           string
	RemainingItemCount *int64
}

// ErrInvalidContinue: the continue token cannot be decoded.
var ErrInvalidContinue = errors.New("invalid continue token")

// continueToken is the opaque "continue" value: the resourceVersion of the
// first page and the key to start after, relative to the kind's prefix.
type continueToken struct {
	APIVersion      string `json:"v"`
	ResourceVersion int64  `json:"rv"`
	Start           string `json:"start"`
}

func encodeContinue(rv int64, start string) string {
	b, _ := json.Marshal(continueToken{APIVersion: "meta.k8s.io/v1", ResourceVersion: rv, Start: start})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(s string) (continueToken, error) {
	var t continueToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return t, fmt.Errorf("%w: continue key is not valid: %v", ErrInvalidContinue, err)
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return t, fmt.Errorf("%w: continue key is not valid: %v", ErrInvalidContinue, err)
	}
	// kube-apiserver's words for each (k8s.io/apiserver/pkg/storage).
	switch {
	case t.APIVersion != "meta.k8s.io/v1":
		return t, fmt.Errorf("%w: continue key is not valid: server does not recognize this encoded version %s", ErrInvalidContinue, t.APIVersion)
	case t.ResourceVersion <= 0:
		return t, fmt.Errorf("%w: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)", ErrInvalidContinue)
	case strings.Contains(t.Start, ".."):
		return t, fmt.Errorf("%w: continue key is not valid: %s", ErrInvalidContinue, t.Start)
	}
	return t, nil
}

// List returns the objects selected by opts.
func (k *Kind) List(ctx context.Context, opts ListOptions) (*ListResult, error) {
	if opts.Continue != "" {
		t, err := decodeContinue(opts.Continue)
		if err != nil {
			return nil, err
		}
		start := k.prefix + t.Start
		if !strings.HasPrefix(start, k.Prefix(opts.Namespace)) {
			return nil, fmt.Errorf("%w: it continues a list of another namespace", ErrInvalidContinue)
		}
		if c := k.filledCache(); c != nil {
			if res, ok := c.continueList(opts, t.ResourceVersion, start); ok {
				return res, nil
			}
		}
		return k.listEtcd(ctx, opts, t.ResourceVersion, start)
	}
	switch rv := opts.ResourceVersion; {
	case rv == "":
		c := k.filledCache()
		if c == nil {
			return k.listEtcd(ctx, opts, 0, k.Prefix(opts.Namespace))
		}
		cur, err := k.s.CurrentRevision(ctx)
		if err != nil {
			return nil, err
		}
		var res *ListResult
		if opts.Limit > 0 {
			res, err = c.listPaged(ctx, opts, revisionRV(cur))
		} else {
			res, err = c.list(ctx, opts, revisionRV(cur))
		}
		if errors.Is(err, ErrTooLargeResourceVersion) {
			// The cache has not caught up with etcd within waitTimeout:
			// read etcd, as kube-apiserver does when its cache lags.
			return k.listEtcd(ctx, opts, 0, k.Prefix(opts.Namespace))
		}
		return res, err
	case rv == "0":
		return k.listNotOlderThan(ctx, opts, 0)
	default:
		n, err := ParseResourceVersion(rv)
		if err != nil {
			return nil, err
		}
		if opts.Match == metav1.ResourceVersionMatchExact || (opts.Match == "" && opts.Limit > 0) {
			return k.listEtcd(ctx, opts, n, k.Prefix(opts.Namespace))
		}
		return k.listNotOlderThan(ctx, opts, n)
	}
}

// listNotOlderThan serves a list at a revision no older than minRV: from
// the watch cache, or, for a kind without one or whose cache is still
// filling, from etcd at the latest revision, as kube-apiserver does.
func (k *Kind) listNotOlderThan(ctx context.Context, opts ListOptions, minRV int64) (*ListResult, error) {
	if c := k.filledCache(); c != nil {
		if opts.Limit > 0 && opts.ResourceVersion != "0" {
			// kube-apiserver's cache ignores a limit only at "0".
			return c.listPaged(ctx, opts, minRV)
		}
		return c.list(ctx, opts, minRV)
	}
	res, err := k.listEtcd(ctx, opts, 0, k.Prefix(opts.Namespace))
	if err != nil {
		return nil, err
	}
	if res.ResourceVersion < minRV {
		return nil, tooLargeResourceVersion(minRV, res.ResourceVersion)
	}
	return res, nil
}

// listEtcd reads one page from etcd at resourceVersion rv (0: the latest),
// starting at key start, and answers it at rv. The state at a change's
// resourceVersion holds the rest of its revision as well: etcd keeps no
// state in between, and a watch from rv repeats those changes at worst.
//
// etcd counts every key left in the range to answer each read, limit or
// not, so a list read from etcd a page at a time walked its range once per
// page. A page of a list read in pages (a limit under etcdBatch) therefore
// asks etcd for readAhead pages' worth of keys, and keeps those it does not
// return, undecoded, for the next page (see etcdRest).
func (k *Kind) listEtcd(ctx context.Context, opts ListOptions, rv int64, start string) (*ListResult, error) {
	rev := revisionOf(rv)
	if rv > 0 {
		rev = max(rev, 1) // etcd reads revision 0 as the latest
	}
	prefix := k.Prefix(opts.Namespace)
	end := clientv3.GetPrefixRangeEnd(prefix)
	res := &ListResult{}
	batch := int64(etcdBatch)
	if opts.Limit > 0 {
		batch = min(readAhead*opts.Limit, etcdBatch)
	}
	if opts.Filter != nil && batch < 100 {
		batch = 100
	}
	began := k.s.cfg.Clock.Now()
	defer k.observe(opList, began)
	// kvs are the keys from start on, in order; count is how many the
	// range holds from kvs[0] on, and more whether etcd has keys beyond
	// the last of kvs.
	var kvs []*mvccpb.KeyValue
	var count int64
	more := true
	if rev > 0 {
		if r, ok := k.rests.take(restKey{rv: rev, prefix: prefix, from: start}); ok {
			kvs, count, more = r.kvs, r.count, r.more
		}
	}
	for {
		if len(kvs) == 0 {
			if !more {
				res.ResourceVersion = rv
				return res, nil
			}
			getOpts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(batch)}
			if rev > 0 {
				getOpts = append(getOpts, clientv3.WithRev(rev))
			}
			resp, err := k.s.client.Get(ctx, start, getOpts...)
			if err != nil {
				return nil, mapEtcdError(err)
			}
			if rev == 0 {
				rev, rv = resp.Header.Revision, revisionRV(resp.Header.Revision)
			}
			kvs, count, more = resp.Kvs, resp.Count, resp.More
			if len(kvs) == 0 {
				more = false
				continue
			}
		}
		for i, kv := range kvs {
			obj, err := k.decode(kv)
			if err != nil {
				return nil, err
			}
			if opts.Filter != nil && !opts.Filter(obj) {
				continue
			}
			res.Items = append(res.Items, obj)
			if opts.Limit > 0 && int64(len(res.Items)) == opts.Limit {
				if more || i < len(kvs)-1 {
					next := string(kv.Key) + "\x00"
					res.Continue = encodeContinue(rv, strings.TrimPrefix(next, k.prefix))
					if opts.Filter == nil {
						remaining := count - int64(i) - 1
						res.RemainingItemCount = &remaining
					}
					if i < len(kvs)-1 {
						k.rests.keep(restKey{rv: rev, prefix: prefix, from: next}, &etcdRest{
							kvs: kvs[i+1:], count: count - int64(i) - 1, more: more,
						})
					}
				}
				res.ResourceVersion = rv
				return res, nil
			}
		}
		start = string(kvs[len(kvs)-1].Key) + "\x00"
		kvs = nil
	}
}

// etcdBatch is the most keys one read from etcd asks for; readAhead is
// how many pages' worth of keys a page read from etcd asks for.
const (
	etcdBatch = 10000
	readAhead = 4
)

// etcdRest is what a read from etcd for a page of a list returned beyond
// the page: the next keys of the range at the list's revision, undecoded,
// kept for the page that continues from there. A page takes it (no other
// reader can), and keeps what it does not return in turn. Like the watch
// cache's snapshots, a rest goes listSnapshotIdle after it was kept, and a
// kind keeps at most maxListSnapshots; a page that finds none reads etcd.
// At readAhead 4, a list of 100 000 Nodes in pages of 500 reads etcd 50
// times instead of 200, and holds at most 1 500 undecoded Nodes between
// two pages. (At 10, a start of a server that serves Nodes from etcd
// alone spent a little less CPU and peaked 60 MiB higher.)
type etcdRest struct {
	kvs   []*mvccpb.KeyValue
	count int64 // keys in the range from kvs[0] on
	more  bool  // etcd has keys beyond the last of kvs
}

// restKey names the page a rest is kept for: the list's revision and key
// range, and the key the page starts at. Lists read side by side, as two
// controllers' feeds at a start, each keep their own.
type restKey struct {
	rv     int64
	prefix string
	from   string
}

// waitTimeout bounds how long a read waits for the cache to reach a
// revision before answering "too large resource version", as Kubernetes does
// (a consistent list, which names no revision, reads etcd instead).
const waitTimeout = 3 * time.Second
