package apiserver

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
)

// chargeQuota is Kubernetes' ResourceQuota admission for a create, for
// the object counts leasehold's quotas hold: each quota of the namespace
// that limits the resource must have room for one more object, and its
// status.used is raised by one, with a compare on the quota, before the
// object is stored. The check is made again against each quota as
// written over, so that concurrent creates cannot both take the last
// place. A create that then fails leaves the count one too high until the
// resource quota controller counts again, as in Kubernetes. A dry run is
// checked and charges nothing.
func (s *Server) chargeQuota(req *request, dryRun bool) error {
	if !req.res.Namespaced {
		return nil
	}
	qk := s.kinds[registry.ResourceQuotas]
	count := registry.CountName(req.res)
	// The quotas as cached: most namespaces have none, and a create pays
	// nothing more then. One made a moment ago may be missed; it counts
	// from the controller's first count.
	list, err := qk.List(req.ctx, store.ListOptions{Namespace: req.info.namespace, ResourceVersion: "0"})
	if err != nil {
		return err
	}
	var limiting []*corev1.ResourceQuota
	for _, obj := range list.Items {
		q := obj.(*corev1.ResourceQuota)
		if _, ok := q.Spec.Hard[count]; !ok {
			continue
		}
		if err := roomFor(q, count); err != nil {
			return apierrors.NewForbidden(req.gr, req.info.name, err)
		}
		limiting = append(limiting, q)
	}
	if dryRun || len(limiting) == 0 {
		return nil
	}
	// A create of an object that exists gets 409: charging it would count
	// one object too many until the controller counts again, and a client
	// that retries such creates would fill the quota. (One deleted a
	// moment ago and still cached is not charged; its deletion has the
	// controller count again, and the new one with it.)
	if _, err := req.kind.Cached(req.ctx, req.kind.Key(req.info.namespace, req.info.name)); err == nil {
		return nil
	}
	for _, q := range limiting {
		_, err := qk.Update(req.ctx, qk.Key(q.Namespace, q.Name), store.UpdateOptions{Guess: q}, func(cur runtime.Object) (runtime.Object, error) {
			c := cur.(*corev1.ResourceQuota)
			if _, ok := c.Spec.Hard[count]; !ok {
				return c, nil // the limit went meanwhile
			}
			if err := roomFor(c, count); err != nil {
				return nil, err
			}
			n := c.DeepCopy()
			used := n.Status.Used[count]
			used.Add(resource.MustParse("1"))
			n.Status.Used[count] = used
			return n, nil
		})
		var quotaErr quotaError
		switch {
		case errors.As(err, &quotaErr):
			return apierrors.NewForbidden(req.gr, req.info.name, err)
		case errors.Is(err, store.ErrNotFound):
			// The quota went meanwhile.
		case err != nil:
			return apierrors.NewInternalError(fmt.Errorf("charging quota %s: %w", q.Name, err))
		}
	}
	return nil
}

// quotaError is a refusal by a quota, with Kubernetes' words.
type quotaError string

func (e quotaError) Error() string { return string(e) }

// roomFor reports why q has no room for one more object of count, if it
// has none: its status does not know the limit yet (the controller has
// not counted since it was set), or it is reached.
func roomFor(q *corev1.ResourceQuota, count corev1.ResourceName) error {
	hard, known := q.Status.Hard[count]
	used, counted := q.Status.Used[count]
	if !known || !counted || q.Status.Used == nil {
		return quotaError(fmt.Sprintf("status unknown for quota: %s, resources: %s", q.Name, count))
	}
	if spec := q.Spec.Hard[count]; spec.Cmp(hard) < 0 {
		hard = spec // lowered since the last count: the lower limit holds
	}
	if used.Value()+1 > hard.Value() {
		return quotaError(fmt.Sprintf("exceeded quota: %s, requested: %s=1, used: %s=%s, limited: %s=%s", q.Name, count, count, used.String(), count, hard.String()))
	}
	return nil
}
