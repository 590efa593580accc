package apiserver

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	names := registry.CountNames(req.res)
	// The quotas as cached: most namespaces have none, and a create pays
	// little more then (liveQuotas, below, once in a while).
	list, err := qk.List(req.ctx, store.ListOptions{Namespace: req.info.namespace, ResourceVersion: "0"})
	if err != nil {
		return err
	}
	quotas := list.Items
	if len(quotas) == 0 {
		if quotas, err = s.liveQuotas(req, qk); err != nil {
			return err
		}
	}
	var limiting []*corev1.ResourceQuota
	for _, obj := range quotas {
		q := s.newestQuota(obj.(*corev1.ResourceQuota))
		counts := limitedBy(q, names)
		if len(counts) == 0 {
			continue
		}
		for _, count := range counts {
			if err := roomFor(q, count); err != nil {
				return apierrors.NewForbidden(req.gr, req.info.name, err)
			}
		}
		limiting = append(limiting, q)
	}
	if dryRun || len(limiting) == 0 {
		return nil
	}
	// A create of an object that exists gets 409: charging it would count
	// one object too many until the controller counts again, and a client
	// that retries such creates would fill the quota. The cache may not
	// have an object created a moment ago yet, so one it lacks is looked
	// for in etcd: a create the quota limits costs that read. (One deleted
	// a moment ago and still cached is not charged; its deletion has the
	// controller count again, and the new one with it.)
	key := req.kind.Key(req.info.namespace, req.info.name)
	if _, err := req.kind.Cached(req.ctx, key); err == nil {
		return nil
	}
	if _, err := req.kind.Get(req.ctx, key); err == nil {
		return nil
	}
	for _, q := range limiting {
		written, err := qk.Update(req.ctx, qk.Key(q.Namespace, q.Name), store.UpdateOptions{Guess: q}, func(cur runtime.Object) (runtime.Object, error) {
			c := cur.(*corev1.ResourceQuota)
			counts := limitedBy(c, names)
			if len(counts) == 0 {
				return c, nil // the limit went meanwhile
			}
			for _, count := range counts {
				if err := roomFor(c, count); err != nil {
					return nil, err
				}
			}
			n := c.DeepCopy()
			for _, count := range counts {
				used := n.Status.Used[count]
				used.Add(resource.MustParse("1"))
				n.Status.Used[count] = used
			}
			return n, nil
		})
		var quotaErr quotaError
		switch {
		case err == nil:
			w := written.(*corev1.ResourceQuota)
			s.quotaWrites.Add(w.Namespace+"/"+w.Name, w)
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

// A namespace whose cached quotas are none has them read from etcd, and
// what etcd had is used for quotaLookupTTL, for up to quotaLookupEntries
// namespaces, as kube-apiserver's quota admission does: the cache may not
// hold a quota created a moment ago yet, which must limit the creates that
// follow it. Creates in a namespace without quotas pay one read of etcd
// every quotaLookupTTL. Concurrent creates that find no entry each read.
// A read that etcd does not answer within quotaLookupTimeout (one without
// a quorum) fails the create with kube-apiserver's 500, rather than
// holding it to the request's timeout.
const (
	quotaLookupTTL     = 30 * time.Second
	quotaLookupEntries = 100
	quotaLookupTimeout = 10 * time.Second
)

// quotaWriteEntries bounds the quotas newestQuota remembers.
const quotaWriteEntries = 100

// quotaLookup is what etcd had of a namespace's quotas, until expiry.
type quotaLookup struct {
	expiry time.Time
	quotas []runtime.Object
}

// liveQuotas returns the quotas of the request's namespace as etcd had them
// at most quotaLookupTTL ago.
func (s *Server) liveQuotas(req *request, qk objectStore) ([]runtime.Object, error) {
	ns := req.info.namespace
	now := s.clock.Now()
	if v, ok := s.quotaLookups.Get(ns); ok && now.Before(v.(quotaLookup).expiry) {
		return v.(quotaLookup).quotas, nil
	}
	ctx, cancel := context.WithTimeoutCause(req.ctx, quotaLookupTimeout, errQuotaTimeout)
	defer cancel()
	list, err := qk.List(ctx, store.ListOptions{Namespace: ns})
	if context.Cause(ctx) == errQuotaTimeout {
		return nil, apierrors.NewInternalError(errQuotaTimeout)
	}
	if err != nil {
		return nil, err
	}
	s.quotaLookups.Add(ns, quotaLookup{expiry: now.Add(quotaLookupTTL), quotas: list.Items})
	return list.Items, nil
}

// errQuotaTimeout is kube-apiserver's word for a quota check that did not
// finish in time.
var errQuotaTimeout = errors.New("resource quota evaluation timed out")

// created is told of every object the server created: a quota's namespace
// has what liveQuotas remembered of it forgotten, so that the creates after
// it are checked against it before the cache has it.
func (s *Server) created(req *request, dryRun bool) {
	if req.res == registry.ResourceQuotas && !dryRun {
		s.quotaLookups.Remove(req.info.namespace)
	}
}

// newestQuota returns q as cached, or as this server last charged it if
// that is newer: the cache may not hold the charges of the creates just
// before, and a dry run, which charges nothing, would be told there is
// room where there is none. (A create is checked again as it charges, on
// the quota as stored.) kube-apiserver's quota admission keeps the quotas
// it wrote for the same reason.
func (s *Server) newestQuota(q *corev1.ResourceQuota) *corev1.ResourceQuota {
	v, ok := s.quotaWrites.Get(q.Namespace + "/" + q.Name)
	if !ok {
		return q
	}
	w := v.(*corev1.ResourceQuota)
	if w.UID == q.UID && store.ResourceVersion(w) > store.ResourceVersion(q) {
		return w
	}
	s.quotaWrites.Remove(q.Namespace + "/" + q.Name) // the cache has caught up
	return q
}

// quotaError is a refusal by a quota, with Kubernetes' words.
type quotaError string

func (e quotaError) Error() string { return string(e) }

// limitedBy returns those of names, the names that count one resource,
// that q limits.
func limitedBy(q *corev1.ResourceQuota, names []corev1.ResourceName) []corev1.ResourceName {
	var limited []corev1.ResourceName
	for _, name := range names {
		if _, ok := q.Spec.Hard[name]; ok {
			limited = append(limited, name)
		}
	}
	return limited
}

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
