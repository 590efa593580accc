// Package garbagecollector is leasehold's garbage collector: it deletes
// objects whose owners are gone, as Kubernetes' does, for every stored
// resource but Events (Ignored). An object names its owners in
// metadata.ownerReferences (apiVersion, kind, name, uid); when the last of
// them is deleted, the object is deleted too. The propagation policy of the
// owner's deletion decides how:
//
//   - Background (the default): the API server deletes the owner at once and
//     the collector deletes the dependents afterwards.
//   - Foreground: the API server marks the owner deleted and gives it the
//     foregroundDeletion finalizer; the collector deletes the dependents and,
//     once none whose reference has blockOwnerDeletion set is left, removes
//     the finalizer, upon which the server deletes the owner.
//   - Orphan: the API server gives the owner the orphan finalizer; the
//     collector removes the reference to it from every dependent and then
//     the finalizer, and the dependents stay.
//
// An owner counts as gone when a live read (not the cache, which may lag)
// finds no object of the referenced kind and name with the referenced uid.
// So a dependent created with a reference to a uid that never existed, or to
// an owner since replaced by another of the same name, is collected too. A
// namespaced owner is looked for in the dependent's namespace only, so an
// owner in another namespace counts as gone; a cluster-scoped object that
// names a namespaced owner, or an owner of a kind leasehold does not serve,
// is left alone. An object with several owners is deleted only when all are
// gone; while one remains, references to the gone ones are removed instead.
//
// Model: one feed per stored resource (package feed: a list, then a watch,
// of the objects' metadata) fills a graph of owner → dependents keyed by uid
// (the feeds' handlers change it under one lock). Changes that may make an object collectable put its uid on a
// rate-limited work queue: the owner disappearing, the owner starting a
// foreground deletion, a reference to an owner not (or not yet) seen, a
// reference that does not match the owner it names. Workers take uids off
// the queue, read the object and its owners live, and delete or patch
// through the API with preconditions on uid (and resourceVersion for
// deletes, so an object changed meanwhile is looked at again); failures are
// retried with backoff. A second queue handles orphaning. The collector is
// an API client like any other and acts with the credentials in its
// rest.Config (in leasehold serve, UserName's).
package garbagecollector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/controller/feed"
	"github.com/leasehold/leasehold/internal/registry"
)

// UserName is the identity the collector acts as, Kubernetes' own.
const UserName = "system:serviceaccount:kube-system:generic-garbage-collector"

// UserAgent is the User-Agent of its requests.
const UserAgent = "leasehold-garbage-collector"

// EventComponent is the source of the collector's Events, Kubernetes'
// collector's.
const EventComponent = "garbage-collector-controller"

// Ignored are the resources the collector never watches, as in
// Kubernetes (its collector's default ignored resources): Events, which
// are numerous and short-lived, expire by their TTL and own nothing. At
// 100 000 nodes, the RegisteredNode Events of one leader term alone would
// be 100 000 more objects in the graph. An Event's ownerReferences are
// therefore not acted on.
var Ignored = map[schema.GroupResource]struct{}{
	{Resource: "events"}: {},
}

