// Package identity publishes the identity Lease of a server replica and
// collects those of replicas that are gone, as kube-apiserver does for its
// own: every replica keeps a Lease in kube-system, labelled
// apiserver.kubernetes.io/identity=leasehold, so that clients can count and
// name the live servers
//
//	kubectl get lease -n kube-system -l apiserver.kubernetes.io/identity
//
// and a replica that stops without deleting its Lease (a crash, a kill -9)
// has it deleted once it has gone unrenewed for its duration.
//
// The Lease is named after the replica's host and listen address, so that a
// restart takes the same Lease over; its holderIdentity is the name, an
// underscore and a UUID new to each start, as kube-apiserver writes it.
// Publishing is k8s.io/component-helpers' lease controller, which
// kube-apiserver and the kubelet use: it deletes a Lease left by an earlier
// start, creates a fresh one, renews it from its cached copy every renew
// interval, and deletes it on a clean stop.
package identity

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/tick"
)

const (
	// Namespace holds the identity Leases.
	Namespace = metav1.NamespaceSystem
	// Label marks an identity Lease; its value names the kind of server.
	Label = "apiserver.kubernetes.io/identity"
	// LabelValue is leasehold's value of Label.
	LabelValue = "leasehold"

	// DefaultDuration and DefaultRenewInterval are kube-apiserver's
	// (--identity-lease-duration-seconds, --identity-lease-renew-interval-seconds).
	DefaultDuration      = time.Hour
	DefaultRenewInterval = 10 * time.Second
)

// LeaseName is the identity Lease name of the replica on host listening on
// addr: "apiserver-" and a hash of both, in kube-apiserver's form (which
// hashes the host name alone: one API server a host). The address keeps
// replicas on one host apart.
func LeaseName(host, addr string) string {
	sum := sha256.Sum256([]byte(host + "\x00" + addr))
	return "apiserver-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16]))
}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Client writes the Lease. Required.
	Client kubernetes.Interface
	// Host and Addr name the replica: its host name and listen address.
	Host, Addr string
	// Duration is the Lease's leaseDurationSeconds (whole seconds, at
	// least one); default DefaultDuration.
	Duration time.Duration
	// RenewInterval is the time between renewals; default
	// DefaultRenewInterval.
	RenewInterval time.Duration
	// Clock; default the real clock.
	Clock clock.Clock
}

// CheckDurations tells whether a Lease of duration renewed every renew
// can be published: the duration in whole seconds, at least one, and the
// renew interval positive and shorter.
func CheckDurations(duration, renew time.Duration) error {
	if duration < time.Second || duration%time.Second != 0 {
		return fmt.Errorf("the lease duration must be whole seconds, at least one, not %s", duration)
	}
	if renew <= 0 || renew >= duration {
		return fmt.Errorf("the renew interval (%s) must be positive and shorter than the lease duration (%s)", renew, duration)
	}
	return nil
}

// Publisher keeps this replica's identity Lease.
type Publisher struct {
	// Name is the Lease's name; HolderIdentity its holderIdentity.
	Name, HolderIdentity string
	ctrl                 lease.Controller
}

// NewPublisher validates cfg.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Client == nil {
		return nil, errors.New("identity: Client is required")
	}
	if cfg.Duration == 0 {
		cfg.Duration = DefaultDuration
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = DefaultRenewInterval
	}
	if err := CheckDurations(cfg.Duration, cfg.RenewInterval); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	p := &Publisher{Name: LeaseName(cfg.Host, cfg.Addr)}
	p.HolderIdentity = p.Name + "_" + string(uuid.NewUUID())
	labels := func(l *coordinationv1.Lease) error {
		if l.Labels == nil {
			l.Labels = map[string]string{}
		}
		l.Labels[Label] = LabelValue
		// A host name no label value can carry (longer than 63
		// characters, say) is left out rather than fail every write.
		if len(validation.IsValidLabelValue(cfg.Host)) == 0 {
			l.Labels[corev1.LabelHostname] = cfg.Host
		}
		return nil
	}
	p.ctrl = lease.NewController(cfg.Clock, cfg.Client, p.HolderIdentity, int32(cfg.Duration/time.Second), nil,
		cfg.RenewInterval, p.Name, Namespace, labels)
	return p, nil
}

// Start deletes a Lease an earlier start left, then creates and renews
// this start's until stop closes.
func (p *Publisher) Start(stop <-chan struct{}) error { return p.ctrl.Start(stop) }

// Stop ends the renewals and deletes the Lease.
func (p *Publisher) Stop() { p.ctrl.Stop() }

