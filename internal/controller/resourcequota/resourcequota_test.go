package resourcequota_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	watchtools "k8s.io/client-go/tools/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/controller/resourcequota"
)

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

const leaseCount = corev1.ResourceName("count/leases.coordination.k8s.io")

// start runs a server and the controller on it, and makes the namespace
// team with a quota of limit leases.
func start(t *testing.T, limit int64) (kubernetes.Interface, context.Context) {
	t.Helper()
	s := apiservertest.Start(t, apiservertest.Options{})
	cs := kubernetes.NewForConfigOrDie(s.Config)
	c, err := resourcequota.New(resourcequota.Config{Client: cs, Reads: s.API.ListerWatcher, Logger: slog.New(slog.NewTextHandler(logWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "leases"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{leaseCount: *resource.NewQuantity(limit, resource.DecimalSI)}}}
	if _, err := cs.CoreV1().ResourceQuotas("team").Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, ctx, cs, 0)
	return cs, ctx
}

// waitUsed waits until the quota of team says want leases are used.
func waitUsed(t *testing.T, ctx context.Context, cs kubernetes.Interface, want int64) {
	t.Helper()
	waitUsedIn(t, ctx, cs, "team", want)
}

// waitUsedIn waits until the quota "leases" of ns says want leases are
// used.
func waitUsedIn(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string, want int64) {
	t.Helper()
	quotas := cs.CoreV1().ResourceQuotas(ns)
	q, err := quotas.Get(ctx, "leases", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if used, ok := q.Status.Used[leaseCount]; ok && used.Value() == want {
		return
	}
	w, err := quotas.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "leases").String(), ResourceVersion: q.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watchtools.UntilWithoutRetry(ctx, w, func(ev watch.Event) (bool, error) {
		q, ok := ev.Object.(*corev1.ResourceQuota)
		used, counted := q.Status.Used[leaseCount]
		return ok && counted && used.Value() == want, nil
	}); err != nil {
		t.Fatalf("waiting for %d leases used: %v", want, err)
	}
}

func lease(name string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// TestQuotaLimitsCreates: at most the quota's number of leases is created,
// with Kubernetes' refusal for the next; a deletion frees a place.
func TestQuotaLimitsCreates(t *testing.T) {
	cs, ctx := start(t, 2)
	leases := cs.CoordinationV1().Leases("team")
	for i, name := range []string{"a", "b"} {
		if _, err := leases.Create(ctx, lease(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			continue
		}
		// Creates of a lease that exists get 409 and charge nothing.
		for range 3 {
			if _, err := leases.Create(ctx, lease("a"), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
				t.Fatalf("creating lease a again: %v, want 409", err)
			}
		}
		if q, err := cs.CoreV1().ResourceQuotas("team").Get(ctx, "leases", metav1.GetOptions{}); err != nil || q.Status.Used.Name(leaseCount, resource.DecimalSI).Value() != 1 {
			t.Errorf("after three creates of an existing lease: quota used %v, %v; want 1", q.Status.Used, err)
		}
	}
	if _, err := leases.Create(ctx, lease("c"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("a dry run beyond the quota: %v, want 403", err)
	}
	_, err := leases.Create(ctx, lease("c"), metav1.CreateOptions{})
	want := `leases.coordination.k8s.io "c" is forbidden: exceeded quota: leases, requested: count/leases.coordination.k8s.io=1, used: count/leases.coordination.k8s.io=2, limited: count/leases.coordination.k8s.io=2`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Fatalf("the third lease: %v, want 403 %q", err, want)
	}
	if err := leases.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, ctx, cs, 1)
	if _, err := leases.Create(ctx, lease("c"), metav1.CreateOptions{}); err != nil {
		t.Errorf("after a deletion: %v", err)
	}
	// Other namespaces and resources are not limited.
	if _, err := cs.CoordinationV1().Leases("default").Create(ctx, lease("free"), metav1.CreateOptions{}); err != nil {
		t.Errorf("a lease in default: %v", err)
	}
}

// TestQuotaResourceQuotas: a quota may count ResourceQuotas by the older
// name resourcequotas as well as count/resourcequotas, as in Kubernetes:
// both are counted, and both limit.
func TestQuotaResourceQuotas(t *testing.T) {
	cs, ctx := start(t, 5)
	quotas := cs.CoreV1().ResourceQuotas("team")
	q, err := quotas.Get(ctx, "leases", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Spec.Hard[corev1.ResourceQuotas] = resource.MustParse("3")
	q.Spec.Hard["count/resourcequotas"] = resource.MustParse("4")
	if _, err := quotas.Update(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	counted := func(q *corev1.ResourceQuota) bool {
		used, ok := q.Status.Used[corev1.ResourceQuotas]
		all, ok2 := q.Status.Used["count/resourcequotas"]
		return ok && ok2 && used.Value() == 1 && all.Value() == 1
	}
	w, err := quotas.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "leases").String()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watchtools.UntilWithoutRetry(ctx, w, func(ev watch.Event) (bool, error) {
		q, ok := ev.Object.(*corev1.ResourceQuota)
		return ok && counted(q), nil
	}); err != nil {
		t.Fatalf("waiting for the quota to count itself by both names: %v", err)
	}
	for _, name := range []string{"q2", "q3"} {
		if _, err := quotas.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("quota %s: %v", name, err)
		}
	}
	_, err = quotas.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q4"}}, metav1.CreateOptions{})
	want := `resourcequotas "q4" is forbidden: exceeded quota: leases, requested: resourcequotas=1, used: resourcequotas=3, limited: resourcequotas=3`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Fatalf("a fourth quota: %v, want 403 %q", err, want)
	}
	q, err = quotas.Get(ctx, "leases", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if used := q.Status.Used["count/resourcequotas"]; used.Value() != 3 {
		t.Errorf("count/resourcequotas used %s, want 3", used.String())
	}
}

// TestQuotaConcurrentCreates: of 20 creates at once against a quota of
// 10, exactly 10 succeed, and the status counts them.
func TestQuotaConcurrentCreates(t *testing.T) {
	cs, ctx := start(t, 10)
	leases := cs.CoordinationV1().Leases("team")
	var ok, refused atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			_, err := leases.Create(ctx, lease(fmt.Sprintf("l%d", i)), metav1.CreateOptions{})
			switch {
			case err == nil:
				ok.Add(1)
			case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
				refused.Add(1)
			default:
				t.Errorf("create l%d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 10 || refused.Load() != 10 {
		t.Errorf("%d created, %d refused; want 10 and 10", ok.Load(), refused.Load())
	}
	list, err := leases.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 10 {
		t.Errorf("%d leases in the namespace (%v), want 10", len(list.Items), err)
	}
	waitUsed(t, ctx, cs, 10)
}

// TestQuotaStatusUnknown: a limit the controller has not counted yet
// refuses creates, as in Kubernetes.
func TestQuotaStatusUnknown(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	cs := kubernetes.NewForConfigOrDie(s.Config)
	ctx := context.Background()
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "leases"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{leaseCount: resource.MustParse("5")}}}
	if _, err := cs.CoreV1().ResourceQuotas("default").Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := cs.CoordinationV1().Leases("default").Create(ctx, lease("x"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "status unknown for quota: leases, resources: count/leases.coordination.k8s.io") {
		t.Errorf("create under an uncounted quota: %v", err)
	}
}

// TestQuotaValidation: what leasehold cannot enforce is refused with 422.
func TestQuotaValidation(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	cs := kubernetes.NewForConfigOrDie(s.Config)
	for _, tc := range []struct {
		spec corev1.ResourceQuotaSpec
		msg  string
	}{
		{corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"pods": resource.MustParse("1")}}, "spec.hard[pods]: Invalid value"},
		{corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{leaseCount: resource.MustParse("-1")}}, "must be greater than or equal to 0"},
		{corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{leaseCount: resource.MustParse("1500m")}}, "must be an integer"},
		{corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/Leases": resource.MustParse("1")}}, "count/Leases"},
		{corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{leaseCount: resource.MustParse("1")}, Scopes: []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}}, "spec.scopes: Forbidden"},
	} {
		_, err := cs.CoreV1().ResourceQuotas("default").Create(context.Background(), &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{GenerateName: "q-"}, Spec: tc.spec}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("quota %+v: %v, want 422 saying %q", tc.spec, err, tc.msg)
		}
	}
}

// TestQuotaResync: a count left wrong (a charge whose create then failed
// for another reason than 409) is corrected at the next resync.
func TestQuotaResync(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	cs := kubernetes.NewForConfigOrDie(s.Config)
	clk := clocktesting.NewFakeClock(time.Now())
	c, err := resourcequota.New(resourcequota.Config{Client: cs, Reads: s.API.ListerWatcher, Clock: clk, ResyncPeriod: time.Minute,
		Logger: slog.New(slog.NewTextHandler(logWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	quotas := cs.CoreV1().ResourceQuotas("default")
	if _, err := quotas.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "leases"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{leaseCount: resource.MustParse("5")}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsedIn(t, ctx, cs, "default", 0)
	// A charge nothing was created for, as a failed create leaves.
	q, err := quotas.Get(ctx, "leases", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Status.Used[leaseCount] = resource.MustParse("3")
	if _, err := quotas.UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsedIn(t, ctx, cs, "default", 3)
	// Run made its ticker before its first count, which the wait for 0
	// above saw: the step reaches it.
	clk.Step(time.Minute)
	waitUsedIn(t, ctx, cs, "default", 0)
}
