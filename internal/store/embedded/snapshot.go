package embedded

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
)

// A snapshot is etcd's: the member's database file as of one revision,
// followed by the SHA-256 of what precedes it, as etcd's Maintenance
// Snapshot call streams it and `etcdctl snapshot save` writes it. etcd's
// database pages are whole multiples of 512 bytes, so a file of the right
// shape has 32 bytes beyond them.

// Snapshot streams the member's snapshot, as etcd's Maintenance Snapshot
// call does: the database as of now, then its SHA-256. It reads the
// database straight into the reader's buffer. etcd's call, through the
// in-process client, allocates a new buffer for each 32 KiB it sends: as
// much garbage as the database is large, which at 117 MB under a fleet's
// renewals grew the server's anonymous memory by 70 to 90 MiB for the two
// seconds of a snapshot. Closing the reader early, or ending ctx, ends
// the stream.
func (e *Etcd) Snapshot(ctx context.Context) (io.ReadCloser, error) {
	snap := e.etcd.Server.Backend().Snapshot()
	pr, pw := io.Pipe()
	stop := context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	go func() {
		defer stop()
		h := sha256.New()
		_, err := snap.WriteTo(io.MultiWriter(pw, h))
		if cerr := snap.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			_, err = pw.Write(h.Sum(nil))
		}
		pw.CloseWithError(err)
	}()
	return ctxReader{ctx: ctx, PipeReader: pr}, nil
}

// ctxReader fails every read once its context has ended. The pipe is also
// closed then, but by a goroutine of context.AfterFunc, which may run
// only after the writer has sent the rest: a reader that saw its context
// end must not see the stream end well.
type ctxReader struct {
	ctx context.Context
	*io.PipeReader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.PipeReader.Read(p)
}

// VerifySnapshot checks that the snapshot file at path is whole: its
// length has the shape of a database and its checksum, and the checksum
// matches. It returns the database's size.
func VerifySnapshot(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	db := st.Size() - sha256.Size
	if db <= 0 || db%512 != 0 {
		return 0, fmt.Errorf("%s is not an etcd snapshot: %d bytes is no database followed by its SHA-256", path, st.Size())
	}
	h := sha256.New()
	if _, err := io.CopyN(h, f, db); err != nil {
		return 0, err
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, want); err != nil {
		return 0, err
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return 0, fmt.Errorf("%s is damaged: its database does not match its SHA-256", path)
	}
	return db, nil
}

// SnapshotRevision returns the revision of etcd's keyspace that the
// snapshot file at path holds: the main revision of the last key in its
// key bucket, as `etcdutl snapshot status` reports it (0 for a member
// that was never written to, as it does too). It reads only the
// pages on the way to that key. etcdutl's status reads every page to
// hash them: a second at 222 MB, and, since bbolt maps the file, as much
// resident memory as the file is large while it runs.
//
// The file must have passed VerifySnapshot. bbolt (etcdutl's status too)
// reads each page where the pages before it say it is, and a cut or
// damaged database sends it past the end of the mapped file, where the
// process faults: a fuzz run found that at once.
func SnapshotRevision(path string) (int64, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	defer db.Close()
	var rev int64
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return errors.New("it has no key bucket")
		}
		k, _ := b.Cursor().Last()
		switch {
		case k == nil: // no revision yet
		case len(k) < 8:
			return fmt.Errorf("its last key, %x, is not a revision", k)
		default:
			rev = int64(binary.BigEndian.Uint64(k[:8]))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	return rev, nil
}

// RestoreRevisionBump is how far a restore moves the revision on, and the
// revisions it skips are compacted: clients that saw revisions after the
// snapshot was taken (watch caches, informers, agents' leases) would
// otherwise see revisions they already saw stand for other states. Their
// watches get 410 Gone and they list again, as etcd's guide to restoring a
// Kubernetes cluster advises.
const RestoreRevisionBump = 1_000_000_000

// RestoreMember says which member of which cluster a restore makes. The
// zero value is Start's member alone, with its defaults.
type RestoreMember struct {
	// Name is the member's name, as Config.Name.
	Name string
	// InitialCluster lists every member of the restored cluster, as
	// Config.InitialCluster; each member is restored from the same file
	// with the same list.
	InitialCluster string
	// PeerURLs are the member's own; default its entries in
	// InitialCluster.
	PeerURLs []string
}

// Restore writes a member directory at dir, which must not exist, from the
// snapshot file at path, for Start to run as the member that m describes:
// the state the snapshot holds, with the revision moved on by
// RestoreRevisionBump.
func Restore(path, dir string, m RestoreMember, log *slog.Logger) error {
	name, cluster, peers := m.Name, m.InitialCluster, m.PeerURLs
	if name == "" {
		name = defaultName
	}
	if cluster == "" {
		// Start's defaults: a peer URL on the loopback interface, which
		// a member alone never dials.
		cluster = name + "=http://127.0.0.1:0"
	}
	if len(peers) == 0 {
		urls, err := types.NewURLsMap(cluster)
		if err != nil {
			return fmt.Errorf("initial cluster %q: %w", cluster, err)
		}
		if peers = urls[name].StringSlice(); len(peers) == 0 {
			return fmt.Errorf("initial cluster %q names no member %s", cluster, name)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists; move it away first, or restore into another data directory", dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// etcdutl checks the checksum too, but says what is wrong in terms
	// of its own command's flags; this says it of the file.
	if _, err := VerifySnapshot(path); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	err := snapshot.NewV3(ClientLogger(log.With("component", "etcd"))).Restore(snapshot.RestoreConfig{
		SnapshotPath:        path,
		Name:                name,
		OutputDataDir:       dir,
		PeerURLs:            peers,
		InitialCluster:      cluster,
		InitialClusterToken: "etcd-cluster",
		RevisionBump:        RestoreRevisionBump,
		MarkCompacted:       true,
	})
	if err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("restoring %s into %s: %w", path, dir, err)
	}
	return os.Chmod(dir, 0o700)
}
