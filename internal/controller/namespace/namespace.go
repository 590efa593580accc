// Package namespace is the namespace controller: when a namespace is being
// deleted (it has a deletionTimestamp and phase Terminating), it deletes
// every namespaced object in it through the API, waits until none is left
// (objects with finalizers go when their finalizers are done), and then
// removes the "kubernetes" finalizer with the finalize subresource, upon
// which the server deletes the namespace.
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
	"slices"
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

	"github.com/leasehold/leasehold/internal/registry"
)

// Config configures the controller.
type Config struct {
	// REST reaches the API server. Required.
	REST *rest.Config
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Controller finishes namespace deletions.
type Controller struct {
	client  kubernetes.Interface
	dynamic dynamic.Interface
	log     *slog.Logger
}

// New returns a controller.
func New(cfg Config) (*Controller, error) {
	if cfg.REST == nil {
		return nil, errors.New("namespace controller: REST is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
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
	return &Controller{client: c, dynamic: d, log: cfg.Logger}, nil
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(c.client, 0)
	inf := factory.Core().V1().Namespaces()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 5*time.Second))
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

// sync deletes the namespace's content and, once it is gone, finalizes it.
func (c *Controller) sync(ctx context.Context, ns *corev1.Namespace) error {
	if !slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes) {
		return nil
	}
	remaining := 0
	for _, r := range registry.All() {
		if !r.Namespaced || r.Virtual {
			continue
		}
		ri := c.dynamic.Resource(r.GroupVersionResource()).Namespace(ns.Name)
		if err := ri.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s: %w", r.Name, err)
		}
		left, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing %s: %w", r.Name, err)
		}
		remaining += len(left.Items)
	}
	if remaining > 0 {
		return fmt.Errorf("%d objects left", remaining)
	}
	fin := ns.DeepCopy()
	fin.Spec.Finalizers = slices.DeleteFunc(fin.Spec.Finalizers, func(f corev1.FinalizerName) bool { return f == corev1.FinalizerKubernetes })
	_, err := c.client.CoreV1().Namespaces().Finalize(ctx, fin, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
