// Package resourcequota is the resource quota controller: it keeps each
// ResourceQuota's status counted, as Kubernetes' does for object counts.
//
// The API server charges a quota when it admits a create (status.used
// goes up by one before the object is stored), so that a namespace never
// holds more objects than its quota allows. The controller does the rest:
//
//   - when a quota is created or its spec.hard changes, it sets
//     status.hard to spec.hard and counts status.used, so that the quota
//     takes effect (until then the API server refuses creates it limits,
//     its status being unknown, as Kubernetes does);
//   - when an object of a resource a quota limits is deleted (by a user,
//     the garbage collector, the namespace controller, or an Event's
//     time to live), it counts that namespace again, so that the place is
//     free within a moment;
//   - every ResyncPeriod it counts every namespace with a quota again,
//     which also corrects a charge whose create then failed.
//
// Counts are read from the watch cache (Config.Reads) with a consistent
// list; writes go through the API.
package resourcequota

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/controller/feed"
	"github.com/leasehold/leasehold/internal/registry"
)

// UserName is the controller's identity, Kubernetes' own for it.
const UserName = "system:serviceaccount:kube-system:resourcequota-controller"

// DefaultResyncPeriod is kube-controller-manager's
// --resource-quota-sync-period.
const DefaultResyncPeriod = 5 * time.Minute

// Config configures the controller.
type Config struct {
	// Client writes quotas' status. Required.
	Client kubernetes.Interface
	// Reads lists and watches the resources in process. Required.
	Reads func(gvr schema.GroupVersionResource, namespace string) (cache.ListerWatcher, error)
	// DeletionReads, when set, watches the resources whose deletions the
	// controller follows in place of Reads: the controller reads nothing
	// of their changes, so that these reads may hold them back (a Lease's
	// renewals, thousands a second, among them).
	DeletionReads func(gvr schema.GroupVersionResource, namespace string) (cache.ListerWatcher, error)
	// Resources are the namespaced resources a quota may count; default
	// every namespaced resource leasehold stores.
	Resources []*registry.Resource
	// ResyncPeriod; default DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// Clock; default the real clock.
	Clock clock.WithTicker
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Controller keeps quotas counted.
type Controller struct {
	cfg       Config
	byCount   map[corev1.ResourceName]*registry.Resource
	followed  []*registry.Resource // whose deletions are watched
	log       *slog.Logger
	mu        sync.Mutex
	quotas    map[types.UID]string // quota uid → its namespace
	inNS      map[string]int       // namespace → its quotas
	dirty     map[string]struct{}  // namespaces to count again
	wake      chan struct{}
	recounted int // namespaces counted, for tests
}

// New validates cfg and returns a controller.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Reads == nil {
		return nil, errors.New("resourcequota: Client and Reads are required")
	}
	if cfg.Resources == nil {
		for _, r := range registry.All() {
			if r.Namespaced && !r.Virtual {
				cfg.Resources = append(cfg.Resources, r)
			}
		}
	}
	// A resource stored as another (events.k8s.io Events are core
	// Events) is counted, and followed, as the one stored.
	stored := func(r *registry.Resource) *registry.Resource {
		if r.Storage != nil {
			return r.Storage
		}
		return r
	}
	if cfg.DeletionReads == nil {
		cfg.DeletionReads = cfg.Reads
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = DefaultResyncPeriod
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Controller{cfg: cfg, log: cfg.Logger, byCount: map[corev1.ResourceName]*registry.Resource{},
		quotas: map[types.UID]string{}, inNS: map[string]int{}, dirty: map[string]struct{}{}, wake: make(chan struct{}, 1)}
	for _, r := range cfg.Resources {
		for _, name := range registry.CountNames(r) {
			c.byCount[name] = stored(r)
		}
		if r.Storage == nil {
			c.followed = append(c.followed, r)
		}
	}
	return c, nil
}

// Run follows the quotas and the resources they may count, and counts
// until ctx ends; it returns an error only if it cannot start.
func (c *Controller) Run(ctx context.Context) error {
	// Made before anything waits on the clock, so that a test's step of
	// its fake clock always reaches it.
	resync := c.cfg.Clock.NewTicker(c.cfg.ResyncPeriod)
	defer resync.Stop()
	var feeds []*feed.Feed
	quotaLW, err := c.cfg.Reads(corev1.SchemeGroupVersion.WithResource(registry.ResourceQuotas.Name), "")
	if err != nil {
		return fmt.Errorf("resourcequota: %w", err)
	}
	qf, err := feed.New(feed.Config{ListerWatcher: quotaLW, Handler: c.quotaHandler(), Clock: c.cfg.Clock, Logger: c.log.With("resource", "resourcequotas")})
	if err != nil {
		return fmt.Errorf("resourcequota: %w", err)
	}
	feeds = append(feeds, qf)
	for _, r := range c.followed {
		lw, err := c.cfg.DeletionReads(r.GroupVersion.WithResource(r.Name), "")
		if err != nil {
			return fmt.Errorf("resourcequota: %w", err)
		}
		f, err := feed.New(feed.Config{ListerWatcher: lw, Handler: feed.Handler{
			Seen: func(runtime.Object, bool) {},
			Gone: func(obj runtime.Object) {
				if m, err := meta.Accessor(obj); err == nil {
					c.markIfLimited(m.GetNamespace())
				}
			},
			Relisted: func(func(types.UID) bool) { c.markAll() },
		}, Clock: c.cfg.Clock, Logger: c.log.With("resource", r.Name)})
		if err != nil {
			return fmt.Errorf("resourcequota: %w", err)
		}
		feeds = append(feeds, f)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, f := range feeds {
		wg.Go(func() { _ = f.Run(ctx) })
	}
	synced := make([]cache.InformerSynced, len(feeds))
	for i, f := range feeds {
		synced[i] = f.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil
	}
	c.log.Info("resource quota controller started", "resources", len(c.cfg.Resources), "resyncPeriod", c.cfg.ResyncPeriod)
	c.markAll()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-resync.C():
			c.markAll()
			continue
		case <-c.wake:
		}
		c.mu.Lock()
		dirty := c.dirty
		c.dirty = map[string]struct{}{}
		c.mu.Unlock()
		for _, ns := range slices.Sorted(maps.Keys(dirty)) {
			if err := c.count(ctx, ns); err != nil && ctx.Err() == nil {
				c.log.Info("counting quotas failed, trying again", "namespace", ns, "err", err)
				c.mark(ns)
			}
			c.mu.Lock()
			c.recounted++
			c.mu.Unlock()
		}
	}
}

