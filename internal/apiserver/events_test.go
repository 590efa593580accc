package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

// TestEventValidation writes Events through both API groups as clients
// do: events.k8s.io/v1 holds a new event to kube-apiserver's strict rules
// and lets an update change its series only, v1 keeps its lenient rules;
// a refused write is a 422 that leaves what is stored as it was.
func TestEventValidation(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	ctx := context.Background()
	for _, ct := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		t.Run(ct, func(t *testing.T) {
			checkEventValidation(ctx, t, s.Client(t, ct), strings.Contains(ct, "protobuf"))
		})
	}
}

func checkEventValidation(ctx context.Context, t *testing.T, c kubernetes.Interface, proto bool) {
	name := "json"
	if proto {
		name = "proto"
	}
	at := metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC))
	good := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1." + name, Namespace: "default"}, EventTime: at,
		ReportingController: "leasehold-agent", ReportingInstance: "web-1", Action: "Starting", Reason: "Starting",
		Type: corev1.EventTypeNormal, Note: "Starting leasehold agent.",
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "web-1", UID: types.UID("web-1")},
	}
	events := c.EventsV1().Events("default")

	bad := good.DeepCopy()
	bad.Name += "-bad"
	bad.ReportingController, bad.Action, bad.Type = "", "", ""
	bad.DeprecatedCount = 2
	_, err := events.Create(ctx, bad, metav1.CreateOptions{})
	wantInvalid(t, err, "reportingController: Required value", "action: Required value", `type: Invalid value: "": has invalid value: `, `count: Invalid value: "": needs to be unset`)
	if _, err := events.Get(ctx, bad.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a refused event was stored: %v", err)
	}

	created, err := events.Create(ctx, good, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	changed := created.DeepCopy()
	changed.Note, changed.Reason = "something else", "Other"
	_, err = events.Update(ctx, changed, metav1.UpdateOptions{})
	wantInvalid(t, err, `reason: Invalid value: "Other": field is immutable`, `message: Invalid value: "something else": field is immutable`)
	series := created.DeepCopy()
	series.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(at.Add(time.Minute))}
	updated, err := events.Update(ctx, series, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("an update of the series: %v", err)
	}
	if updated.Series == nil || updated.Series.Count != 2 || updated.Note != good.Note {
		t.Fatalf("after the series update: %+v", updated)
	}

	// v1 takes an event without eventTime, as client-go's legacy recorder
	// writes it, and may change what it says; with eventTime it must
	// name its reporter, as kube-apiserver asks.
	legacy := c.CoreV1().Events("default")
	old := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "old." + name, Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "web-1"}, Reason: "Old", Count: 1,
	}
	got, err := legacy.Create(ctx, old, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a v1 event without eventTime: %v", err)
	}
	got.Message, got.Count = "again", 2
	if _, err := legacy.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("a v1 update of a legacy event: %v", err)
	}
	withTime := old.DeepCopy()
	withTime.Name += "-with-time"
	withTime.EventTime = at
	_, err = legacy.Create(ctx, withTime, metav1.CreateOptions{})
	wantInvalid(t, err, "reportingController: Required value", "reportingInstance: Required value", "action: Required value")
	if _, err := legacy.Get(ctx, withTime.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a refused v1 event was stored: %v", err)
	}
	wrongNS := old.DeepCopy()
	wrongNS.Name += "-wrong-namespace"
	wrongNS.InvolvedObject = corev1.ObjectReference{Kind: "Lease", Namespace: "kube-node-lease", Name: "web-1"}
	_, err = legacy.Create(ctx, wrongNS, metav1.CreateOptions{})
	wantInvalid(t, err, `involvedObject.namespace: Invalid value: "kube-node-lease": does not match event.namespace`)
}

// wantInvalid checks that err is a 422 whose message names each of want.
func wantInvalid(t *testing.T, err error, want ...string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v, want 422 Invalid", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not say %q:\n%v", w, err)
		}
	}
}

// TestEventSeriesFromClientGo records the same Event twice through
// client-go's tools/events, as the node lifecycle controller does: the
// second is a series, which client-go writes as a merge patch of the series
// alone; the server's rules for updates through events.k8s.io/v1 take it.
func TestEventSeriesFromClientGo(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	c := s.Client(t, "application/vnd.kubernetes.protobuf")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: c.EventsV1()})
	defer b.Shutdown()
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	rec := b.NewRecorder(scheme.Scheme, "node-controller")
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "web-1", UID: "web-1"}

	w, err := c.EventsV1().Events("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// The second only once the first is stored: recorded at once, its
	// patch may come first, and client-go then retries after 10 s.
	timeout := time.After(time.Minute)
	next := func(want watch.EventType) *eventsv1.Event {
		t.Helper()
		for {
			select {
			case ev := <-w.ResultChan():
				if e, ok := ev.Object.(*eventsv1.Event); ok && ev.Type == want {
					return e
				}
			case <-timeout:
				t.Fatalf("no %s event within a minute", want)
			}
		}
	}
	rec.Eventf(ref, nil, corev1.EventTypeNormal, "NodeNotReady", "StatusChange", "Node %s is now NotReady", "web-1")
	next(watch.Added)
	rec.Eventf(ref, nil, corev1.EventTypeNormal, "NodeNotReady", "StatusChange", "Node %s is now NotReady", "web-1")
	if e := next(watch.Modified); e.Series == nil || e.Series.Count != 2 || e.Note != "Node web-1 is now NotReady" {
		t.Fatalf("the series: %+v", e)
	}
}
