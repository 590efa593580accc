package pki

import (
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
)

// LockFile, in a data directory, is locked while a process creates or reads
// the directory's credentials (LockDir).
const LockFile = "credentials.lock"

// LockDir takes the exclusive lock on dir's credentials, waiting while
// another process holds it, and returns the function that releases it.
// Server replicas may share a data directory: each holds the lock while it
// loads or creates the CA, its serving certificate and the admin token, so
// that the first to start creates them and the others read what it wrote.
// Without it, replicas started at once each wrote a CA of their own over
// the other's, and the directory was left with a certificate that no key
// in it had signed.
func LockDir(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	l, err := fileutil.LockFile(filepath.Join(dir, LockFile), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking %s's credentials: %w", dir, err)
	}
	return func() { l.Close() }, nil
}
