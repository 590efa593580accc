package pki

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

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

// UseFile, in a data directory, is locked shared by every server running
// on the directory (UseDir).
const UseFile = "in-use.lock"

// UseDir marks dir as used by this process until release, and tells
// whether another process uses it too: replicas may share a data
// directory, and what follows one server's flags (the admin kubeconfig's
// port) must not follow a second's. Each holds a shared lock on UseFile;
// one that can take it exclusive first is alone.
func UseDir(dir string) (shared bool, release func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, UseFile), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return false, nil, err
	}
	fd := int(f.Fd())
	switch err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); {
	case errors.Is(err, syscall.EWOULDBLOCK):
		shared = true
	case err != nil:
		f.Close()
		return false, nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	if err := syscall.Flock(fd, syscall.LOCK_SH); err != nil {
		f.Close()
		return false, nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return shared, func() { f.Close() }, nil
}
