package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// TestListFormats: a list of many leases, some holding strings that JSON
// escapes and YAML folds, quotes or writes as blocks, reads the same in
// every format the server writes: protobuf, JSON, JSON indented as curl
// gets it, and YAML, whole from the watch cache and in pages.
func TestListFormats(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	cs := s.clientset(t)
	ctx := context.Background()
	const leases = 600
	values := []string{strings.Repeat("a long value with spaces that YAML folds ", 5), "two\nlines\n", "<a&b>", "- dash", "yes", "\u00e9\u4e16"}
	var wg sync.WaitGroup
	errs := make(chan error, leases)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < leases; i += 16 {
				l := &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lease-%03d", i), Namespace: ns,
						Annotations: map[string]string{"note": values[i%len(values)]}},
					Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(values[(i/7)%len(values)]), LeaseDurationSeconds: ptr.To[int32](40)},
				}
				if _, err := cs.CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	want, err := cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Items) != leases {
		t.Fatalf("listed %d leases, want %d", len(want.Items), leases)
	}

	rc := cs.CoordinationV1().RESTClient()
	for _, f := range []struct {
		name, accept, userAgent string
		prefix                  string
		decode                  func([]byte, *coordinationv1.LeaseList) error
	}{
		{"json", "application/json", "leasehold-e2e", `{"kind":"LeaseList",`, func(b []byte, l *coordinationv1.LeaseList) error { return json.Unmarshal(b, l) }},
		{"json indented", "application/json", "curl/8.0", "{\n  \"kind\": \"LeaseList\",\n", func(b []byte, l *coordinationv1.LeaseList) error { return json.Unmarshal(b, l) }},
		{"yaml", "application/yaml", "leasehold-e2e", "apiVersion: coordination.k8s.io/v1\nitems:\n- ", func(b []byte, l *coordinationv1.LeaseList) error { return yaml.UnmarshalStrict(b, l) }},
		{"protobuf", "application/vnd.kubernetes.protobuf", "leasehold-e2e", "k8s\x00", nil},
	} {
		for _, page := range []int64{0, 250} {
			var items []coordinationv1.Lease
			opts := metav1.ListOptions{ResourceVersion: "0"}
			if page > 0 {
				opts = metav1.ListOptions{Limit: page}
			}
			for {
				req := rc.Get().Namespace(ns).Resource("leases").VersionedParams(&opts, metav1.ParameterCodec).
					SetHeader("Accept", f.accept).SetHeader("User-Agent", f.userAgent)
				var list coordinationv1.LeaseList
				if f.decode == nil {
					if err := req.Do(ctx).Into(&list); err != nil {
						t.Fatalf("%s: %v", f.name, err)
					}
				} else {
					body, err := req.DoRaw(ctx)
					if err != nil {
						t.Fatalf("%s: %v", f.name, err)
					}
					if !bytes.HasPrefix(body, []byte(f.prefix)) {
						t.Fatalf("%s: the list begins %.200q, want %q", f.name, body, f.prefix)
					}
					if err := f.decode(body, &list); err != nil {
						t.Fatalf("%s: decoding: %v\n%.500s", f.name, err, body)
					}
					if list.Kind != "LeaseList" || list.APIVersion != "coordination.k8s.io/v1" || list.ResourceVersion == "" {
						t.Fatalf("%s: a list of kind %q, apiVersion %q, resourceVersion %q", f.name, list.Kind, list.APIVersion, list.ResourceVersion)
					}
				}
				items = append(items, list.Items...)
				if list.Continue == "" {
					break
				}
				opts.Continue = list.Continue
			}
			if len(items) != leases {
				t.Errorf("%s (pages of %d): %d leases, want %d", f.name, page, len(items), leases)
				continue
			}
			for i, l := range items {
				w := want.Items[i]
				if l.Name != w.Name || l.ResourceVersion != w.ResourceVersion || l.Annotations["note"] != w.Annotations["note"] ||
					*l.Spec.HolderIdentity != *w.Spec.HolderIdentity || len(l.ManagedFields) != len(w.ManagedFields) {
					t.Errorf("%s (pages of %d): item %d is %s/%s note %q holder %q, want %s/%s note %q holder %q",
						f.name, page, i, l.Name, l.ResourceVersion, l.Annotations["note"], *l.Spec.HolderIdentity,
						w.Name, w.ResourceVersion, w.Annotations["note"], *w.Spec.HolderIdentity)
					break
				}
			}
		}
	}
}
