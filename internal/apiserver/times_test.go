package apiserver

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestUnrepresentableTime(t *testing.T) {
	year := func(y int) time.Time { return time.Date(y, time.March, 4, 5, 6, 7, 8000, time.UTC) }
	micro := func(y int) *metav1.MicroTime { m := metav1.NewMicroTime(year(y)); return &m }
	last := metav1.NewMicroTime(time.Date(9999, time.December, 31, 23, 59, 59, 999999000, time.UTC))
	// 10000-01-01 in UTC, 9999 where the time is read.
	east := metav1.NewMicroTime(time.Date(10000, time.January, 1, 0, 30, 0, 0, time.FixedZone("+01", 3600)))
	cases := []struct {
		name string
		obj  any
		path string
	}{
		{"lease in range", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{AcquireTime: micro(2026), RenewTime: &last}}, ""},
		{"zero times", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{}}}, ""},
		{"year 0", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: micro(0)}}, ""},
		{"year 10000", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: micro(10000)}}, "spec.renewTime"},
		{"year -1", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{AcquireTime: micro(-1)}}, "spec.acquireTime"},
		{"year 10000 in UTC only", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &east}}, ""},
		{"managed fields", &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: "a", Time: &metav1.Time{Time: year(2026)}}, {Manager: "b", Time: &metav1.Time{Time: year(55190)}},
		}}}, "metadata.managedFields[1].time"},
		{"node condition", &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, LastHeartbeatTime: metav1.NewTime(year(2026)), LastTransitionTime: metav1.NewTime(year(12026))},
		}}}, "status.conditions[0].lastTransitionTime"},
		{"taint", &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "k", TimeAdded: &metav1.Time{Time: year(-500)}}}}}, "spec.taints[0].timeAdded"},
		{"event series", &eventsv1.Event{Series: &eventsv1.EventSeries{LastObservedTime: *micro(10001)}}, "series.lastObservedTime"},
		{"event in range", &eventsv1.Event{EventTime: *micro(2026), DeprecatedLastTimestamp: metav1.NewTime(year(2026))}, ""},
		{"not a pointer", coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: micro(10000)}}, ""},
		{"nil", (*coordinationv1.Lease)(nil), ""},
	}
	for _, c := range cases {
		path, tm := unrepresentableTime(c.obj)
		if path != c.path {
			t.Errorf("%s: path %q (%v), want %q", c.name, path, tm, c.path)
		}
	}
}

// The walk is on every protobuf write's path: a renewal's Lease.
func BenchmarkUnrepresentableTime(b *testing.B) {
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", Namespace: "kube-node-lease", Labels: map[string]string{"a": "b"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-1"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "leasehold-agent", Time: &metav1.Time{Time: now.Time}}}},
		Spec: coordinationv1.LeaseSpec{AcquireTime: &now, RenewTime: &now},
	}
	b.ReportAllocs()
	for b.Loop() {
		if p, _ := unrepresentableTime(l); p != "" {
			b.Fatal(p)
		}
	}
}

// TestRequestTimeout: a request's deadline is the server's, or the
// client's ?timeout= where it asks for less; 0s or a negative timeout asks
// for nothing, as in kube-apiserver.
func TestRequestTimeout(t *testing.T) {
	for _, c := range []struct {
		timeout string
		most    time.Duration
		want    time.Duration
	}{
		{"", time.Minute, time.Minute},
		{"5s", time.Minute, 5 * time.Second},
		{"2m", time.Minute, time.Minute},
		{"0s", time.Minute, time.Minute},
		{"-3s", time.Minute, time.Minute},
		{"", -1, 0}, // --request-timeout 0: none
		{"5s", -1, 5 * time.Second},
	} {
		got, err := requestTimeout(c.timeout, c.most)
		if err != nil || got != c.want {
			t.Errorf("requestTimeout(%q, %v) = %v, %v; want %v", c.timeout, c.most, got, err, c.want)
		}
	}
	if _, err := requestTimeout("abc", time.Minute); !apierrors.IsBadRequest(err) {
		t.Errorf("a timeout that is no duration: %v; want 400", err)
	}
}
