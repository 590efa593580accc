package apiserver_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

// TestBodyBuffersReused: request bodies are read into recycled buffers,
// zeroed when released, so a request must not use its body after its
// buffer went back, nor keep anything of it. Many writes of distinct
// values, in both encodings and at once, each buffer serving the next
// request, must all succeed and read back as written.
func TestBodyBuffersReused(t *testing.T) {
	ctx := testContext(t)
	s := apiservertest.Start(t, apiservertest.Options{})
	createNamespace(t, s.Client(t, ""), "bodies")
	const writers, writes = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*writes)
	for w := range writers {
		cs := s.Client(t, []string{protobuf, "application/json"}[w%2])
		wg.Go(func() {
			leases := cs.CoordinationV1().Leases("bodies")
			for i := range writes {
				name := fmt.Sprintf("w%d-%d", w, i)
				// Holders of different lengths, so that later bodies
				// overwrite earlier ones at other offsets.
				l, err := leases.Create(ctx, newLease(name, name+strings.Repeat("x", i)), metav1.CreateOptions{})
				if err != nil {
					errs <- err
					return
				}
				l.Labels = map[string]string{"written": name}
				if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	list, err := s.Client(t, protobuf).CoordinationV1().Leases("bodies").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != writers*writes {
		t.Fatalf("%d leases, want %d", len(list.Items), writers*writes)
	}
	for _, l := range list.Items {
		var i int
		fmt.Sscanf(l.Name[strings.Index(l.Name, "-")+1:], "%d", &i)
		if h := *l.Spec.HolderIdentity; h != l.Name+strings.Repeat("x", i) || l.Labels["written"] != l.Name || l.Namespace != "bodies" {
			t.Errorf("lease %s reads back holder %q, labels %v, namespace %q", l.Name, h, l.Labels, l.Namespace)
		}
		for _, m := range l.ManagedFields {
			if m.FieldsV1 == nil || !strings.HasPrefix(string(m.FieldsV1.Raw), "{") {
				t.Errorf("lease %s has managedFields %+v", l.Name, m)
			}
		}
	}
}
