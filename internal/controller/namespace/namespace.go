// Package namespace is the namespace controller: when a namespace is being
// deleted (it has a deletionTimestamp and phase Terminating), it deletes
// every namespaced object in it through the API, waits until none is left
// (objects with finalizers go when their finalizers are done), saying in
// the namespace's status conditions what is left and what holds it, and
// then removes the "kubernetes" finalizer with the finalize subresource,
// upon which the server deletes the namespace.
//
// It is a client of the API like any other: an informer on namespaces feeds
// a rate-limited work queue with one worker; a namespace that still has
// content is retried with backoff.
package namespace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/registry"
)

// Config configures the controller.
type Config struct {
	// REST reaches the API server. Required.
	REST *rest.Config
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Clock dates the conditions; default the real clock.
	Clock clock.PassiveClock
}

// Controller finishes namespace deletions.
type Controller struct {
	client  kubernetes.Interface
	dynamic dynamic.Interface
	log     *slog.Logger
	clock   clock.PassiveClock
}

// New returns a controller.
func New(cfg Config) (*Controller, error) {
	if cfg.REST == nil {
		return nil, errors.New("namespace controller: REST is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	rc := rest.CopyConfig(cfg.REST)
	rc.UserAgent = "leasehold-namespace-controller"
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	d, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &Controller{client: c, dynamic: d, log: cfg.Logger, clock: cfg.Clock}, nil
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(c.client, 0)
	inf := factory.Core().V1().Namespaces()
	// Named as Kubernetes' namespace controller names its queue, for the
	// workqueue_* series.
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 5*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "namespace"})
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok && ns.DeletionTimestamp != nil {
			queue.Add(ns.Name)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return ctx.Err()
	}
	lister := inf.Lister()
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		name, quit := queue.Get()
		if quit {
			return ctx.Err()
		}
		ns, err := lister.Get(name)
		if err == nil && ns.DeletionTimestamp != nil {
			err = c.sync(ctx, ns)
		} else if apierrors.IsNotFound(err) {
			err = nil
		}
		if err != nil {
			c.log.Info("namespace not yet empty", "namespace", name, "reason", err)
			queue.AddRateLimited(name)
		} else {
			queue.Forget(name)
		}
		queue.Done(name)
	}
}

var background = metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}

