package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/internal/version"
)

func init() {
	register(&command{name: "elect", summary: "run a command only while this process holds a Lease", run: runElect})
}

// Environment a leading command receives.
const (
	envFencingToken   = "LEASEHOLD_FENCING_TOKEN"
	envLeaderIdentity = "LEASEHOLD_LEADER_IDENTITY"
)

type electFlags struct {
	conn                                      clientFlags
	namespace, lease, identity                string
	leaseDuration, renewDeadline, retryPeriod time.Duration
	grace                                     time.Duration
	retry, observe                            bool
	coordinated                               bool
	binaryVersion, emulationVersion           string
	logLevel, logFormat                       string
}

func runElect(ctx context.Context, args []string) error {
	var f electFlags
	fs := newFlagSet("elect")
	f.conn.register(fs)
	fs.StringVar(&f.namespace, "namespace", "default", "namespace of the Lease")
	fs.StringVar(&f.lease, "lease", "", "name of the Lease to hold (required)")
	fs.StringVar(&f.identity, "identity", "", "this contender's identity (default hostname_uuid)")
	fs.DurationVar(&f.leaseDuration, "lease-duration", election.DefaultLeaseDuration, "how long standbys wait after the last renewal they saw")
	fs.DurationVar(&f.renewDeadline, "renew-deadline", election.DefaultRenewDeadline, "how long the leader keeps leading without a successful renewal")
	fs.DurationVar(&f.retryPeriod, "retry-period", election.DefaultRetryPeriod, "interval between renewals and retries; with several --server, each request's timeout too")
	fs.DurationVar(&f.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when the command must stop")
	fs.BoolVar(&f.retry, "retry", false, "after losing leadership, campaign again instead of exiting")
	fs.BoolVar(&f.observe, "observe", false, "print every change of leader until interrupted, without campaigning")
	fs.BoolVar(&f.coordinated, "coordinated", false, "take part in coordinated leader election: publish a LeaseCandidate and lead only when the server's coordinator elects this process")
	fs.StringVar(&f.binaryVersion, "binary-version", "", "with --coordinated: this program's version (semantic version, required)")
	fs.StringVar(&f.emulationVersion, "emulation-version", "", "with --coordinated: the version whose behaviour it provides; the oldest leads (default --binary-version)")
	fs.StringVar(&f.logLevel, "log-level", "warn", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: leasehold elect --lease NAME [flags] -- COMMAND [ARGS...]\n       leasehold elect --lease NAME --coordinated --binary-version X [flags] -- COMMAND [ARGS...]\n       leasehold elect --lease NAME --observe")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.lease == "" {
		return errors.New("--lease is required")
	}
	command := fs.Args()
	if !f.observe && len(command) == 0 {
		return errors.New("a command to run is required after --, or --observe")
	}
	if f.observe && (len(command) > 0 || f.retry) {
		return errors.New("--observe runs no command: it takes neither a command nor --retry")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--lease-duration", f.leaseDuration}, {"--renew-deadline", f.renewDeadline}, {"--retry-period", f.retryPeriod}} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive, not %v", d.name, d.v)
		}
	}
	if f.grace < 0 {
		return fmt.Errorf("--grace must not be negative, not %v", f.grace)
	}
	if f.coordinated && f.observe {
		return errors.New("--coordinated and --observe exclude each other")
	}
	if f.coordinated && f.binaryVersion == "" {
		return errors.New("--coordinated needs --binary-version")
	}
	if !f.coordinated && (f.binaryVersion != "" || f.emulationVersion != "") {
		return errors.New("--binary-version and --emulation-version need --coordinated")
	}
	log, err := newLogger(f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	configs, err := f.conn.configs("leasehold-elect/" + version.Version)
	if err != nil {
		return err
	}
	rc, err := failoverConfig(configs)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	if err := preflight(ctx, client, f.namespace, f.lease, !f.observe); err != nil {
		return err
	}
	if f.identity == "" {
		host, _ := os.Hostname()
		f.identity = fmt.Sprintf("%s_%s", host, uuid.NewUUID())
	}
	cfg := election.Config{
		Client: client.CoordinationV1(), Namespace: f.namespace, Name: f.lease, Identity: f.identity,
		LeaseDuration: f.leaseDuration, RenewDeadline: f.renewDeadline, RetryPeriod: f.retryPeriod,
		ReleaseOnCancel: true, Logger: log, Coordinated: f.coordinated,
	}
	if len(configs) > 1 {
		// A server that froze with its connections open is left once a
		// request to it ends: at the retry period, the leader renews
		// through the next well before its renew deadline.
		cfg.RequestTimeout = f.retryPeriod
	}
	if f.coordinated {
		cand, err := election.NewCandidate(election.CandidateConfig{
			Client: client.CoordinationV1beta1(), Namespace: f.namespace, LeaseName: f.lease, Identity: f.identity,
			BinaryVersion: f.binaryVersion, EmulationVersion: f.emulationVersion, Logger: log,
		})
		if err != nil {
			return err
		}
		// The candidate lives as long as the process: it stays published
		// across terms (--retry), and is withdrawn when elect exits. If it
		// cannot be published at all, elect stops.
		var stopElect context.CancelCauseFunc
		ctx, stopElect = context.WithCancelCause(ctx)
		defer stopElect(nil)
		candCtx, stopCand := context.WithCancel(context.WithoutCancel(ctx))
		candDone := make(chan error, 1)
		go func() {
			err := cand.Run(candCtx)
			if err != nil {
				stopElect(err)
			}
			candDone <- err
		}()
		err = lead(ctx, cfg, command, f)
		stopCand()
		if candErr := <-candDone; candErr != nil {
			return candErr
		}
		return err
	}
	if f.observe {
		cfg.Callbacks.OnNewLeader = func(id string) {
			if id == "" {
				id = "<none>"
			}
			fmt.Printf("%s\t%s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"), id)
		}
		el, err := election.New(cfg)
		if err != nil {
			return err
		}
		return el.Observe(ctx)
	}
	return lead(ctx, cfg, command, f)
}

