// Package embedded runs a single-member etcd inside the leasehold process,
// with its data in a directory of the caller's choosing. `leasehold serve`
// uses it by default and the tests use it for real storage; `leasehold etcd`
// uses it to run one member of an external cluster.
//
// The member listens only on loopback ports the kernel picks (so parallel
// tests never collide) unless the caller names URLs. Other processes reach
// it there; the process that runs it talks to it through etcd's in-process
// client, which calls the server's gRPC handlers directly: the same client
// API as for an external cluster, without serializing every request and
// response through a socket.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
)

// Config says where and how to run the member. Zero values mean defaults.
type Config struct {
	// Dir holds the member's data (created if missing). Required.
	Dir string
	// Name is the member name; default "leasehold".
	Name string
	// ClientURLs and PeerURLs are where the member listens; default one
	// loopback URL each with a kernel-chosen port.
	ClientURLs, PeerURLs []url.URL
	// AdvertiseClientURLs and AdvertisePeerURLs are the URLs the member
	// gives the others and clients for itself; default ClientURLs and
	// PeerURLs.
	AdvertiseClientURLs, AdvertisePeerURLs []url.URL
	// ClientTLS and PeerTLS are the member's certificates and the CAs it
	// trusts, for its client and its peer URLs (which are then https);
	// their ClientCertAuth requires a certificate of whoever connects.
	// Empty: plain HTTP.
	ClientTLS, PeerTLS transport.TLSInfo
	// InitialCluster lists the members for a new multi-member cluster
	// ("a=http://10.0.0.1:2380,b=…"); default this member alone.
	InitialCluster string
	// ClusterState is etcd's --initial-cluster-state: "new" (the default)
	// bootstraps a cluster of InitialCluster's members; "existing" joins
	// the running cluster that InitialCluster describes, which must
	// already list this member (a member added with etcd's MemberAdd).
	// Either is read only on a first start, with an empty Dir.
	ClusterState string
	// QuotaBackendBytes is the database size limit; default
	// DefaultQuotaBackendBytes.
	QuotaBackendBytes int64
	// MaxRequestBytes is the largest request etcd accepts; default 4 MiB,
	// above the API server's 3 MiB body limit.
	MaxRequestBytes uint
	// CatchUpEntries is etcd's --snapshot-catchup-entries: the raft entries
	// the member keeps in memory after each snapshot for followers that
	// fall behind. Default SingleMemberCatchUpEntries for a member alone,
	// ClusterCatchUpEntries in a cluster of several.
	CatchUpEntries uint64
	// StartTimeout bounds the wait for the member to be ready; default 60 s.
	StartTimeout time.Duration
	// Logger receives etcd's warnings and errors; default slog.Default().
	Logger *slog.Logger
}

// DefaultQuotaBackendBytes is the member's database size limit unless
// Config says otherwise: 8 GiB, the largest etcd recommends (its own
// default is 2 GiB).
const DefaultQuotaBackendBytes = 8 << 30

// SingleMemberCatchUpEntries is etcd's --snapshot-catchup-entries for a
// member alone in its cluster: the raft entries it keeps in memory after
// each snapshot, which etcd 3.7 takes every 100 entries. The member holds
// between this many and this many plus 100 entries; with 1 (etcd replaces
// 0 with its default), 1 to 101 of them.
const SingleMemberCatchUpEntries = 1

// ClusterCatchUpEntries is etcd's --snapshot-catchup-entries for a member
// of a cluster of several. etcd's default, 5 000, was sized for entries of
// one request each, as kube-apiserver writes them. A leasehold server's
// group commit puts up to 100 writes in one entry, so under load 5 000
// entries hold hundreds of thousands of writes: a 100 000-node fleet's
// whole registration. With 1 000, a member holds at most a fifth of that,
// and still lets a follower catch up from the leader's log after a lag of
// some seconds at thousands of renewals a second; one further behind is
// sent a snapshot.
const ClusterCatchUpEntries = 1000

