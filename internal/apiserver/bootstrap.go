package apiserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/tick"
)

// Bootstrap creates what a new cluster has from its first start: the
// namespaces default, kube-system, kube-public and kube-node-lease, and the
// bootstrap RBAC roles and bindings (bootstrap_rbac.go), and returns once
// the watch caches of namespaces and RBAC kinds are filled and hold them.
// It is safe to call on every start and from several servers at once.
func (s *Server) Bootstrap(ctx context.Context) error {
	if _, err := s.makeNamespaces(ctx); err != nil {
		return err
	}
	if err := s.bootstrapRBAC(ctx); err != nil {
		return err
	}
	// The authorizer and namespace checks read the watch cache, which
	// follows etcd a moment behind: serve nothing before it is filled and
	// holds what bootstrap just wrote, or the first requests could be
	// refused. A consistent list from a filled cache waits for it to reach
	// etcd's current revision. The other kinds' caches may still be
	// filling when the server starts to serve; their reads go to etcd
	// until then.
	for _, r := range []*registry.Resource{registry.Namespaces, registry.ClusterRoles, registry.ClusterRoleBindings, registry.Roles, registry.RoleBindings} {
		k := s.kinds[r]
		if err := k.WaitFilled(ctx); err != nil {
			return fmt.Errorf("bootstrap: waiting for the %s cache: %w", r.Name, err)
		}
		if _, err := k.List(ctx, store.ListOptions{}); err != nil {
			return fmt.Errorf("bootstrap: waiting for the %s cache: %w", r.Name, err)
		}
	}
	return nil
}

// makeNamespaces creates those of registry.InitialNamespaces that do not
// exist, and returns their names. One being deleted exists until it is
// gone.
func (s *Server) makeNamespaces(ctx context.Context) ([]string, error) {
	k := s.kinds[registry.Namespaces]
	var made []string
	for _, name := range registry.InitialNamespaces {
		// Read first: a start writes nothing it need not, and so starts on
		// an etcd that accepts no writes (its database full), to serve the
		// reads and the deletions that free it.
		if _, err := k.Get(ctx, k.Key("", name)); err == nil {
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return made, err
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: uuid.NewUUID(), CreationTimestamp: metav1.NewTime(s.clock.Now()),
		}}
		registry.Namespaces.PrepareForCreate(ns)
		ns.ManagedFields = nil
		obj := s.fields[fieldManagerKey{registry.Namespaces, ""}].UpdateNoErrors(&corev1.Namespace{}, ns, "leasehold")
		switch _, err := k.Create(ctx, k.Key("", name), obj, false); {
		case err == nil:
			made = append(made, name)
		case !errors.Is(err, store.ErrExists):
			return made, err
		}
	}
	return made, nil
}

// NamespacesInterval is how often KeepNamespaces looks for a deleted
// system namespace: kube-apiserver's system namespaces controller's.
const NamespacesInterval = time.Minute

// KeepNamespaces makes the namespaces of registry.InitialNamespaces again
// when one has been deleted (kube-node-lease may be, as in Kubernetes;
// the agents' leases then come back with it), every NamespacesInterval
// until ctx ends, on a goroutine of its own. Every replica runs it, as
// every kube-apiserver runs its controller; creating one that another
// made is a no-op.
func (s *Server) KeepNamespaces(ctx context.Context) {
	tick.Start(ctx, s.clock, NamespacesInterval, func() {
		made, err := s.makeNamespaces(ctx)
		for _, name := range made {
			s.log.Warn("made a system namespace again, after it was deleted", "namespace", name)
		}
		if err != nil && ctx.Err() == nil {
			s.log.Error("making the system namespaces again", "err", err)
		}
	})
}
