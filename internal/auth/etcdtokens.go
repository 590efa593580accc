package auth

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdTokenStoreKey is the key below the etcd prefix (--etcd-prefix)
// that holds the token store that servers sharing an etcd share: the same
// JSON document as the file, tokens.json.
const EtcdTokenStoreKey = "leasehold.io/tokens"

// etcdTokenTimeout bounds each read and write of the store in etcd.
const etcdTokenTimeout = 5 * time.Second

// EtcdTokenSource is the token store kept in etcd under a prefix, for
// servers on one etcd cluster to share. Its version is the key's
// revision.
type EtcdTokenSource struct {
	KV clientv3.KV
	// Prefix is the servers' --etcd-prefix.
	Prefix string
}

var _ TokenSource = EtcdTokenSource{}

func (e EtcdTokenSource) key() string { return path.Join(e.Prefix, EtcdTokenStoreKey) }

func (e EtcdTokenSource) String() string { return "etcd:" + e.key() }

// Load implements TokenSource with a linearizable read, so that a token
// written a moment ago is seen.
func (e EtcdTokenSource) Load(ctx context.Context, since string) ([]StoredToken, string, bool, error) {
	entries, rev, err := e.read(ctx)
	if err != nil {
		return nil, "", false, err
	}
	version := strconv.FormatInt(rev, 10)
	if version == since {
		return nil, since, false, nil
	}
	return entries, version, true, nil
}

// read returns the entries and the key's modification revision (0 when
// the key is absent: an empty store).
func (e EtcdTokenSource) read(ctx context.Context) ([]StoredToken, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, etcdTokenTimeout)
	defer cancel()
	resp, err := e.KV.Get(ctx, e.key())
	if err != nil {
		return nil, 0, fmt.Errorf("reading the token store %s: %w", e.String(), err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	kv := resp.Kvs[0]
	entries, err := parseTokenStore(e.String(), kv.Value)
	return entries, kv.ModRevision, err
}

// Entries returns the store's entries.
func (e EtcdTokenSource) Entries(ctx context.Context) ([]StoredToken, error) {
	entries, _, err := e.read(ctx)
	return entries, err
}

// errStoreChanged is a write that lost a race with another.
var errStoreChanged = errors.New("token store changed meanwhile")

// Update changes the store with change, as UpdateTokenStore does the
// file: a write that another has overtaken since its read is done again
// on what that one left, so concurrent `leasehold token` runs on any
// machine lose none of each other's changes.
func (e EtcdTokenSource) Update(ctx context.Context, change func([]StoredToken) ([]StoredToken, error)) error {
	for {
		err := e.update(ctx, change)
		if !errors.Is(err, errStoreChanged) {
			return err
		}
	}
}

func (e EtcdTokenSource) update(ctx context.Context, change func([]StoredToken) ([]StoredToken, error)) error {
	cur, rev, err := e.read(ctx)
	if err != nil {
		return err
	}
	data, err := changeTokenStore(cur, change)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, etcdTokenTimeout)
	defer cancel()
	resp, err := e.KV.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(e.key()), "=", rev)).Then(clientv3.OpPut(e.key(), string(data))).Commit()
	switch {
	case err != nil:
		return fmt.Errorf("writing the token store %s: %w", e.String(), err)
	case !resp.Succeeded:
		return errStoreChanged
	}
	return nil
}
