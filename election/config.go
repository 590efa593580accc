package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
)

// Defaults used when the corresponding Config field is zero. They are the
// values Kubernetes' own components use.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// JitterFactor is the factor client-go's elector applies to RetryPeriod when
// it polls. The Config is validated against it (RenewDeadline must exceed
// RetryPeriod × JitterFactor) so that a configuration accepted here is also
// accepted by client-go, and the two can share one Lease.
const JitterFactor = 1.2

// Term describes one term of leadership: from the successful acquisition
// of the Lease until leadership ends.
type Term struct {
	// Identity is the holder identity written to the Lease.
	Identity string
	// FencingToken is the Lease's spec.leaseTransitions as written by the
	// acquisition that started this term. It is strictly greater than the
	// token of every earlier term on the same Lease object (see the package
	// documentation for the exact rule and its limits). Pass it to every
	// system the leader writes to, so they can reject a stale leader.
	FencingToken int64
	// AcquiredAt is when the acquiring request was sent, on this process's
	// clock.
	AcquiredAt time.Time
}

// Callbacks are invoked by the Elector as leadership changes. Every callback
// must return; the Elector waits for OnStartedLeading to return before Run
// returns.
type Callbacks struct {
	// OnStartedLeading is called, in its own goroutine, when a term starts.
	// ctx is cancelled as soon as leadership may be lost (or is being given
	// up); the work guarded by the election must stop when it is.
	// context.Cause(ctx) says which: ErrRenewDeadlinePassed or
	// ErrLeaseHeldByAnother when it was lost, context.Canceled when it is
	// given up while the Lease is still held. Required by Run.
	OnStartedLeading func(ctx context.Context, term Term)
	// OnStoppedLeading is called once a term has ended and OnStartedLeading
	// has returned (and after the Lease was released, when it is). Unlike
	// client-go's, it is not called when Run returns without ever leading.
	// Optional.
	OnStoppedLeading func()
	// OnNewLeader is called with the holder identity every time this
	// Elector observes the holder change, including to itself and to ""
	// (no leader, for example after a release). Calls are made in order
	// from a single goroutine. Optional.
	OnNewLeader func(identity string)
}

// Config configures an Elector. Zero values mean the documented defaults.
type Config struct {
	// Client reaches the coordination.k8s.io/v1 API, for example
	// clientset.CoordinationV1(). Required. The identity needs get, create,
	// update, list and watch on leases (without list and watch the Elector
	// falls back to polling with get every RetryPeriod).
	Client coordinationv1client.LeasesGetter
	// Namespace and Name name the Lease. Required.
	Namespace string
	Name      string
	// Identity names this contender; it is written to
	// spec.holderIdentity. Required, and must be unique among contenders
	// (and across restarts, for fencing tokens to be strictly increasing;
	// hostname plus a random suffix is a good choice).
	Identity string

	// LeaseDuration is how long contenders wait, after they last saw the
	// Lease change, before they take it over. It is written to
	// spec.leaseDurationSeconds and must therefore be a whole number of
	// seconds. Default 15s.
	LeaseDuration time.Duration
	// RenewDeadline bounds how long a leader keeps leading without a
	// successful renewal: OnStartedLeading's ctx is cancelled at the send
	// time of the last successful renewal plus RenewDeadline. Must be less
	// than LeaseDuration. Default 10s.
	RenewDeadline time.Duration
	// RetryPeriod is the interval between renewals, between retries of
	// failed requests, and of polling when the Lease cannot be watched.
	// RenewDeadline must exceed RetryPeriod × JitterFactor. Default 2s.
	RetryPeriod time.Duration
	// RequestTimeout, when set, bounds each request within the deadlines
	// above. A client that fails over between servers (leasehold elect
	// given several --server) leaves one that stopped answering with its
	// connections open only once a request to it ends; with RequestTimeout
	// at RetryPeriod the leader renews through the next server well before
	// its RenewDeadline. Zero: a request may take what its deadline leaves
	// (a renewal, the rest of RenewDeadline), as client-go's leader election
	// with kube-controller-manager's client, whose timeout is RenewDeadline.
	RequestTimeout time.Duration

	// ReleaseOnCancel makes the leader release the Lease (empty holder,
	// leaseDurationSeconds 1, as client-go does) when Run's ctx is
	// cancelled, once OnStartedLeading has returned, so that a standby takes
	// over at once instead of after LeaseDuration. A take of the Lease in
	// flight as ctx is cancelled is answered first (within its request's
	// timeout), and given back if it succeeded; no term begins.
	ReleaseOnCancel bool

	// Coordinated makes the Elector a participant in coordinated leader
	// election: it never takes the Lease on its own, but waits until a
	// coordinator writes Identity as spec.holderIdentity, confirms with a
	// renewal and leads from then on as any holder does (renewing, handing
	// over when spec.preferredHolder names another candidate, releasing).
	// Run a Candidate with the same Identity beside it, so that the
	// coordinator knows about it. See the package documentation.
	Coordinated bool

	// Callbacks are invoked as leadership changes.
	Callbacks Callbacks

	// Clock measures and waits. Default clock.RealClock{}.
	Clock clock.WithTicker
	// Logger receives the Elector's logs. Default: discard.
	Logger *slog.Logger
}