// Config configures a GarbageCollector. Zero values mean defaults.
type Config struct {
	// REST reaches the API server with the collector's credentials.
	// Required. Its UserAgent is replaced by UserAgent; a zero QPS becomes
	// 50 (burst 100).
	REST *rest.Config
	// Resources are the resources to collect and to resolve owner kinds
	// against; default registry.All(). Virtual resources, resources served
	// from another's storage, and Ignored ones are not watched.
	Resources []*registry.Resource
	// Workers is the number of objects processed at once; default 4.
	Workers int
	// Reads, when set, lists and watches the resources for the graph in
	// place of REST's metadata client. leasehold serve passes its watch
	// cache's in-process reads (apiserver.Server.ListerWatcher): the
	// collector then sees the cached objects themselves, with no encoding,
	// HTTP or decoding, and holds no copy of them. Deletions and orphaning
	// always go through REST. Reads may hold back the changes for which
	// Changed is false (apiserver.OnlyChanges).
	Reads func(gvr schema.GroupVersionResource, namespace string) (cache.ListerWatcher, error)
	// Recorder receives the collector's Events: a Warning
	// OwnerRefInvalidNamespace on a dependent whose reference names a
	// namespaced owner seen in another namespace (the collector treats
	// that owner as absent), as Kubernetes' collector records it. By
	// default Run records them as core v1 Events through REST, from
	// EventComponent.
	Recorder record.EventRecorder
	// Clock drives retry backoff; default the real clock.
	Clock clock.WithTicker
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// GarbageCollector deletes objects whose owners are gone.
type GarbageCollector struct {
	cfg    Config
	log    *slog.Logger
	client metadata.Interface
	events typedcorev1.EventsGetter
	// recorder is Config.Recorder or the one Run makes, set before the
	// feeds start.
	recorder record.EventRecorder
	watched  []*registry.Resource
	byKind   map[schema.GroupVersionKind]*registry.Resource
	graph    *graph
	absent   *absentOwners
	toDelete workqueue.TypedRateLimitingInterface[types.UID]
	toOrphan workqueue.TypedRateLimitingInterface[types.UID]

	deletions  prometheus.Counter
	orphanings prometheus.Counter
	graphSize  prometheus.GaugeFunc

	runOnce sync.Once
	// synced is closed once the feeds have listed everything.
	synced chan struct{}
}

// New validates cfg and returns a collector; Run starts it.
func New(cfg Config) (*GarbageCollector, error) {
	if cfg.REST == nil {
		return nil, errors.New("garbage collector: REST is required")
	}
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("garbage collector: Workers must not be negative, got %d", cfg.Workers)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if cfg.Resources == nil {
		cfg.Resources = registry.All()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	rc := rest.CopyConfig(cfg.REST)
	rc.UserAgent = UserAgent
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	client, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("garbage collector: %w", err)
	}
	events, err := typedcorev1.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("garbage collector: %w", err)
	}
	gc := &GarbageCollector{
		cfg:    cfg,
		log:    cfg.Logger,
		client: client,
		events: events,
		byKind: map[schema.GroupVersionKind]*registry.Resource{},
		absent: newAbsentOwners(4096),
		synced: make(chan struct{}),
	}
	for _, r := range cfg.Resources {
		if r.Virtual {
			continue
		}
		if _, dup := gc.byKind[r.GroupVersionKind()]; !dup {
			gc.byKind[r.GroupVersionKind()] = r
		}
		if _, skip := Ignored[r.GroupResource()]; skip {
			continue
		}
		verbs := r.AllVerbs()
		if r.Storage == nil && slices.Contains(verbs, "list") && slices.Contains(verbs, "watch") && slices.Contains(verbs, "delete") {
			gc.watched = append(gc.watched, r)
		}
	}
	limiter := func() workqueue.TypedRateLimiter[types.UID] {
		return workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](5*time.Millisecond, 30*time.Second)
	}
	// Named as Kubernetes' collector names its queues, for the
	// workqueue_* series.
	gc.toDelete = workqueue.NewTypedRateLimitingQueueWithConfig(limiter(), workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "garbage_collector_attempt_to_delete", Clock: cfg.Clock})
	gc.toOrphan = workqueue.NewTypedRateLimitingQueueWithConfig(limiter(), workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "garbage_collector_attempt_to_orphan", Clock: cfg.Clock})
	gc.graph = newGraph(gc.toDelete.Add, gc.toOrphan.Add)
	gc.graph.reportNamespace = gc.reportInvalidNamespace
	gc.deletions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasehold_garbage_collector_deletions_total",
		Help: "Objects the garbage collector deleted because their owners were gone or being deleted.",
	})
	gc.orphanings = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasehold_garbage_collector_orphanings_total",
		Help: "Owner references the garbage collector removed from dependents of owners deleted with the Orphan policy.",
	})
	gc.graphSize = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "leasehold_garbage_collector_graph_nodes",
		Help: "Objects and unseen owners in the garbage collector's dependency graph.",
	}, func() float64 { return float64(gc.graph.size()) })
	return gc, nil
}

