// Package clusterroleaggregation keeps aggregated ClusterRoles current, as
// Kubernetes' controller of the same name does: a ClusterRole with an
// aggregationRule holds the union of the rules of every other ClusterRole
// its label selectors match, so adding a ClusterRole labelled, for example,
// rbac.authorization.k8s.io/aggregate-to-view: "true" extends view.
//
// It is a client of the API: an informer on ClusterRoles feeds a
// rate-limited work queue with one worker. Any change to any ClusterRole
// queues every aggregated one; the worker recomputes a role's rules and
// updates it when they differ. Run ends when ctx ends.
package clusterroleaggregation

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/leasehold/leasehold/internal/auth"
)

// UserName is the identity the controller acts as, Kubernetes' own.
const UserName = "system:serviceaccount:kube-system:clusterrole-aggregation-controller"

// Config configures the controller.
type Config struct {
	// REST reaches the API server. Required unless Client is set.
	REST *rest.Config
	// Client overrides REST (tests).
	Client kubernetes.Interface
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Controller aggregates ClusterRoles.
type Controller struct {
	client kubernetes.Interface
	log    *slog.Logger
}

// New returns a controller.
func New(cfg Config) (*Controller, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := cfg.Client
	if c == nil {
		if cfg.REST == nil {
			return nil, errors.New("clusterrole aggregation: REST or Client is required")
		}
		rc := rest.CopyConfig(cfg.REST)
		rc.UserAgent = "leasehold-clusterrole-aggregation-controller"
		var err error
		if c, err = kubernetes.NewForConfig(rc); err != nil {
			return nil, err
		}
	}
	return &Controller{client: c, log: cfg.Logger}, nil
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(c.client, 0)
	inf := factory.Rbac().V1().ClusterRoles()
	lister := inf.Lister()
	// Named as Kubernetes' aggregation controller names its queue, for
	// the workqueue_* series.
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "ClusterRoleAggregator"})
	defer queue.ShutDown()
	enqueueAll := func(any) {
		roles, err := lister.List(labels.Everything())
		if err != nil {
			return
		}
		for _, r := range roles {
			if r.AggregationRule != nil {
				queue.Add(r.Name)
			}
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueAll,
		UpdateFunc: func(_, obj any) { enqueueAll(obj) },
		DeleteFunc: enqueueAll,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return ctx.Err()
	}
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		name, quit := queue.Get()
		if quit {
			return nil
		}
		if err := c.sync(ctx, lister, name); err != nil {
			if ctx.Err() == nil {
				c.log.Warn("aggregating cluster role; retrying", "clusterrole", name, "err", err)
			}
			queue.AddRateLimited(name)
		} else {
			queue.Forget(name)
		}
		queue.Done(name)
	}
}

func (c *Controller) sync(ctx context.Context, lister rbaclisters.ClusterRoleLister, name string) error {
	role, err := lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || role.AggregationRule == nil {
		return err
	}
	all, err := lister.List(labels.Everything())
	if err != nil {
		return err
	}
	rules, err := auth.AggregatedRules(role, all)
	if err != nil {
		return err
	}
	if rules == nil {
		rules = []rbacv1.PolicyRule{}
	}
	if reflect.DeepEqual(rules, role.Rules) || (len(rules) == 0 && len(role.Rules) == 0) {
		return nil
	}
	updated := role.DeepCopy()
	updated.Rules = rules
	_, err = c.client.RbacV1().ClusterRoles().Update(ctx, updated, metav1.UpdateOptions{FieldManager: "clusterrole-aggregation-controller"})
	if err == nil {
		c.log.Info("aggregated cluster role updated", "clusterrole", name, "rules", len(rules))
	}
	return err
}
