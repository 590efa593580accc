package namespace

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDeletionConditions: the five conditions of a namespace being
// deleted, worded as Kubernetes' namespace controller words them, written
// only when they change, each dated when its status last changed.
func TestDeletionConditions(t *testing.T) {
	t1 := metav1.NewTime(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	t2 := metav1.NewTime(t1.Add(time.Minute))
	line := func(c corev1.NamespaceCondition) string {
		return string(c.Type) + " " + string(c.Status) + " " + c.Reason + " " + c.Message + " @" + c.LastTransitionTime.Format(time.TimeOnly)
	}
	lines := func(s *corev1.NamespaceStatus) []string {
		var out []string
		for _, c := range s.Conditions {
			out = append(out, line(c))
		}
		return out
	}

	var left content
	left.add("leases.coordination.k8s.io", []string{"example.com/b", "example.com/a"})
	left.add("leases.coordination.k8s.io", []string{"example.com/a"})
	left.add("events.", nil)
	first := deletionConditions(corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}, left, nil, t1)
	want := []string{
		"NamespaceDeletionDiscoveryFailure False ResourcesDiscovered All resources successfully discovered @12:00:00",
		"NamespaceDeletionGroupVersionParsingFailure False ParsedGroupVersions All legacy kube types successfully parsed @12:00:00",
		"NamespaceDeletionContentFailure False ContentDeleted All content successfully deleted, may be waiting on finalization @12:00:00",
		"NamespaceContentRemaining True SomeResourcesRemain Some resources are remaining: events. has 1 resource instances, leases.coordination.k8s.io has 2 resource instances @12:00:00",
		"NamespaceFinalizersRemaining True SomeFinalizersRemain Some content in the namespace has finalizers remaining: example.com/a in 2 resource instances, example.com/b in 1 resource instances @12:00:00",
	}
	if first == nil || !slices.Equal(lines(first), want) || first.Phase != corev1.NamespaceTerminating {
		t.Fatalf("first conditions:\n%q\nwant\n%q", lines(first), want)
	}
	if again := deletionConditions(*first, left, nil, t2); again != nil {
		t.Errorf("the same content rewrote the conditions: %q", lines(again))
	}

	// The held objects go, but a deletion fails.
	later := deletionConditions(*first, content{}, []string{"deleting roles: boom", "deleting leases: bang"}, t2)
	want = []string{
		want[0], want[1],
		"NamespaceDeletionContentFailure True ContentDeletionFailed Failed to delete all resource types, 2 remaining: deleting leases: bang, deleting roles: boom @12:01:00",
		"NamespaceContentRemaining False ContentRemoved All content successfully removed @12:01:00",
		"NamespaceFinalizersRemaining False ContentHasNoFinalizers All content-preserving finalizers finished @12:01:00",
	}
	if later == nil || !slices.Equal(lines(later), want) {
		t.Errorf("later conditions:\n%q\nwant\n%q", lines(later), want)
	}
	if first.Conditions[3].Status != corev1.ConditionTrue {
		t.Error("the status passed in was changed")
	}
}
