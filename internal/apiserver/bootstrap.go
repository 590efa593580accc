package apiserver

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
)

// Bootstrap creates what a new cluster has from its first start: the
// namespaces default, kube-system, kube-public and kube-node-lease, and the
// bootstrap RBAC roles and bindings (bootstrap_rbac.go). It is
// safe to call on every start and from several servers at once.
func (s *Server) Bootstrap(ctx context.Context) error {
	k := s.kinds[registry.Namespaces]
	for _, name := range registry.InitialNamespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: uuid.NewUUID(), CreationTimestamp: metav1.NewTime(s.clock.Now()),
		}}
		registry.Namespaces.PrepareForCreate(ns)
		ns.ManagedFields = nil
		obj := s.fields[fieldManagerKey{registry.Namespaces, ""}].UpdateNoErrors(&corev1.Namespace{}, ns, "leasehold")
		if _, err := k.Create(ctx, k.Key("", name), obj, false); err != nil && !errors.Is(err, store.ErrExists) {
			return err
		}
	}
	return s.bootstrapRBAC(ctx)
}
