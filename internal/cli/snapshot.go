package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/pki"
	"github.com/leasehold/leasehold/internal/store/embedded"
	"github.com/leasehold/leasehold/internal/version"
)

// A snapshot is etcd's, of the etcd behind a running server, read through
// that server's API (GET /etcd/snapshot, for cluster-admins): the same
// file `etcdctl snapshot save` writes, so etcd's own tools read it too. It
// holds what etcd holds, not the data directory's files: the CA and its
// key, admin-token.sha256 and tokens.json are kept apart, as a data
// directory's copy.

func init() {
	register(&command{name: "snapshot", summary: "save etcd's data through a running server, or restore it into a data directory (save|restore)", run: runSnapshot})
}

func runSnapshot(ctx context.Context, args []string) error {
	const usage = "usage: leasehold snapshot save|restore [flags] FILE"
	if done, err := noSubcommand(args, usage, "snapshot"); done {
		return err
	}
	switch args[0] {
	case "save":
		return snapshotSave(ctx, args[1:])
	case "restore":
		return snapshotRestore(args[1:])
	}
	return fmt.Errorf("unknown snapshot subcommand %q (want save or restore)", args[0])
}

func snapshotSave(ctx context.Context, args []string) error {
	var conn clientFlags
	fs := newFlagSet("snapshot save")
	conn.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: leasehold snapshot save [flags] FILE")
	}
	path := fs.Arg(0)
	configs, err := conn.configs("leasehold-snapshot/" + version.Version)
	if err != nil {
		return err
	}
	rev, size, err := saveSnapshotFile(path, func(f *os.File) error {
		var err error
		for _, cfg := range configs {
			if err = download(ctx, cfg, f); err == nil {
				break
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	snapshotSaved(os.Stdout, path, rev, size)
	return nil
}

// saveSnapshotFile has fill write a snapshot into a file beside path, and
// renames that file to path once it is whole and verified: a failed save
// leaves no file that looks like a snapshot. It returns the revision and
// the database's size that the snapshot holds.
func saveSnapshotFile(path string, fill func(*os.File) error) (revision, size int64, err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".part-*")
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := fill(tmp); err != nil {
		return 0, 0, err
	}
	if err := tmp.Sync(); err != nil {
		return 0, 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, 0, err
	}
	if size, err = embedded.VerifySnapshot(tmp.Name()); err != nil {
		return 0, 0, err
	}
	if revision, err = embedded.SnapshotRevision(tmp.Name()); err != nil {
		return 0, 0, err
	}
	return revision, size, os.Rename(tmp.Name(), path)
}

// snapshotSaved tells w that the snapshot at path is saved.
func snapshotSaved(w io.Writer, path string, revision, size int64) {
	fmt.Fprintf(w, "Snapshot saved at %s: etcd's revision %d, %d bytes of its database, the SHA-256 checked.\n", path, revision, size)
}

// fromStream is a fill for saveSnapshotFile that copies what snapshot
// streams.
func fromStream(ctx context.Context, snapshot func(context.Context) (io.ReadCloser, error)) func(*os.File) error {
	return func(f *os.File) error {
		rc, err := snapshot(ctx)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(f, rc)
		return err
	}
}

// download writes the snapshot of cfg's server to f, from its start.
func download(ctx context.Context, cfg *rest.Config, f *os.File) error {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	body, err := c.CoreV1().RESTClient().Get().AbsPath(apiserver.SnapshotPath).Stream(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.Host, err)
	}
	defer body.Close()
	if _, err := io.Copy(f, body); err != nil {
		return fmt.Errorf("%s: the snapshot was cut short: %w", cfg.Host, err)
	}
	return nil
}

func snapshotRestore(args []string) error {
	fs := newFlagSet("snapshot restore")
	dataDir := fs.String("data-dir", "./leasehold-data", "the data directory to restore etcd into; its etcd directory must not exist (stop the server, move it away)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: leasehold snapshot restore [--data-dir DIR] FILE")
	}
	log, err := newLogger("text", "warn")
	if err != nil {
		return err
	}
	dir := filepath.Join(*dataDir, etcdDirName)
	if err := embedded.Restore(fs.Arg(0), dir, embedded.RestoreMember{}, log); err != nil {
		return err
	}
	fmt.Printf("Restored %s into %s. Start leasehold serve --data-dir %s: its clients see the revision moved on by %d, and list again.\n",
		fs.Arg(0), dir, *dataDir, embedded.RestoreRevisionBump)
	if _, err := os.Stat(filepath.Join(*dataDir, pki.CAKeyFile)); errors.Is(err, os.ErrNotExist) {
		fmt.Printf("%s holds no CA: copy ca.crt, ca.key, admin-token.sha256, admin.kubeconfig and tokens.json into it from the backup first, or the server makes a CA and admin token of its own, which no kubeconfig or agent of the old one trusts.\n", *dataDir)
	}
	return nil
}

// etcdRestore is `leasehold etcd restore`: snapshot restore for a member of
// a cluster of `leasehold etcd` members, each restored from the same file.
func etcdRestore(args []string) error {
	var dataDir, name, initialCluster, peerURLs string
	fs := newFlagSet("etcd restore")
	fs.StringVar(&dataDir, "data-dir", "./leasehold-etcd", "the member's data directory to restore into; it must not exist")
	fs.StringVar(&name, "name", "leasehold", "the member's name in --initial-cluster")
	fs.StringVar(&initialCluster, "initial-cluster", "", "NAME=PEER-URL,… of every member of the restored cluster, the same for each (default this member alone)")
	fs.StringVar(&peerURLs, "initial-advertise-peer-urls", "", "comma-separated peer URLs of this member (default its entries in --initial-cluster)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: leasehold etcd restore [--data-dir DIR] [--name NAME --initial-cluster NAME=URL,...] FILE")
	}
	log, err := newLogger("text", "warn")
	if err != nil {
		return err
	}
	m := embedded.RestoreMember{Name: name, InitialCluster: initialCluster, PeerURLs: splitList(peerURLs)}
	if err := embedded.Restore(fs.Arg(0), dataDir, m, log); err != nil {
		return err
	}
	fmt.Printf("Restored %s into %s as member %s. Start every member restored from this file with its --name, the same --initial-cluster and its --data-dir; the servers' clients see the revision moved on by %d, and list again.\n",
		fs.Arg(0), dataDir, name, embedded.RestoreRevisionBump)
	return nil
}