// withDefaults returns cfg with zero values replaced by defaults.
func (cfg Config) withDefaults() Config {
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// validate checks a defaulted Config. The timing rules are client-go's.
func (cfg Config) validate() error {
	errs := validateLeaseRef(cfg.Client != nil, cfg.Namespace, "name", cfg.Name)
	if cfg.Identity == "" {
		errs = append(errs, errors.New("identity must not be empty"))
	}
	switch {
	case cfg.LeaseDuration < 1:
		errs = append(errs, errors.New("leaseDuration must be greater than zero"))
	case cfg.LeaseDuration%time.Second != 0:
		errs = append(errs, fmt.Errorf("leaseDuration %v must be a whole number of seconds", cfg.LeaseDuration))
	case cfg.LeaseDuration/time.Second > math.MaxInt32:
		errs = append(errs, fmt.Errorf("leaseDuration %v is too long", cfg.LeaseDuration))
	}
	if cfg.RenewDeadline < 1 {
		errs = append(errs, errors.New("renewDeadline must be greater than zero"))
	}
	if cfg.RetryPeriod < 1 {
		errs = append(errs, errors.New("retryPeriod must be greater than zero"))
	}
	if cfg.RequestTimeout < 0 {
		errs = append(errs, errors.New("requestTimeout must not be negative"))
	}
	if cfg.LeaseDuration <= cfg.RenewDeadline {
		errs = append(errs, errors.New("leaseDuration must be greater than renewDeadline"))
	}
	if cfg.RenewDeadline <= time.Duration(JitterFactor*float64(cfg.RetryPeriod)) {
		errs = append(errs, errors.New("renewDeadline must be greater than retryPeriod*JitterFactor"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("election: invalid config: %w", err)
	}
	return nil
}

// validateLeaseRef checks what every configuration naming a Lease shares: a
// client, a namespace (a DNS label) and the lease's name (a DNS subdomain),
// reported under nameField.
func validateLeaseRef(hasClient bool, namespace, nameField, name string) []error {
	var errs []error
	if !hasClient {
		errs = append(errs, errors.New("client must be set"))
	}
	if namespace == "" {
		errs = append(errs, errors.New("namespace must be set"))
	} else if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("namespace %q: %s", namespace, strings.Join(msgs, "; ")))
	}
	if name == "" {
		errs = append(errs, fmt.Errorf("%s must be set", nameField))
	} else if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("%s %q: %s", nameField, name, strings.Join(msgs, "; ")))
	}
	return errs
}