// Collectors are the collector's Prometheus metrics: deletions, orphaned
// references, and the size of its graph.
func (gc *GarbageCollector) Collectors() []prometheus.Collector {
	return []prometheus.Collector{gc.deletions, gc.orphanings, gc.graphSize}
}

// Run watches every stored resource and collects garbage until ctx ends,
// then returns nil once its goroutines have stopped. It may be called once.
func (gc *GarbageCollector) Run(ctx context.Context) error {
	started := false
	gc.runOnce.Do(func() { started = true })
	if !started {
		return errors.New("garbage collector: Run called twice")
	}
	defer gc.toDelete.ShutDown()
	defer gc.toOrphan.ShutDown()

	feeds, err := gc.feeds()
	if err != nil {
		return err
	}
	gc.recorder = gc.cfg.Recorder
	if gc.recorder == nil {
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: gc.events.Events("")})
		defer b.Shutdown()
		gc.recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventComponent})
	}
	hasSynced := make([]cache.InformerSynced, len(feeds))
	for i, f := range feeds {
		hasSynced[i] = f.HasSynced
	}
	feedCtx, stopFeeds := context.WithCancel(ctx)
	var running sync.WaitGroup
	for _, f := range feeds {
		running.Go(func() { _ = f.Run(feedCtx) })
	}
	defer running.Wait()
	defer stopFeeds()
	if !cache.WaitForCacheSync(ctx.Done(), hasSynced...) {
		return nil
	}
	close(gc.synced)
	gc.log.Info("garbage collector started", "resources", len(gc.watched), "graph", gc.graph.size())

	var wg sync.WaitGroup
	for range gc.cfg.Workers {
		wg.Go(func() {
			for gc.next(ctx, gc.toDelete, gc.attemptToDelete) {
			}
		})
		wg.Go(func() {
			for gc.next(ctx, gc.toOrphan, gc.attemptToOrphan) {
			}
		})
	}
	<-ctx.Done()
	gc.toDelete.ShutDown()
	gc.toOrphan.ShutDown()
	wg.Wait()
	return nil
}

// feeds returns a feed for each watched resource, read through
// Config.Reads or else through the metadata client.
func (gc *GarbageCollector) feeds() ([]*feed.Feed, error) {
	feeds := make([]*feed.Feed, len(gc.watched))
	for i, r := range gc.watched {
		var lw cache.ListerWatcher
		if gc.cfg.Reads != nil {
			var err error
			if lw, err = gc.cfg.Reads(r.GroupVersionResource(), ""); err != nil {
				return nil, fmt.Errorf("garbage collector: watching %s: %w", r.GroupResource(), err)
			}
		} else {
			ri := gc.client.Resource(r.GroupVersionResource())
			lw = feed.ListWatch(gc.client, ri.List, ri.Watch)
		}
		f, err := feed.New(feed.Config{ListerWatcher: lw, Handler: gc.handler(r), Clock: gc.cfg.Clock,
			Logger: gc.log.With("resource", r.GroupResource().String())})
		if err != nil {
			return nil, fmt.Errorf("garbage collector: watching %s: %w", r.GroupResource(), err)
		}
		feeds[i] = f
	}
	return feeds, nil
}

// reportInvalidNamespace records that dependent's reference r names a
// namespaced owner in another namespace, in the words of Kubernetes'
// collector. The recorder does not block (it drops Events when its queue
// is full), so the graph's lock may be held.
func (gc *GarbageCollector) reportInvalidNamespace(dependent objectRef, r metav1.OwnerReference) {
	if gc.recorder == nil {
		return
	}
	involved := &corev1.ObjectReference{Kind: dependent.res.Kind, APIVersion: dependent.res.GroupVersion.String(),
		Namespace: dependent.namespace, Name: dependent.name, UID: dependent.uid}
	gc.recorder.Eventf(involved, corev1.EventTypeWarning, "OwnerRefInvalidNamespace", "ownerRef [%s/%s, namespace: %s, name: %s, uid: %s] does not exist in namespace %q",
		r.APIVersion, r.Kind, dependent.namespace, r.Name, r.UID, dependent.namespace)
}

