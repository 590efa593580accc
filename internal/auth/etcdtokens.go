package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/mirror"
	"golang.org/x/sync/singleflight"
	"k8s.io/utils/clock"
)

// Tokens kept in etcd, for servers that share an etcd to share them: one
// key per token below the servers' --etcd-prefix,
// PREFIX/leasehold.io/tokens/SHA256 (the token's digest, in hex), holding
// its StoredToken as JSON. One key each, not one document for all, so that
// a fleet may have a token per machine: etcd refuses a value of more than
// 1.5 MiB by default, some 5 000 entries.

// etcdTokenTimeout bounds each read and write of one token in etcd.
const etcdTokenTimeout = 5 * time.Second

// etcdTokensTimeout bounds a read of all the tokens (20 000 took 0.28 s).
const etcdTokensTimeout = 30 * time.Second

// EtcdTokenStore reads and changes the tokens kept in etcd, for
// `leasehold token --etcd-servers`.
type EtcdTokenStore struct {
	Client *clientv3.Client
	// Prefix is the servers' --etcd-prefix.
	Prefix string
}

// keys is the prefix of every token's key.
func (e EtcdTokenStore) keys() string { return path.Join(e.Prefix, "leasehold.io", "tokens") + "/" }

// String names the store in logs and errors.
func (e EtcdTokenStore) String() string { return "etcd:" + e.keys() }

func (e EtcdTokenStore) key(sha string) string { return e.keys() + sha }

// ErrTokenExists is a token added twice.
var ErrTokenExists = errors.New("a token with that digest is stored already")

// Add stores entry, failing with ErrTokenExists if its token is stored
// already.
func (e EtcdTokenStore) Add(ctx context.Context, entry StoredToken) error {
	data, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, etcdTokenTimeout)
	defer cancel()
	key := e.key(entry.SHA256)
	resp, err := e.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(data))).Commit()
	switch {
	case err != nil:
		return fmt.Errorf("writing to %s: %w", e, err)
	case !resp.Succeeded:
		return ErrTokenExists
	}
	return nil
}

// Entries returns every stored token, in digest order, and the revision
// they were read at. An entry that does not parse is an error.
func (e EtcdTokenStore) Entries(ctx context.Context) ([]StoredToken, int64, error) {
	var out []StoredToken
	var rev int64
	err := e.each(ctx, func(sha string, value []byte, _ int64) error {
		entry, err := parseEtcdToken(sha, value)
		if err != nil {
			return err
		}
		out = append(out, entry)
		return nil
	}, &rev)
	return out, rev, err
}

// each calls f with every stored token's digest, value and modification
// revision, reading them in pages at one revision (etcd's mirror syncer),
// which it sets *rev to.
func (e EtcdTokenStore) each(ctx context.Context, f func(sha string, value []byte, modRev int64) error, rev *int64) error {
	// Also ends the syncer's reads when f stops early.
	ctx, cancel := context.WithTimeout(ctx, etcdTokensTimeout)
	defer cancel()
	keys := e.keys()
	// The revision first, for the caller to watch from: the syncer keeps
	// the one it reads at to itself.
	resp, err := e.Client.Get(ctx, keys, clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("reading %s: %w", e, err)
	}
	*rev = resp.Header.Revision
	pages, errs := mirror.NewSyncer(e.Client, keys, *rev).SyncBase(ctx)
	for page := range pages {
		for _, kv := range page.Kvs {
			if err := f(strings.TrimPrefix(string(kv.Key), keys), kv.Value, kv.ModRevision); err != nil {
				return err
			}
		}
	}
	if err := <-errs; err != nil {
		return fmt.Errorf("reading %s: %w", e, err)
	}
	return nil
}

// Remove deletes every stored token that match selects, and returns how
// many it deleted. A token changed since it was read is left alone.
func (e EtcdTokenStore) Remove(ctx context.Context, match func(StoredToken) bool) (int, error) {
	type doomed struct {
		key string
		rev int64
	}
	var gone []doomed
	var rev int64
	if err := e.each(ctx, func(sha string, value []byte, modRev int64) error {
		entry, err := parseEtcdToken(sha, value)
		if err == nil && match(entry) {
			gone = append(gone, doomed{e.key(sha), modRev})
		}
		return nil
	}, &rev); err != nil {
		return 0, err
	}
	removed := 0
	for _, d := range gone {
		dctx, cancel := context.WithTimeout(ctx, etcdTokenTimeout)
		resp, err := e.Client.Txn(dctx).If(clientv3.Compare(clientv3.ModRevision(d.key), "=", d.rev)).Then(clientv3.OpDelete(d.key)).Commit()
		cancel()
		if err != nil {
			return removed, fmt.Errorf("deleting from %s: %w", e, err)
		}
		if resp.Succeeded {
			removed++
		}
	}
	return removed, nil
}