// SingleMemberWALFiles is etcd's --max-wals for a member alone in its
// cluster (etcd's default is 5).
const SingleMemberWALFiles = 2

// SingleMemberSnapshotCount is etcd's --snapshot-count for a member alone in
// its cluster (etcd's default is 10 000): a start reads the WAL from the last
// snapshot on, and replays the entries after it.
const SingleMemberSnapshotCount = 1000

// Raft timing of a member alone in its cluster, in milliseconds (etcd's
// defaults are 100 and 1 000). It has no peer to send heartbeats to, and it
// campaigns on start only after its randomized election timeout, less the
// ticks etcd fast-forwards: with the defaults, 100 ms to 1 s of every start
// spent waiting for nobody's vote.
const (
	SingleMemberTickMs     = 10
	SingleMemberElectionMs = 100
)

// MaxTxnOps is the member's limit of operations in one transaction (etcd's
// --max-txn-ops, 128 by default): room for MaxBatch nested writes.
const MaxTxnOps = 1024

// MaxBatch is the group-commit batch for this member (store.Config.MaxBatch):
// one transaction of this many nested writes, each of a compare and a put
// or get, stays within MaxTxnOps; and a revision holds at most 999 changes
// of a kind, each with a resourceVersion of its own
// (store.MaxChangesPerRevision).
const MaxBatch = 999

// Etcd is a running member.
type Etcd struct {
	etcd   *embed.Etcd
	log    *zapSlog
	client *clientv3.Client
	kv     pb.KVClient
	quota  int64 // the database's size limit in bytes
	lock   *fileutil.LockedFile
	tls    bool // clients reach it over TLS
}

// defaultName is the member's name unless Config.Name gives one.
const defaultName = "leasehold"

// LockFile, in the member's directory, is locked while a member runs
// there. etcd itself waits for its database's lock without end, saying so
// only in a message of its info level: a second process started on the
// directory hung, even through SIGTERM.
const LockFile = "leasehold.lock"