// sync deletes the namespace's content and, once it is gone, finalizes it.
// Each attempt leaves kube-apiserver's namespace controller's five
// conditions in the namespace's status (kubectl describe namespace lists
// them): what is left, of which resources, and which finalizers hold it.
func (c *Controller) sync(ctx context.Context, ns *corev1.Namespace) error {
	// As Kubernetes' namespace controller: a namespace with any spec
	// finalizer left is emptied, its own "kubernetes" or only others'.
	if len(ns.Spec.Finalizers) == 0 {
		return nil
	}
	var (
		left       content
		deleteErrs []string
	)
	for _, r := range registry.All() {
		if !r.Namespaced || r.Virtual {
			continue
		}
		ri := c.dynamic.Resource(r.GroupVersionResource()).Namespace(ns.Name)
		// In the background, as Kubernetes' namespace controller deletes
		// content: the propagation policy takes away an orphan or
		// foregroundDeletion finalizer an object carries, so that an
		// owner is not kept waiting for its dependents, which go with the
		// namespace anyway.
		if err := ri.DeleteCollection(ctx, background, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
			deleteErrs = append(deleteErrs, fmt.Sprintf("deleting %s: %v", r.Name, err))
		}
		items, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing %s: %w", r.Name, err)
		}
		for _, item := range items.Items {
			left.add(r.Name+"."+r.GroupVersion.Group, item.GetFinalizers())
		}
	}
	if status := deletionConditions(ns.Status, left, deleteErrs, metav1.NewTime(c.clock.Now())); status != nil {
		updated := ns.DeepCopy()
		updated.Status = *status
		var err error
		if ns, err = c.client.CoreV1().Namespaces().UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("recording what is left: %w", err)
		}
	}
	switch {
	case len(deleteErrs) > 0:
		return errors.New(strings.Join(deleteErrs, "; "))
	case len(left.resources) > 0:
		return fmt.Errorf("%d objects left", left.objects)
	}
	if !slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes) {
		return nil // emptied; the others' finalizers are theirs to remove
	}
	fin := ns.DeepCopy()
	fin.Spec.Finalizers = slices.DeleteFunc(fin.Spec.Finalizers, func(f corev1.FinalizerName) bool { return f == corev1.FinalizerKubernetes })
	_, err := c.client.CoreV1().Namespaces().Finalize(ctx, fin, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// content counts what is left in a namespace being deleted: objects by
// resource (as "leases.coordination.k8s.io", or "events." in the core
// group, as Kubernetes names them here) and by finalizer.
type content struct {
	objects    int
	resources  map[string]int
	finalizers map[string]int
}

func (c *content) add(resource string, finalizers []string) {
	if c.resources == nil {
		c.resources, c.finalizers = map[string]int{}, map[string]int{}
	}
	c.objects++
	c.resources[resource]++
	for _, f := range finalizers {
		c.finalizers[f]++
	}
}

// deletionConditions returns status with the namespace controller's
// conditions set from what is left and the deletions that failed, or nil
// when they are as status has them already. A condition's transition time
// moves only when its status does, and its text is Kubernetes'.
func deletionConditions(status corev1.NamespaceStatus, left content, deleteErrs []string, now metav1.Time) *corev1.NamespaceStatus {
	want := []corev1.NamespaceCondition{
		{Type: corev1.NamespaceDeletionDiscoveryFailure, Status: corev1.ConditionFalse, Reason: "ResourcesDiscovered", Message: "All resources successfully discovered"},
		{Type: corev1.NamespaceDeletionGVParsingFailure, Status: corev1.ConditionFalse, Reason: "ParsedGroupVersions", Message: "All legacy kube types successfully parsed"},
		{Type: corev1.NamespaceDeletionContentFailure, Status: corev1.ConditionFalse, Reason: "ContentDeleted", Message: "All content successfully deleted, may be waiting on finalization"},
		{Type: corev1.NamespaceContentRemaining, Status: corev1.ConditionFalse, Reason: "ContentRemoved", Message: "All content successfully removed"},
		{Type: corev1.NamespaceFinalizersRemaining, Status: corev1.ConditionFalse, Reason: "ContentHasNoFinalizers", Message: "All content-preserving finalizers finished"},
	}
	if len(deleteErrs) > 0 {
		slices.Sort(deleteErrs)
		want[2].Status, want[2].Reason = corev1.ConditionTrue, "ContentDeletionFailed"
		want[2].Message = fmt.Sprintf("Failed to delete all resource types, %d remaining: %s", len(deleteErrs), strings.Join(deleteErrs, ", "))
	}
	if len(left.resources) > 0 {
		want[3].Status, want[3].Reason = corev1.ConditionTrue, "SomeResourcesRemain"
		want[3].Message = "Some resources are remaining: " + tally(left.resources, "%s has %d resource instances")
	}
	if len(left.finalizers) > 0 {
		want[4].Status, want[4].Reason = corev1.ConditionTrue, "SomeFinalizersRemain"
		want[4].Message = "Some content in the namespace has finalizers remaining: " + tally(left.finalizers, "%s in %d resource instances")
	}
	out := *status.DeepCopy()
	changed := false
	for _, w := range want {
		i := slices.IndexFunc(out.Conditions, func(c corev1.NamespaceCondition) bool { return c.Type == w.Type })
		if i < 0 {
			w.LastTransitionTime = now
			out.Conditions = append(out.Conditions, w)
			changed = true
			continue
		}
		have := &out.Conditions[i]
		if have.Status == w.Status && have.Reason == w.Reason && have.Message == w.Message {
			continue
		}
		if have.Status != w.Status {
			have.LastTransitionTime = now
		}
		have.Status, have.Reason, have.Message = w.Status, w.Reason, w.Message
		changed = true
	}
	if !changed {
		return nil
	}
	return &out
}

// tally formats each name of counts with its count, in name order.
func tally(counts map[string]int, format string) string {
	parts := make([]string, 0, len(counts))
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf(format, name, counts[name]))
	}
	return strings.Join(parts, ", ")
}