// parseEtcdToken decodes the entry stored under the digest sha.
func parseEtcdToken(sha string, value []byte) (StoredToken, error) {
	var entry StoredToken
	if err := json.Unmarshal(value, &entry); err != nil {
		return entry, fmt.Errorf("token %s in etcd: %w", sha, err)
	}
	if entry.SHA256 != sha || entry.User == "" {
		return entry, fmt.Errorf("token %s in etcd is corrupt", sha)
	}
	return entry, nil
}

// digestOf is the hex digest a token's key is named by.
func digestOf(sha string) ([sha256.Size]byte, bool) {
	b, err := hex.DecodeString(sha)
	if err != nil || len(b) != sha256.Size {
		return [sha256.Size]byte{}, false
	}
	return [sha256.Size]byte(b), true
}

// EtcdTokensConfig configures EtcdTokens.
type EtcdTokensConfig struct {
	// Client reaches the etcd. Required.
	Client *clientv3.Client
	// Prefix is the servers' --etcd-prefix. Required.
	Prefix string
	// MissInterval is the least time between the reads of etcd that
	// unknown tokens cause; default 10 ms.
	MissInterval time.Duration
	// Clock; default the real clock.
	Clock clock.WithTicker
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// EtcdTokens authenticates the tokens kept in etcd. It reads them all at
// start and follows their changes with a watch, so that a token deleted
// stops working as soon as the watch brings the deletion. A token it does
// not know makes it read that token's key before it refuses it, at most
// once every MissInterval, so that a token written a moment ago works at
// its first use.
type EtcdTokens struct {
	cfg    EtcdTokensConfig
	store  EtcdTokenStore
	tokens *Tokens

	mu sync.Mutex
	// rev is the revision the tokens are up to; a read of one token at
	// a revision no later than rev is older than what is known.
	rev int64
	// reading joins the misses of one token to one read of its key.
	reading singleflight.Group
	// missMu guards lastMiss, when an unknown token last caused a read,
	// and readErr.
	missMu   sync.Mutex
	lastMiss time.Time
	// readErr is how the last read failed, "" if it did not.
	readErr string
	// applied, when set (tests), is called with the revision the tokens
	// are up to after each change the watch brought.
	applied func(rev int64)
}

var _ Authenticator = (*EtcdTokens)(nil)

// NewEtcdTokens reads every token kept in etcd; Run then follows them.
func NewEtcdTokens(ctx context.Context, cfg EtcdTokensConfig) (*EtcdTokens, error) {
	if cfg.Client == nil || cfg.Prefix == "" {
		return nil, errors.New("etcd tokens: Client and Prefix are required")
	}
	missDefaults(&cfg.MissInterval, &cfg.Clock, &cfg.Logger)
	e := &EtcdTokens{cfg: cfg, store: EtcdTokenStore{Client: cfg.Client, Prefix: cfg.Prefix}, tokens: NewTokens()}
	e.tokens.clock = cfg.Clock
	if err := e.load(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// load reads every token, replacing those known. An entry that does not
// parse is left out, and logged.
func (e *EtcdTokens) load(ctx context.Context) error {
	var entries []StoredToken
	var rev int64
	err := e.store.each(ctx, func(sha string, value []byte, _ int64) error {
		entry, err := parseEtcdToken(sha, value)
		if _, ok := digestOf(sha); err != nil || !ok {
			e.cfg.Logger.Error("a token in etcd does not parse; it authenticates no one", "key", e.store.key(sha), "err", err)
			return nil
		}
		entries = append(entries, entry)
		return nil
	}, &rev)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.tokens.replaceEntries(entries)
	e.rev = rev
	e.mu.Unlock()
	return nil
}

// Authenticate implements Authenticator.
func (e *EtcdTokens) Authenticate(r *http.Request) (*User, bool, error) {
	u, ok, err := e.tokens.Authenticate(r)
	if !errors.Is(err, ErrInvalidToken) {
		return u, ok, err
	}
	e.checkOnMiss(r)
	return e.tokens.Authenticate(r)
}

// checkOnMiss reads the key of r's token if no miss has read one within
// MissInterval. A miss of a token whose key is being read joins that read
// instead (requests that a client sends at once with a new token); no
// other waits for anything.
func (e *EtcdTokens) checkOnMiss(r *http.Request) {
	token, _ := BearerToken(r)
	sum := sha256.Sum256([]byte(token))
	e.reading.Do(string(sum[:]), func() (any, error) {
		e.missMu.Lock()
		now := e.cfg.Clock.Now()
		limited := !e.lastMiss.IsZero() && now.Sub(e.lastMiss) < e.cfg.MissInterval
		if !limited {
			e.lastMiss = now
		}
		e.missMu.Unlock()
		if !limited {
			e.read(r.Context(), sum)
		}
		return nil, nil
	})
}

// read reads the key of the token whose digest is sum, and knows the token
// if it is there.
func (e *EtcdTokens) read(ctx context.Context, sum [sha256.Size]byte) {
	sha := hex.EncodeToString(sum[:])
	ctx, cancel := context.WithTimeout(ctx, etcdTokenTimeout)
	defer cancel()
	resp, err := e.cfg.Client.Get(ctx, e.store.key(sha))
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	e.missMu.Lock()
	if msg != e.readErr {
		// Once for as long as reads fail the same way: unknown tokens may
		// come a hundred times a second.
		e.readErr = msg
		if err != nil {
			e.cfg.Logger.Error("reading a token from etcd failed; tokens not yet known are refused", "err", err)
		}
	}
	e.missMu.Unlock()
	if err != nil {
		return
	}
	if len(resp.Kvs) == 0 {
		return
	}
	entry, err := parseEtcdToken(sha, resp.Kvs[0].Value)
	if err != nil {
		e.cfg.Logger.Error("a token in etcd does not parse; it authenticates no one", "key", e.store.key(sha), "err", err)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if resp.Header.Revision <= e.rev {
		// The watch has brought what came after this read (perhaps the
		// token's deletion).
		return
	}
	e.tokens.set(sum, entry.user(), entry.Expires)
}

// Run follows the tokens with a watch until ctx ends. When the watch
// fails (etcd compacted past it, or it was cut off) it reads every token
// again and watches from there, once a second until that works; the
// tokens known stay in force meanwhile, and a failure is logged once for
// as long as it lasts.
func (e *EtcdTokens) Run(ctx context.Context) {
	failing := ""
	for ctx.Err() == nil {
		err := e.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if err.Error() != failing {
			failing = err.Error()
			e.cfg.Logger.Error("following the tokens in etcd failed; the tokens known stay in force", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-e.cfg.Clock.After(time.Second):
		}
		if err := e.load(ctx); err != nil {
			continue
		}
		if failing != "" {
			failing = ""
			e.cfg.Logger.Info("following the tokens in etcd again", "tokens", e.tokens.len())
		}
	}
}

// watch applies the changes after e.rev until the watch ends, and says
// why it did.
func (e *EtcdTokens) watch(ctx context.Context) error {
	e.mu.Lock()
	from := e.rev + 1
	e.mu.Unlock()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range e.cfg.Client.Watch(wctx, e.store.keys(), clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := resp.Err(); err != nil {
			return err
		}
		e.mu.Lock()
		for _, ev := range resp.Events {
			sha := strings.TrimPrefix(string(ev.Kv.Key), e.store.keys())
			sum, ok := digestOf(sha)
			if !ok {
				continue
			}
			if ev.Type == clientv3.EventTypeDelete {
				e.tokens.remove(sum)
				continue
			}
			entry, err := parseEtcdToken(sha, ev.Kv.Value)
			if err != nil {
				e.tokens.remove(sum)
				e.cfg.Logger.Error("a token in etcd does not parse; it authenticates no one", "key", string(ev.Kv.Key), "err", err)
				continue
			}
			e.tokens.set(sum, entry.user(), entry.Expires)
		}
		if resp.Header.Revision > e.rev {
			e.rev = resp.Header.Revision
		}
		rev := e.rev
		e.mu.Unlock()
		if e.applied != nil {
			e.applied(rev)
		}
	}
	return errors.New("the watch ended")
}
