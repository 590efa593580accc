package audit

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"k8s.io/utils/clock"
)

// RotatingFile is an append-only file that is renamed aside and started
// anew when the next write would make it larger than MaxBytes. Old files
// are named <base>-<UTC timestamp><ext> beside it, as kube-apiserver's do
// (with .gz after them when Compress is set), and removed when there are
// more than MaxBackups or they are older than MaxAge. It is not safe for
// concurrent use: the Logger's writer goroutine owns it.
type RotatingFile struct {
	path       string
	maxBytes   int64
	maxAge     time.Duration
	maxBackups int
	compress   bool
	clock      clock.PassiveClock
	// compressing counts the rotated files being compressed, in
	// goroutines of their own so that writes do not wait; Close waits.
	compressing sync.WaitGroup

	f      *os.File // nil after Close, or after a rotation that failed
	size   int64
	closed bool
	lock   *fileutil.LockedFile // Path.lock, held while open
}

// ErrInUse is a log that another process has open: each rotates its file
// alone, so two writing one file would rename and remove it under each
// other, losing events.
var ErrInUse = errors.New("written by another process")

// RotateConfig configures a RotatingFile; zero values disable each limit.
type RotateConfig struct {
	// Path of the live file.
	Path string
	// MaxBytes before rotating; 0 never rotates.
	MaxBytes int64
	// MaxAge of rotated files; 0 keeps them regardless of age.
	MaxAge time.Duration
	// MaxBackups is how many rotated files to keep; 0 keeps all.
	MaxBackups int
	// Compress gzips each rotated file, as kube-apiserver's
	// --audit-log-compress.
	Compress bool
	// Clock for rotation timestamps and ages; default the real clock.
	Clock clock.PassiveClock
}

// OpenRotating opens (creating, mode 0600) the file at cfg.Path, locking
// Path.lock for as long as it is open: a file another process holds so is
// ErrInUse.
func OpenRotating(cfg RotateConfig) (*RotatingFile, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	r := &RotatingFile{path: cfg.Path, maxBytes: cfg.MaxBytes, maxAge: cfg.MaxAge, maxBackups: cfg.MaxBackups, compress: cfg.Compress, clock: cfg.Clock}
	if err := os.MkdirAll(filepath.Dir(r.path), 0o700); err != nil {
		return nil, err
	}
	lock, err := fileutil.TryLockFile(r.path+".lock", os.O_CREATE|os.O_WRONLY, 0o600)
	switch {
	case errors.Is(err, fileutil.ErrLocked):
		return nil, fmt.Errorf("%s: %w", r.path, ErrInUse)
	case err != nil:
		return nil, err
	}
	r.lock = lock
	if err := r.open(); err != nil {
		lock.Close()
		return nil, err
	}
	return r, nil
}

func (r *RotatingFile) open() error {
	if err := os.MkdirAll(filepath.Dir(r.path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	r.f, r.size = f, fi.Size()
	return nil
}

// Write appends p, rotating first when p would overflow the file. A write
// larger than MaxBytes goes alone into a fresh file.
func (r *RotatingFile) Write(p []byte) (int, error) {
	if r.closed {
		return 0, os.ErrClosed
	}
	if r.f == nil {
		// A rotation failed after closing the file: append to the file
		// at the path again (rotating later), rather than write nothing.
		if err := r.open(); err != nil {
			return 0, err
		}
	}
	if r.maxBytes > 0 && r.size > 0 && r.size+int64(len(p)) > r.maxBytes {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

const backupTimeFormat = "2006-01-02T15-04-05.000"

func (r *RotatingFile) rotate() error {
	if err := r.f.Close(); err != nil {
		return err
	}
	r.f = nil
	ext := filepath.Ext(r.path)
	base := strings.TrimSuffix(r.path, ext)
	backup := fmt.Sprintf("%s-%s%s", base, r.clock.Now().UTC().Format(backupTimeFormat), ext)
	if _, err := os.Stat(backup); err == nil {
		// Two rotations in one millisecond: keep both.
		for i := 1; ; i++ {
			b := fmt.Sprintf("%s-%s.%d%s", base, r.clock.Now().UTC().Format(backupTimeFormat), i, ext)
			if _, err := os.Stat(b); errors.Is(err, os.ErrNotExist) {
				backup = b
				break
			}
		}
	}
	// A file removed from under the logger (by hand, or by another
	// rotation) has nothing to keep: a new one is started.
	renamed := true
	if err := os.Rename(r.path, backup); errors.Is(err, os.ErrNotExist) {
		renamed = false
	} else if err != nil {
		return err
	}
	if err := r.open(); err != nil {
		return err
	}
	if r.compress && renamed {
		r.compressing.Go(func() {
			gzipFile(backup)
			// The prune below may have passed over the file while it was
			// being compressed: this one sees it, compressed.
			r.prune()
		})
	}
	return r.prune()
}

// gzipFile replaces path with path.gz, written beside it and renamed in
// place once whole. On any failure the file stays as it was: a rotated
// file uncompressed is better than none.
func gzipFile(path string) {
	in, err := os.Open(path)
	if err != nil {
		return
	}
	defer in.Close()
	tmp := path + ".gz.tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	zw := gzip.NewWriter(out)
	_, err = io.Copy(zw, in)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path+".gz")
	}
	if err != nil {
		os.Remove(tmp)
		return
	}
	os.Remove(path)
}

// Backups returns the rotated files, newest first.
func (r *RotatingFile) Backups() ([]string, error) {
	ext := filepath.Ext(r.path)
	base := strings.TrimSuffix(filepath.Base(r.path), ext)
	entries, err := os.ReadDir(filepath.Dir(r.path))
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(entries))
	for _, e := range entries {
		names[e.Name()] = true
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasPrefix(n, base+"-") || !(strings.HasSuffix(n, ext) || strings.HasSuffix(n, ext+".gz")) {
			continue
		}
		// A file and its compressed copy, both there for a moment while
		// the copy replaces it, are one backup: the copy.
		if names[n+".gz"] {
			continue
		}
		out = append(out, filepath.Join(filepath.Dir(r.path), n))
	}
	// The timestamp format sorts in time order.
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out, nil
}

// prune removes the backups beyond MaxBackups or MaxAge. It only reads
// what does not change after OpenRotating, so a compression's goroutine
// may call it beside the writer.
func (r *RotatingFile) prune() error {
	backups, err := r.Backups()
	if err != nil {
		return err
	}
	now := r.clock.Now()
	for i, b := range backups {
		drop := r.maxBackups > 0 && i >= r.maxBackups
		if !drop && r.maxAge > 0 {
			if fi, err := os.Stat(b); err == nil && now.Sub(fi.ModTime()) > r.maxAge {
				drop = true
			}
		}
		if drop {
			if err := os.Remove(b); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// Sync flushes the file to disk.
func (r *RotatingFile) Sync() error {
	if r.f == nil {
		return nil
	}
	return r.f.Sync()
}

// Close closes the file, once the rotated files being compressed are.
func (r *RotatingFile) Close() error {
	r.compressing.Wait()
	r.closed = true
	defer r.lock.Close()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