// handler feeds the graph from the feed of resource r.
func (gc *GarbageCollector) handler(r *registry.Resource) feed.Handler {
	return feed.Handler{
		Seen: func(obj runtime.Object, _ bool) {
			if m, err := meta.Accessor(obj); err == nil {
				gc.graph.observe(r, m)
			}
		},
		Gone: func(obj runtime.Object) {
			if m, err := meta.Accessor(obj); err == nil {
				gc.graph.forget(m.GetUID())
			}
		},
		Relisted: func(listed func(types.UID) bool) { gc.graph.forgetUnlisted(r, listed) },
	}
}

// next processes one uid from q; it returns false once q is shut down.
func (gc *GarbageCollector) next(ctx context.Context, q workqueue.TypedRateLimitingInterface[types.UID], process func(context.Context, types.UID) error) bool {
	uid, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(uid)
	if err := process(ctx, uid); err != nil {
		if ctx.Err() == nil {
			gc.log.Info("garbage collector will retry", "uid", uid, "reason", err)
			q.AddRateLimited(uid)
		}
		return true
	}
	q.Forget(uid)
	return true
}

// resource returns the client for the resource and namespace of ref.
func (gc *GarbageCollector) resource(ref objectRef) metadata.ResourceInterface {
	ri := gc.client.Resource(ref.res.GroupVersionResource())
	if ref.res.Namespaced {
		return ri.Namespace(ref.namespace)
	}
	return ri
}

// attemptToDelete looks at the object with uid live and deletes it if all
// its owners are gone or waiting for their dependents' deletion; removes
// references to gone owners while another owner remains; and, for an object
// in foreground deletion, removes its finalizer once no dependent blocks it.
func (gc *GarbageCollector) attemptToDelete(ctx context.Context, uid types.UID) error {
	v, ok := gc.graph.view(uid)
	if !ok || v.virtual {
		return nil
	}
	if v.ownersSolid && !v.deleting {
		// Queued while an owner was not yet observed (a Lease seen before
		// its Node, as every feed fills at a term's start), and every
		// owner has turned up since: nothing to do, and no live reads. Were
		// the graph behind, the owner's deletion still to come queues the
		// object again.
		return nil
	}
	latest, err := gc.resource(v.ref).Get(ctx, v.ref.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil // the feed will report the deletion
	case err != nil:
		return err
	case latest.UID != uid:
		return nil
	}
	if latest.DeletionTimestamp != nil {
		if slices.Contains(latest.Finalizers, metav1.FinalizerDeleteDependents) {
			return gc.finishForeground(ctx, v)
		}
		return nil // on its way out
	}
	refs := latest.OwnerReferences
	if len(refs) == 0 {
		return nil
	}
	var solid, gone, waiting []metav1.OwnerReference
	for _, r := range refs {
		s, err := gc.ownerState(ctx, v.ref, r)
		if err != nil {
			return err
		}
		switch s {
		case ownerUnresolvable:
			gc.log.Warn("garbage collector ignores object with an owner reference it cannot resolve",
				"resource", v.ref.res.GroupResource(), "namespace", v.ref.namespace, "name", v.ref.name,
				"ownerAPIVersion", r.APIVersion, "ownerKind", r.Kind, "ownerName", r.Name)
			return nil
		case ownerGone:
			gone = append(gone, r)
		case ownerWaiting:
			waiting = append(waiting, r)
		default:
			solid = append(solid, r)
		}
	}
	switch {
	case len(solid) > 0:
		if len(gone)+len(waiting) == 0 {
			return nil
		}
		// Kubernetes' rule: an object with a live owner stays; it just
		// loses its references to owners that are gone or waiting on it.
		var uids []types.UID
		for _, r := range append(gone, waiting...) {
			uids = append(uids, r.UID)
		}
		return gc.removeOwnerRefs(ctx, v.ref, uids)
	case len(waiting) > 0 && len(v.dependents) > 0:
		// An owner waits for this object, which has dependents of its own:
		// delete it in the foreground too. When a dependent of it waits as
		// well, a cycle may exist; unblock the owners to break it.
		if len(v.busy) > 0 {
			if err := gc.unblockOwners(ctx, v.ref, latest); err != nil {
				return err
			}
		}
		return gc.deleteObject(ctx, v.ref, latest, metav1.DeletePropagationForeground)
	default:
		policy := metav1.DeletePropagationBackground
		switch {
		case slices.Contains(latest.Finalizers, metav1.FinalizerOrphanDependents):
			policy = metav1.DeletePropagationOrphan
		case slices.Contains(latest.Finalizers, metav1.FinalizerDeleteDependents):
			policy = metav1.DeletePropagationForeground
		}
		return gc.deleteObject(ctx, v.ref, latest, policy)
	}
}