// preflight turns the common mistakes into clear errors before campaigning:
// a namespace that does not exist, or no permission on leases (to write
// them too when writes is set; an observer only reads).
func preflight(ctx context.Context, c kubernetes.Interface, namespace, lease string, writes bool) error {
	if _, err := c.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return fmt.Errorf("namespace %q does not exist", namespace)
	}
	_, err := c.CoordinationV1().Leases(namespace).Get(ctx, lease, metav1.GetOptions{})
	switch {
	case err == nil, apierrors.IsNotFound(err):
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return fmt.Errorf("no permission to use lease %s/%s: %w", namespace, lease, err)
	default:
		return fmt.Errorf("reaching the server: %w", err)
	}
	if !writes {
		return nil
	}
	// Reading is not enough to lead: ask the server whether this identity
	// may also create and update the Lease.
	for _, verb := range []string{"create", "update"} {
		review, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: verb, Group: coordinationv1.GroupName, Resource: "leases", Name: lease,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			// A server without access reviews: campaigning will tell.
			return nil
		}
		if !review.Status.Allowed {
			return fmt.Errorf("no permission to %s lease %s/%s (bind the role system:leader-election in that namespace)", verb, namespace, lease)
		}
	}
	return nil
}

// lead campaigns and runs the command for each term. It returns the
// command's exit status when the command ends on its own, an error when
// leadership is lost (unless --retry), and the command's status after
// stopping it when leasehold elect itself is told to stop.
func lead(ctx context.Context, cfg election.Config, command []string, f electFlags) error {
	for {
		runCtx, cancelRun := context.WithCancel(ctx)
		exited, status := false, 0
		cfg.Callbacks.OnStartedLeading = func(lctx context.Context, term election.Term) {
			exited, status = runWhileLeading(lctx, command, term, f.stopGrace)
			if exited {
				// The command finished by itself: give up the Lease.
				cancelRun()
			}
		}
		el, err := election.New(cfg)
		if err != nil {
			cancelRun()
			return err
		}
		err = el.Run(runCtx)
		cancelRun()
		switch {
		case exited:
			if status != 0 {
				return exitError{status}
			}
			return nil
		case ctx.Err() != nil:
			return exitError{status}
		case f.retry:
			fmt.Fprintf(os.Stderr, "leasehold elect: %v; campaigning again\n", err)
			continue
		default:
			if err == nil {
				err = election.ErrLeadershipLost
			}
			fmt.Fprintf(os.Stderr, "leasehold elect: %v; command stopped\n", err)
			return exitError{1}
		}
	}
}

// runWhileLeading starts the command in its own process group and waits
// for it to exit or for the term to end; then it sends SIGTERM to the group,
// waits grace(why the term ended), and sends SIGKILL. exited says the
// command ended by itself.
func runWhileLeading(ctx context.Context, command []string, term election.Term, grace func(cause error) time.Duration) (exited bool, status int) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		envFencingToken+"="+strconv.FormatInt(term.FencingToken, 10),
		envLeaderIdentity+"="+term.Identity)
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "leasehold elect: starting %s: %v\n", command[0], err)
		return true, 127
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return true, exitStatus(err)
	case <-ctx.Done():
	}
	pgid := -cmd.Process.Pid
	syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case err := <-done:
		return false, exitStatus(err)
	case <-time.After(grace(context.Cause(ctx))):
	}
	syscall.Kill(pgid, syscall.SIGKILL)
	return false, exitStatus(<-done)
}

// stopGrace is how long the command has between SIGTERM and SIGKILL once
// its term has ended for cause. Given up on purpose (elect told to stop, a
// handover), the Lease is still held and renewed meanwhile: --grace. Lost,
// the command must be gone before a successor may start: one second short
// of lease-duration - renew-deadline after the renew deadline passed, at
// once when another already holds the Lease. It says so on stderr when
// that is less than --grace.
func (f electFlags) stopGrace(cause error) time.Duration {
	var grace time.Duration
	switch {
	case errors.Is(cause, election.ErrLeaseHeldByAnother):
		grace = 0
	case errors.Is(cause, election.ErrRenewDeadlinePassed):
		grace = max(0, min(f.grace, f.leaseDuration-f.renewDeadline-time.Second))
	default:
		return f.grace
	}
	if grace < f.grace {
		fmt.Fprintf(os.Stderr, "leasehold elect: %v; the command gets %v after SIGTERM, not --grace %v, to be gone before another leader may start\n", cause, grace, f.grace)
	}
	return grace
}

func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}
