// Package manager runs leasehold's built-in controllers under leader
// election, so that with several server replicas exactly one replica runs
// them. Every replica campaigns for the Lease
// kube-system/leasehold-controller-manager; the leader starts each
// controller with the API identity it is given, and when its term ends
// (lost, or the server stopping) the controllers stop before anyone else can
// take the Lease, and the replica campaigns again.
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/election"
)

// LeaseName and LeaseNamespace name the controller manager's Lease.
const (
	LeaseNamespace = "kube-system"
	LeaseName      = "leasehold-controller-manager"
)

// Controller is one built-in controller: it runs until ctx ends.
type Controller struct {
	// Name identifies it in logs.
	Name string
	// Identity is the user it acts as, e.g.
	// system:serviceaccount:kube-system:generic-garbage-collector.
	Identity string
	// Run runs the controller with a REST config authenticated as Identity.
	Run func(ctx context.Context, cfg *rest.Config) error
}

// Config configures the manager. Zero values mean defaults.
type Config struct {
	// REST returns a REST config that authenticates as identity. Required.
	REST func(identity string) *rest.Config
	// Controllers to run while leading.
	Controllers []Controller
	// Identity of this replica in the election; default hostname_uuid.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod of the election; default
	// 15 s, 10 s and 2 s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Clock; default the real clock.
	Clock clock.WithTicker
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Manager runs the controllers while this replica leads.
type Manager struct {
	cfg     Config
	elector *election.Elector
	log     *slog.Logger
}

// New validates cfg.
func New(cfg Config) (*Manager, error) {
	if cfg.REST == nil {
		return nil, errors.New("manager: REST is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Identity == "" {
		host, _ := os.Hostname()
		cfg.Identity = fmt.Sprintf("%s_%s", host, uuid.NewUUID())
	}
	m := &Manager{cfg: cfg, log: cfg.Logger}
	client, err := kubernetes.NewForConfig(cfg.REST("system:kube-controller-manager"))
	if err != nil {
		return nil, err
	}
	m.elector, err = election.New(election.Config{
		Client: client.CoordinationV1(), Namespace: LeaseNamespace, Name: LeaseName, Identity: cfg.Identity,
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		ReleaseOnCancel: true, Clock: cfg.Clock, Logger: cfg.Logger.With("component", "controller-manager-election"),
		Callbacks: election.Callbacks{
			OnStartedLeading: m.lead,
			OnNewLeader: func(id string) {
				if id != "" {
					m.log.Info("controller manager leader", "leader", id, "self", id == cfg.Identity)
				}
			},
		},
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Run campaigns, leads, and campaigns again, until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := m.elector.Run(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("controller manager term ended; campaigning again", "reason", err)
		}
	}
	return nil
}

// IsLeader reports whether this replica runs the controllers now.
func (m *Manager) IsLeader() bool { return m.elector.IsLeader() }

// lead runs every controller until the term ends.
func (m *Manager) lead(ctx context.Context, term election.Term) {
	m.log.Info("leading: starting controllers", "identity", term.Identity, "term", term.FencingToken)
	var wg sync.WaitGroup
	for _, c := range m.cfg.Controllers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := c.Run(ctx, m.cfg.REST(c.Identity))
				if ctx.Err() != nil {
					return
				}
				m.log.Error("controller stopped; restarting", "controller", c.Name, "err", err)
				select {
				case <-ctx.Done():
				case <-m.cfg.Clock.After(time.Second):
				}
			}
		}()
	}
	wg.Wait()
	m.log.Info("term over: controllers stopped", "term", term.FencingToken)
}