// CollectorConfig configures a Collector.
type CollectorConfig struct {
	// Client reads and deletes identity Leases. Required.
	Client kubernetes.Interface
	// CheckPeriod is how often the Leases are checked; default 10 s.
	CheckPeriod time.Duration
	// Clock; default the real clock.
	Clock clock.WithTicker
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Collector deletes the identity Leases of replicas that are gone: those
// labelled apiserver.kubernetes.io/identity=leasehold (another value is
// another kind of server's, as kube-apiserver's collector keeps to its
// own) that are expired (expiredAt): as kube-apiserver's collector judges
// them, from their renewTime and leaseDurationSeconds, and also when their
// renewTime has not changed for their duration, timed on the collector's
// own clock from when it saw the Lease change. The delete carries the uid
// and resourceVersion the collector judged, so a Lease renewed meanwhile
// stays.
type Collector struct {
	cfg CollectorConfig
	log *slog.Logger

	mu   sync.Mutex
	seen map[types.UID]*sighting
}

// sighting is the last change of one Lease the collector saw.
type sighting struct {
	lease *coordinationv1.Lease
	at    time.Time // on the collector's clock
}

// NewCollector validates cfg.
func NewCollector(cfg CollectorConfig) (*Collector, error) {
	if cfg.Client == nil {
		return nil, errors.New("identity: Client is required")
	}
	if cfg.CheckPeriod == 0 {
		cfg.CheckPeriod = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Collector{cfg: cfg, log: cfg.Logger, seen: map[types.UID]*sighting{}}, nil
}

// Run watches the identity Leases and collects expired ones until ctx
// ends.
func (c *Collector) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(c.cfg.Client, 0, informers.WithNamespace(Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = Label + "=" + LabelValue }))
	inf := factory.Coordination().V1().Leases().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.observe(obj) },
		UpdateFunc: func(_, obj any) { c.observe(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok {
				c.forget(l)
			}
		},
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	tick.Every(ctx, c.cfg.Clock, c.cfg.CheckPeriod, func() { c.collect(ctx) })
	return nil
}

// observe records a Lease whose holder or renewTime changed, or that is new.
func (c *Collector) observe(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.seen[l.UID]; ok && sameRenewal(s.lease, l) {
		s.lease = l // the newest resourceVersion, for the delete's precondition
		return
	}
	c.seen[l.UID] = &sighting{lease: l, at: c.cfg.Clock.Now()}
}

// forget drops a Lease that is gone.
func (c *Collector) forget(l *coordinationv1.Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, l.UID)
}

// sameRenewal tells whether b carries a's renewal: same holder, renewTime
// and duration.
func sameRenewal(a, b *coordinationv1.Lease) bool {
	return ptr.Equal(a.Spec.HolderIdentity, b.Spec.HolderIdentity) &&
		ptr.Equal(a.Spec.LeaseDurationSeconds, b.Spec.LeaseDurationSeconds) &&
		a.Spec.RenewTime.Equal(b.Spec.RenewTime)
}

// expiredAt says whether the Lease of sighting s is expired at now: it
// lacks a renewTime or a duration, or its renewTime is more than its
// duration before now (Kubernetes' collector's rule, which lets a replica
// that stopped before this collector started go at once), or it has not
// changed for its duration since the collector saw it change (which a
// renewTime from a clock running ahead cannot put off).
func expiredAt(s *sighting, now time.Time) bool {
	d, renewed := s.lease.Spec.LeaseDurationSeconds, s.lease.Spec.RenewTime
	if d == nil || renewed == nil {
		return true
	}
	duration := time.Duration(*d) * time.Second
	return renewed.Add(duration).Before(now) || now.Sub(s.at) > duration
}

// collect deletes every expired Lease (expiredAt).
func (c *Collector) collect(ctx context.Context) {
	now := c.cfg.Clock.Now()
	var expired []*coordinationv1.Lease
	c.mu.Lock()
	for _, s := range c.seen {
		if expiredAt(s, now) {
			expired = append(expired, s.lease)
		}
	}
	c.mu.Unlock()
	for _, l := range expired {
		uid, rv := l.UID, l.ResourceVersion
		err := c.cfg.Client.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
		})
		switch {
		case err == nil:
			c.log.Info("deleted the identity lease of a server that is gone", "lease", l.Name, "holder", ptr.Deref(l.Spec.HolderIdentity, ""))
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone already, or renewed since: the informer brings the news.
		default:
			c.log.Warn("deleting an expired identity lease", "lease", l.Name, "err", err)
		}
	}
}
