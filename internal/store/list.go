package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

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

// continueToken is the opaque "continue" value: the revision of the first
// page and the key to start after, relative to the kind's prefix.
type continueToken struct {
	APIVersion string `json:"v"`
	Revision   int64  `json:"rv"`
	Start      string `json:"start"`
}

func encodeContinue(rev int64, start string) string {
	b, _ := json.Marshal(continueToken{APIVersion: "meta.k8s.io/v1", Revision: rev, Start: start})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(s string) (continueToken, error) {
	var t continueToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return t, fmt.Errorf("%w: %v", ErrInvalidContinue, err)
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return t, fmt.Errorf("%w: %v", ErrInvalidContinue, err)
	}
	if t.APIVersion != "meta.k8s.io/v1" || t.Revision <= 0 || strings.Contains(t.Start, "..") {
		return t, fmt.Errorf("%w: unexpected content", ErrInvalidContinue)
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
			if res, ok := c.continueList(opts, t.Revision, start); ok {
				return res, nil
			}
		}
		return k.listEtcd(ctx, opts, t.Revision, start)
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
		if opts.Limit > 0 {
			return c.listPaged(ctx, opts, cur)
		}
		return c.list(ctx, opts, cur)
	case rv == "0":
		return k.listNotOlderThan(ctx, opts, 0)
	default:
		n, err := strconv.ParseInt(rv, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("invalid resourceVersion %q", rv)
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
		return c.list(ctx, opts, minRV)
	}
	res, err := k.listEtcd(ctx, opts, 0, k.Prefix(opts.Namespace))
	if err != nil {
		return nil, err
	}
	if res.ResourceVersion < minRV {
		return nil, ErrTooLargeResourceVersion
	}
	return res, nil
}

// listEtcd reads one page from etcd at revision rev (0: latest), starting at
// key start.
func (k *Kind) listEtcd(ctx context.Context, opts ListOptions, rev int64, start string) (*ListResult, error) {
	end := clientv3.GetPrefixRangeEnd(k.Prefix(opts.Namespace))
	res := &ListResult{}
	batch := opts.Limit
	if batch <= 0 || batch > 10000 {
		batch = 10000
	}
	if opts.Filter != nil && batch < 100 {
		batch = 100
	}
	began := k.s.cfg.Clock.Now()
	defer k.observe(opList, began)
	for {
		getOpts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(batch)}
		if rev > 0 {
			getOpts = append(getOpts, clientv3.WithRev(rev))
		}
		resp, err := k.s.client.Get(ctx, start, getOpts...)
		if err != nil {
			return nil, mapEtcdError(err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for i, kv := range resp.Kvs {
			obj, err := k.decode(kv)
			if err != nil {
				return nil, err
			}
			if opts.Filter != nil && !opts.Filter(obj) {
				continue
			}
			res.Items = append(res.Items, obj)
			if opts.Limit > 0 && int64(len(res.Items)) == opts.Limit {
				more := resp.More || i < len(resp.Kvs)-1
				if more {
					next := string(kv.Key) + "\x00"
					res.Continue = encodeContinue(rev, strings.TrimPrefix(next, k.prefix))
					if opts.Filter == nil {
						remaining := resp.Count - int64(i) - 1
						res.RemainingItemCount = &remaining
					}
				}
				res.ResourceVersion = rev
				return res, nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			res.ResourceVersion = rev
			return res, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// waitTimeout bounds how long a read waits for the cache to reach a
// revision before answering "too large resource version", as Kubernetes does.
const waitTimeout = 3 * time.Second
