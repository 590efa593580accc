// Command contender competes for one Lease, with leasehold's election
// package or with client-go's tools/leaderelection, and records every term
// of leadership to a file. The safety test and the failover benchmark in
// test/safety start it, one OS process per contender, so that they can
// SIGKILL, SIGSTOP and SIGTERM contenders as a machine or an operator would.
//
// Every record is one line, written with a single write(2) to a file opened
// with O_APPEND, so a SIGKILL never leaves half a line and lines reach the
// file in the order they were written. Each line starts with the time on
// CLOCK_MONOTONIC in nanoseconds, which every process on the machine shares
// (unlike the monotonic reading in Go's time.Time, which is private to a
// process) and which keeps counting while a process is stopped:
//
//	<ns> ready <identity-prefix> <pid>
//	<ns> leader <observed holder, "-" for none>
//	<ns> start <identity> <fencing token>
//	<ns> stop <identity> <fencing token>
//	<ns> exit
//
// "start" is written when OnStartedLeading begins, before anything else is
// done as leader; "stop" when the callback sees its context cancelled.
// Between the two the process counts as leading. Campaigning goes on term
// after term until SIGTERM or SIGINT.
//
// A leasehold contender runs one Elector (identity <name>-<pid>) again and
// again. A client-go contender runs a new LeaderElector with a new identity
// (<name>-<pid>-<n>) for every campaign, because client-go does not increment
// leaseTransitions when it takes over a record naming its own identity; it
// learns its fencing token from the record it wrote when it acquired the
// Lease, through a wrapper of its resourcelock.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/leasehold/leasehold/election"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "contender:", err)
		os.Exit(1)
	}
}

type options struct {
	kind, kubeconfig, namespace, lease, name, records string
	leaseDuration, renewDeadline, retryPeriod         time.Duration
	releaseOnCancel                                   bool
}

func run() error {
	var o options
	flag.StringVar(&o.kind, "kind", "leasehold", "leasehold or client-go")
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the server")
	flag.StringVar(&o.namespace, "namespace", "default", "namespace of the Lease")
	flag.StringVar(&o.lease, "lease", "safety", "name of the Lease")
	flag.StringVar(&o.name, "name", "contender", "identity prefix; the pid is appended")
	flag.StringVar(&o.records, "records", "", "file to append records to (required)")
	flag.DurationVar(&o.leaseDuration, "lease-duration", election.DefaultLeaseDuration, "LeaseDuration")
	flag.DurationVar(&o.renewDeadline, "renew-deadline", election.DefaultRenewDeadline, "RenewDeadline")
	flag.DurationVar(&o.retryPeriod, "retry-period", election.DefaultRetryPeriod, "RetryPeriod")
	flag.BoolVar(&o.releaseOnCancel, "release-on-cancel", false, "release the Lease when stopped with SIGTERM")
	flag.Parse()
	if o.records == "" {
		return errors.New("--records is required")
	}
	f, err := os.OpenFile(o.records, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	rec := &recorder{f: f}

	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.Timeout = 10 * time.Second
	cfg.QPS, cfg.Burst = 100, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	base := o.name + "-" + strconv.Itoa(os.Getpid())
	rec.write("ready", base, strconv.Itoa(os.Getpid()))
	switch o.kind {
	case "leasehold":
		err = runLeasehold(ctx, cs, o, base, rec)
	case "client-go":
		err = runClientGo(ctx, cs, o, base, rec)
	default:
		err = fmt.Errorf("--kind must be leasehold or client-go, not %q", o.kind)
	}
	rec.write("exit")
	return err
}

// recorder appends timestamped lines to the records file.
type recorder struct {
	mu sync.Mutex
	f  *os.File
}

// monotonicNow reads CLOCK_MONOTONIC, shared by all processes on the machine.
func monotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

func (r *recorder) write(fields ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := strconv.FormatInt(monotonicNow(), 10)
	for _, f := range fields {
		if f == "" {
			f = "-"
		}
		line += " " + f
	}
	if _, err := r.f.WriteString(line + "\n"); err != nil {
		fmt.Fprintln(os.Stderr, "contender: writing a record:", err)
		os.Exit(1)
	}
}

func runLeasehold(ctx context.Context, cs kubernetes.Interface, o options, id string, rec *recorder) error {
	e, err := election.New(election.Config{
		Client: cs.CoordinationV1(), Namespace: o.namespace, Name: o.lease, Identity: id,
		LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod,
		ReleaseOnCancel: o.releaseOnCancel,
		Logger:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context, term election.Term) {
				tok := strconv.FormatInt(term.FencingToken, 10)
				rec.write("start", term.Identity, tok)
				<-ctx.Done()
				rec.write("stop", term.Identity, tok)
			},
			OnNewLeader: func(holder string) { rec.write("leader", holder) },
		},
	})
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		if err := e.Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "contender: term ended:", err)
		}
	}
	return nil
}

// recordingLock remembers the last record it wrote successfully, so that a
// client-go contender knows the leaseTransitions of its acquisition.
type recordingLock struct {
	resourcelock.Interface
	mu    sync.Mutex
	wrote bool // a record naming this identity was written
	last  resourcelock.LeaderElectionRecord
}

func (l *recordingLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, ler)
	l.note(ler, err)
	return err
}

func (l *recordingLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, ler)
	l.note(ler, err)
	return err
}

func (l *recordingLock) note(ler resourcelock.LeaderElectionRecord, err error) {
	if err != nil || ler.HolderIdentity != l.Identity() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wrote, l.last = true, ler
}

func (l *recordingLock) record() (resourcelock.LeaderElectionRecord, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, l.wrote
}

func runClientGo(ctx context.Context, cs kubernetes.Interface, o options, base string, rec *recorder) error {
	for n := 0; ctx.Err() == nil; n++ {
		id := fmt.Sprintf("%s-%d", base, n)
		lock := &recordingLock{Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: o.namespace, Name: o.lease},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		}}
		done := make(chan struct{})
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:          lock,
			LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod,
			ReleaseOnCancel: o.releaseOnCancel,
			Name:            o.lease,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					defer close(done)
					r, _ := lock.record()
					tok := strconv.Itoa(r.LeaderTransitions)
					rec.write("start", id, tok)
					<-ctx.Done()
					rec.write("stop", id, tok)
				},
				OnStoppedLeading: func() {},
				OnNewLeader:      func(holder string) { rec.write("leader", holder) },
			},
		})
		if err != nil {
			return err
		}
		le.Run(ctx)
		// client-go starts OnStartedLeading in a goroutine it does not wait
		// for; it was started if the acquisition was written.
		if _, wrote := lock.record(); wrote {
			<-done
		}
	}
	return nil
}