// quotaHandler follows which namespaces have quotas; a quota added or
// changed is counted.
func (c *Controller) quotaHandler() feed.Handler {
	return feed.Handler{
		Seen: func(obj runtime.Object, _ bool) {
			q := obj.(*corev1.ResourceQuota)
			c.mu.Lock()
			if _, ok := c.quotas[q.UID]; !ok {
				c.quotas[q.UID] = q.Namespace
				c.inNS[q.Namespace]++
			}
			c.mu.Unlock()
			if !apiequality.Semantic.DeepEqual(q.Spec.Hard, q.Status.Hard) {
				c.mark(q.Namespace)
			}
		},
		Gone: func(obj runtime.Object) {
			q := obj.(*corev1.ResourceQuota)
			c.mu.Lock()
			defer c.mu.Unlock()
			c.forgetLocked(q.UID)
		},
		Relisted: func(listed func(types.UID) bool) {
			c.mu.Lock()
			defer c.mu.Unlock()
			for uid := range c.quotas {
				if !listed(uid) {
					c.forgetLocked(uid)
				}
			}
		},
	}
}

func (c *Controller) forgetLocked(uid types.UID) {
	ns, ok := c.quotas[uid]
	if !ok {
		return
	}
	delete(c.quotas, uid)
	if c.inNS[ns]--; c.inNS[ns] == 0 {
		delete(c.inNS, ns)
	}
}

// mark has the namespace counted again.
func (c *Controller) mark(ns string) {
	c.mu.Lock()
	c.dirty[ns] = struct{}{}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// markIfLimited marks ns if it has a quota.
func (c *Controller) markIfLimited(ns string) {
	c.mu.Lock()
	limited := c.inNS[ns] > 0
	c.mu.Unlock()
	if limited {
		c.mark(ns)
	}
}

// markAll marks every namespace with a quota.
func (c *Controller) markAll() {
	c.mu.Lock()
	namespaces := slices.Collect(maps.Keys(c.inNS))
	c.mu.Unlock()
	for _, ns := range namespaces {
		c.mark(ns)
	}
}

// count counts the quotas of ns and writes the status of those that
// changed. A quota changed meanwhile (a create charged it) is counted
// again.
func (c *Controller) count(ctx context.Context, ns string) error {
	quotas := c.cfg.Client.CoreV1().ResourceQuotas(ns)
	list, err := quotas.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	counts := map[corev1.ResourceName]int64{}
	for i := range list.Items {
		q := &list.Items[i]
		status := corev1.ResourceQuotaStatus{Hard: q.Spec.Hard.DeepCopy(), Used: corev1.ResourceList{}}
		for name := range q.Spec.Hard {
			n, known := counts[name]
			if !known {
				if n, err = c.objects(ctx, ns, name); err != nil {
					return err
				}
				counts[name] = n
			}
			status.Used[name] = *resource.NewQuantity(n, resource.DecimalSI)
		}
		if apiequality.Semantic.DeepEqual(q.Status, status) {
			continue
		}
		q.Status = status
		if _, err := quotas.UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				c.mark(ns) // charged or changed meanwhile: count again
				continue
			}
			return err
		}
		c.log.Debug("quota counted", "namespace", ns, "quota", q.Name, "used", usedString(status.Used))
	}
	return nil
}

// objects counts the objects of the resource a count name names in ns,
// with a consistent list of the watch cache; 0 for a resource leasehold
// does not serve.
func (c *Controller) objects(ctx context.Context, ns string, name corev1.ResourceName) (int64, error) {
	r, ok := c.byCount[name]
	if !ok {
		return 0, nil
	}
	lw, err := c.cfg.Reads(r.GroupVersion.WithResource(r.Name), ns)
	if err != nil {
		return 0, err
	}
	list, err := cache.ToListerWatcherWithContext(lw).ListWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	return int64(meta.LenList(list)), nil
}

func usedString(l corev1.ResourceList) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		v := l[k]
		parts = append(parts, string(k)+"="+v.String())
	}
	return strings.Join(parts, ",")
}