// Start starts the member and waits until it serves.
func Start(cfg Config) (*Etcd, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedded etcd: Dir is required")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	lock, err := fileutil.TryLockFile(filepath.Join(cfg.Dir, LockFile), os.O_WRONLY|os.O_CREATE, 0o600)
	if errors.Is(err, fileutil.ErrLocked) {
		return nil, fmt.Errorf("embedded etcd: %s is in use by another process; stop it, or give this one a directory of its own", cfg.Dir)
	}
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	started := false
	defer func() {
		if !started {
			lock.Close()
		}
	}()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	ec := embed.NewConfig()
	ec.Dir = filepath.Clean(cfg.Dir)
	ec.Name = orDefault(cfg.Name, defaultName)
	ec.ListenClientUrls = orURLs(cfg.ClientURLs, loopback)
	ec.AdvertiseClientUrls = orURLs(cfg.AdvertiseClientURLs, ec.ListenClientUrls...)
	ec.ListenPeerUrls = orURLs(cfg.PeerURLs, loopback)
	ec.AdvertisePeerUrls = orURLs(cfg.AdvertisePeerURLs, ec.ListenPeerUrls...)
	ec.ClientTLSInfo, ec.PeerTLSInfo = cfg.ClientTLS, cfg.PeerTLS
	ec.InitialCluster = cfg.InitialCluster
	if ec.InitialCluster == "" {
		ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	}
	switch cfg.ClusterState {
	case "", embed.ClusterStateFlagNew:
	case embed.ClusterStateFlagExisting:
		ec.ClusterState = embed.ClusterStateFlagExisting
	default:
		return nil, fmt.Errorf("embedded etcd: cluster state %q is neither %q nor %q", cfg.ClusterState, embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting)
	}
	ec.QuotaBackendBytes = cfg.QuotaBackendBytes
	if ec.QuotaBackendBytes == 0 {
		ec.QuotaBackendBytes = DefaultQuotaBackendBytes
	}
	// Group commit puts up to MaxBatch writes in one transaction.
	ec.MaxTxnOps = MaxTxnOps
	alone := !strings.Contains(ec.InitialCluster, ",")
	ec.SnapshotCatchUpEntries = cfg.CatchUpEntries
	if ec.SnapshotCatchUpEntries == 0 {
		// etcd keeps the last SnapshotCatchUpEntries raft entries in
		// memory for followers that fall behind. Its default, 5 000, was
		// sized for entries of one request each; a group commit's entry
		// holds up to MaxBatch writes, and 5 000 of them held over 1 GiB
		// while a large fleet registered, and 100 of them still held
		// 80 MB when commits of a saturated fleet carried hundreds of
		// renewals each. A member of several keeps ClusterCatchUpEntries.
		// A member alone has no follower to catch up (one that joins
		// later gets a snapshot), so it keeps none but the entry at the
		// snapshot.
		ec.SnapshotCatchUpEntries = ClusterCatchUpEntries
		if alone {
			ec.SnapshotCatchUpEntries = SingleMemberCatchUpEntries
		}
	}
	if alone {
		// A start reads every retained WAL file through to find the last
		// snapshot: etcd's five files of 64 MB, filled fast by group
		// commits, took 0.6 s of a restart with 100 000 nodes. Files
		// before the last snapshot are not needed to recover (etcd keeps
		// the ones after it locked and never purges them), and a member
		// alone has no follower to send them to.
		ec.MaxWalFiles = SingleMemberWALFiles
		ec.SnapshotCount = SingleMemberSnapshotCount
		ec.TickMs, ec.ElectionMs = SingleMemberTickMs, SingleMemberElectionMs
	}
	ec.MaxRequestBytes = cfg.MaxRequestBytes
	if ec.MaxRequestBytes == 0 {
		ec.MaxRequestBytes = 4 << 20
	}
	// Progress notifications let watchers learn the current revision while
	// nothing changes, so bookmarks and consistent reads stay cheap.
	ec.WatchProgressNotifyInterval = 5 * time.Second
	zs := newZapSlog(cfg.Logger.With("component", "etcd"))
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(memberLogger(zs))

	e, err := startEtcd(ec, zs)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(timeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded etcd: not ready after %s", timeout)
	}
	kv := adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(e.Server))
	started = true
	return &Etcd{etcd: e, log: zs, client: v3client.New(e.Server), kv: kv, quota: ec.QuotaBackendBytes, lock: lock, tls: !cfg.ClientTLS.Empty()}, nil
}

// startEtcd starts etcd, and returns as an error what etcd panics with
// while it starts: it panics where it cannot create its write-ahead log,
// for one, which it preallocates 64 MB for, and a disk with less room
// left had the server end in a stack trace.
func startEtcd(ec *embed.Config, zs *zapSlog) (e *embed.Etcd, err error) {
	defer func() {
		if p := recover(); p != nil {
			zs.abandoned.Store(true)
			if what := zs.fatal.Load(); what != nil {
				err = errors.New(*what)
			} else {
				err = fmt.Errorf("%v", p)
			}
		}
	}()
	return embed.StartEtcd(ec)
}

// Client is an in-process client of the member, closed by Close.
func (e *Etcd) Client() *clientv3.Client { return e.client }

// KV is the member's KV API in process, as Client's KV calls it (the
// same quota checks), for callers that build etcd's requests themselves.
func (e *Etcd) KV() pb.KVClient { return e.kv }

// Endpoints are the member's client URLs, for other clients.
func (e *Etcd) Endpoints() []string {
	scheme := "http://"
	if e.tls {
		scheme = "https://"
	}
	return []string{scheme + e.etcd.Clients[0].Addr().String()}
}

// Err reports a fatal error of the running member.
func (e *Etcd) Err() <-chan error { return e.etcd.Err() }

// Close stops the member cleanly: in-flight requests finish, the database
// is synced and closed.
func (e *Etcd) Close() error {
	e.log.closing.Store(true)
	err := e.client.Close()
	e.etcd.Close()
	e.lock.Close()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orURLs(u []url.URL, def ...url.URL) []url.URL {
	if len(u) == 0 {
		return def
	}
	return u
}