// finishForeground removes the foregroundDeletion finalizer of an owner no
// dependent blocks any longer, or asks again for the deletion of those that
// still do (their deletion brings the owner back onto the queue).
func (gc *GarbageCollector) finishForeground(ctx context.Context, v view) error {
	if len(v.blocking) == 0 {
		return gc.removeFinalizer(ctx, v.ref, metav1.FinalizerDeleteDependents)
	}
	for _, d := range v.blocking {
		if !slices.Contains(v.busy, d) {
			gc.toDelete.Add(d.uid)
		}
	}
	return nil
}

// attemptToOrphan removes the references to an owner being deleted with
// the Orphan policy from its dependents, then its orphan finalizer.
func (gc *GarbageCollector) attemptToOrphan(ctx context.Context, uid types.UID) error {
	v, ok := gc.graph.view(uid)
	if !ok || v.virtual || !v.orphan {
		return nil
	}
	var errs []error
	for _, d := range v.dependents {
		err := gc.removeOwnerRefs(ctx, d, []types.UID{uid})
		switch {
		case err == nil:
			gc.orphanings.Inc()
		case !apierrors.IsNotFound(err):
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("orphaning dependents of %s %s: %w", v.ref.res.Kind, v.ref.name, err)
	}
	return gc.removeFinalizer(ctx, v.ref, metav1.FinalizerOrphanDependents)
}

// ownerState says what became of the owner that dependent refers to with r.
type ownerState int

const (
	ownerSolid        ownerState = iota // exists and is not waiting for its dependents
	ownerGone                           // no object of that kind, name and uid
	ownerWaiting                        // exists, deleted in the foreground
	ownerUnresolvable                   // a kind leasehold does not serve, or a namespaced owner of a cluster-scoped object
)

// ownerState reads the owner named by r live, as the feed may lag.
func (gc *GarbageCollector) ownerState(ctx context.Context, dependent objectRef, r metav1.OwnerReference) (ownerState, error) {
	res, ok := gc.resolve(r)
	if !ok {
		return ownerUnresolvable, nil
	}
	if res.Namespaced && dependent.namespace == "" {
		return ownerUnresolvable, nil
	}
	owner := objectRef{res: res, name: r.Name, uid: r.UID}
	if res.Namespaced {
		owner.namespace = dependent.namespace
	}
	key := absentKey{gr: res.GroupResource(), namespace: owner.namespace, name: owner.name, uid: owner.uid}
	if gc.absent.has(key) {
		return ownerGone, nil
	}
	got, err := gc.resource(owner).Get(ctx, owner.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		gc.absent.add(key)
		return ownerGone, nil
	case err != nil:
		return 0, err
	case got.UID != r.UID:
		gc.absent.add(key)
		return ownerGone, nil
	case got.DeletionTimestamp != nil && slices.Contains(got.Finalizers, metav1.FinalizerDeleteDependents):
		return ownerWaiting, nil
	}
	return ownerSolid, nil
}

// resolve maps an owner reference's apiVersion and kind to a resource.
func (gc *GarbageCollector) resolve(r metav1.OwnerReference) (*registry.Resource, bool) {
	gv, err := schema.ParseGroupVersion(r.APIVersion)
	if err != nil {
		return nil, false
	}
	res, ok := gc.byKind[gv.WithKind(r.Kind)]
	return res, ok
}

// deleteObject deletes the object if it is still the one read as latest.
func (gc *GarbageCollector) deleteObject(ctx context.Context, ref objectRef, latest *metav1.PartialObjectMetadata, policy metav1.DeletionPropagation) error {
	uid, rv := latest.UID, latest.ResourceVersion
	err := gc.resource(ref).Delete(ctx, ref.name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
		PropagationPolicy: &policy,
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("deleting %s %s/%s: %w", ref.res.Kind, ref.namespace, ref.name, err)
	}
	gc.deletions.Inc()
	gc.log.Info("garbage collector deleted object", "resource", ref.res.GroupResource(), "namespace", ref.namespace, "name", ref.name, "uid", uid, "propagationPolicy", policy)
	return nil
}

// removeOwnerRefs removes the references to owners from the object, with a
// strategic merge patch that also checks the object's uid.
func (gc *GarbageCollector) removeOwnerRefs(ctx context.Context, ref objectRef, owners []types.UID) error {
	del := make([]map[string]any, 0, len(owners))
	for _, u := range owners {
		del = append(del, map[string]any{"$patch": "delete", "uid": u})
	}
	return gc.patch(ctx, ref, types.StrategicMergePatchType, map[string]any{
		"metadata": map[string]any{"uid": ref.uid, "ownerReferences": del},
	})
}

// removeFinalizer removes one finalizer from the object.
func (gc *GarbageCollector) removeFinalizer(ctx context.Context, ref objectRef, finalizer string) error {
	err := gc.patch(ctx, ref, types.StrategicMergePatchType, map[string]any{
		"metadata": map[string]any{"uid": ref.uid, "$deleteFromPrimitiveList/finalizers": []string{finalizer}},
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// unblockOwners clears blockOwnerDeletion on the object's references, with a
// JSON patch that tests the references are still where latest had them.
func (gc *GarbageCollector) unblockOwners(ctx context.Context, ref objectRef, latest *metav1.PartialObjectMetadata) error {
	ops := []map[string]any{{"op": "test", "path": "/metadata/uid", "value": latest.UID}}
	for i, r := range latest.OwnerReferences {
		if !blocks(r) {
			continue
		}
		p := fmt.Sprintf("/metadata/ownerReferences/%d", i)
		ops = append(ops,
			map[string]any{"op": "test", "path": p + "/uid", "value": r.UID},
			map[string]any{"op": "replace", "path": p + "/blockOwnerDeletion", "value": false})
	}
	if len(ops) == 1 {
		return nil
	}
	return gc.patch(ctx, ref, types.JSONPatchType, ops)
}

func (gc *GarbageCollector) patch(ctx context.Context, ref objectRef, pt types.PatchType, body any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	if _, err := gc.resource(ref).Patch(ctx, ref.name, pt, data, metav1.PatchOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return err
		}
		return fmt.Errorf("patching %s %s/%s: %w", ref.res.Kind, ref.namespace, ref.name, err)
	}
	return nil
}

// absentKey names an owner a live read did not find.
type absentKey struct {
	gr        schema.GroupResource
	namespace string
	name      string
	uid       types.UID
}

// absentOwners remembers owners found gone, sparing reads when many
// dependents name the same one. A uid never comes back, so entries never
// go stale; the set is emptied when it reaches its bound.
type absentOwners struct {
	mu   sync.Mutex
	max  int
	keys map[absentKey]struct{}
}

func newAbsentOwners(max int) *absentOwners {
	return &absentOwners{max: max, keys: map[absentKey]struct{}{}}
}

func (a *absentOwners) has(k absentKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.keys[k]
	return ok
}

func (a *absentOwners) add(k absentKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.keys) >= a.max {
		clear(a.keys)
	}
	a.keys[k] = struct{}{}
}
