package cli

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// logBlockedAfter is how long one write of the log may take before the
// log health check fails: two minutes, as kube-apiserver's log check
// allows klog's flushes.
const logBlockedAfter = 2 * time.Minute

// logOutput is where the process logs: stderr, watched for the health
// endpoints' log check.
var logOutput = newWatchedWriter(os.Stderr, clock.RealClock{})

// watchedWriter passes writes through and remembers since when the one
// under way started. Its log check fails while a write has been blocked
// for logBlockedAfter: a log that cannot be written (a full pipe, a stuck
// journal) holds every request that logs, so a supervisor watching /livez
// should restart the server rather than wait.
type watchedWriter struct {
	w     io.Writer
	clock clock.PassiveClock
	// since is the start of the write under way, in Unix nanoseconds, or
	// 0. slog's handlers write one record at a time, so one will do.
	since atomic.Int64
}

func newWatchedWriter(w io.Writer, clk clock.PassiveClock) *watchedWriter {
	return &watchedWriter{w: w, clock: clk}
}

func (l *watchedWriter) Write(p []byte) (int, error) {
	l.since.Store(l.clock.Now().UnixNano())
	defer l.since.Store(0)
	return l.w.Write(p)
}

// Name and Check make it k8s.io/apiserver's health checker "log".
func (l *watchedWriter) Name() string { return "log" }

func (l *watchedWriter) Check(*http.Request) error {
	since := l.since.Load()
	if since != 0 && l.clock.Since(time.Unix(0, since)) >= logBlockedAfter {
		return errors.New("logging blocked")
	}
	return nil
}
