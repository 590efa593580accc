package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/registry"
)

// tableBoth returns tbl as the server writes it in JSON, its rows made as
// it is written (a tableStream, writeTableJSON), and as the JSON serializer
// writes the whole Table. It also checks that the server writes it in YAML
// as the YAML serializer does, and in indented JSON (curl's, ?pretty=true)
// as the pretty serializer does.
func tableBoth(t testing.TB, tbl *metav1.Table) (got, want []byte) {
	t.Helper()
	head := *tbl
	head.Rows = nil
	ts := &tableStream{head: &head, gv: metaV1, n: len(tbl.Rows), row: func(i int) (metav1.TableRow, error) { return tbl.Rows[i], nil }}
	typed := *tbl
	typed.SetGroupVersionKind(metaV1.WithKind("Table"))
	for _, media := range []string{mediaYAML, mediaJSON} {
		info, _ := serializerFor(media)
		var server, serializer bytes.Buffer
		serverErr := encodeTo(&server, encoding{info: info, mediaType: media}, ts, metaV1)
		serializerErr := info.Serializer.Encode(&typed, &serializer)
		if media == mediaYAML && serverErr != nil && serializerErr != nil {
			continue // YAML has no way to write some strings (control characters)
		}
		if serverErr != nil || serializerErr != nil {
			t.Fatalf("in %s: the server's error %v, the serializer's %v", media, serverErr, serializerErr)
		}
		if media == mediaYAML && !bytes.Equal(server.Bytes(), serializer.Bytes()) {
			t.Errorf("in YAML:\n got %s\nwant %s", server.Bytes(), serializer.Bytes())
		}
		got, want = server.Bytes(), serializer.Bytes()
	}
	info, _ := serializerFor(mediaJSON)
	var server, serializer bytes.Buffer
	serverErr := encodeTo(&server, encoding{info: info, mediaType: mediaJSON, pretty: true}, ts, metaV1)
	serializerErr := info.PrettySerializer.Encode(&typed, &serializer)
	if serverErr != nil || serializerErr != nil {
		t.Fatalf("indented: the server's error %v, the serializer's %v", serverErr, serializerErr)
	}
	if !bytes.Equal(server.Bytes(), serializer.Bytes()) {
		t.Errorf("indented: %d bytes differ from the pretty serializer's %d:\n got %.3000s\nwant %.3000s", server.Len(), serializer.Len(), server.Bytes(), serializer.Bytes())
	}
	return got, want
}

// FuzzIndentWriter: any valid JSON, compacted and written in pieces of any
// size, comes out of indentWriter as json.Indent indents it.
func FuzzIndentWriter(f *testing.F) {
	f.Add([]byte(`{"a":[1,{},[],{"b":"c,:{}[]\"\\"}],"d":null}`), uint8(3))
	f.Add([]byte(`[ ]`), uint8(1))
	f.Add([]byte(`"x"`), uint8(0))
	f.Fuzz(func(t *testing.T, in []byte, piece uint8) {
		if !json.Valid(in) {
			return
		}
		var compact, want bytes.Buffer
		if err := json.Compact(&compact, in); err != nil {
			t.Fatal(err)
		}
		if err := json.Indent(&want, compact.Bytes(), "", "  "); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		iw := &indentWriter{w: &got}
		src := append(compact.Bytes(), '\n') // as writeTableJSON ends
		for len(src) > 0 {
			n := min(len(src), int(piece)+1)
			if _, err := iw.Write(src[:n]); err != nil {
				t.Fatal(err)
			}
			src = src[n:]
		}
		if err := iw.flush(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("%q:\n got %s\nwant %s", in, got.Bytes(), want.Bytes())
		}
	})
}

// sampleTable is a Table of leases and nodes whose strings are s, with rows
// as the server makes them for include.
func sampleTable(t testing.TB, s string, include metav1.IncludeObjectPolicy) *metav1.Table {
	t.Helper()
	info, _ := serializerFor(mediaJSON)
	embed := encoding{info: info, mediaType: mediaJSON, meta: metaV1}
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "n-" + s, Namespace: "kube-node-lease", ResourceVersion: "12", Labels: map[string]string{"k": s},
			Annotations: map[string]string{s: "<&>"}, CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(s), RenewTime: &metav1.MicroTime{Time: now}},
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s, ResourceVersion: "13"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	tbl := &metav1.Table{ListMeta: metav1.ListMeta{ResourceVersion: "13", Continue: s, RemainingItemCount: ptr.To[int64](4)},
		ColumnDefinitions: append([]metav1.TableColumnDefinition{registry.NameColumn}, registry.Leases.Columns...)}
	for _, item := range []struct {
		res *registry.Resource
		obj runtime.Object
	}{{registry.Leases, lease}, {registry.Nodes, node}} {
		row, err := tableRow(item.res, item.obj, include, embed, now)
		if err != nil {
			t.Fatal(err)
		}
		tbl.Rows = append(tbl.Rows, row)
	}
	// Cells of every JSON type, and a row condition.
	tbl.Rows = append(tbl.Rows, metav1.TableRow{Cells: []any{s, int64(-3), int32(7), true, nil, 1.5, "\u2028<\"\\>"},
		Conditions: []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: s, Message: s}}})
	return tbl
}

// TestTableJSON: a Table the server writes in JSON is the serializer's
// encoding byte for byte, for every includeObject policy, with strings
// that JSON escapes, an empty Table, and one large enough to be written in
// several parts.
func TestTableJSON(t *testing.T) {
	for _, include := range []metav1.IncludeObjectPolicy{metav1.IncludeNone, metav1.IncludeMetadata, metav1.IncludeObject} {
		for _, s := range []string{"node-1", `a"b\c<d>&e` + "\u2028\u2029\x01é"} {
			got, want := tableBoth(t, sampleTable(t, s, include))
			if !bytes.Equal(got, want) {
				t.Errorf("%s, %q:\n got %s\nwant %s", include, s, got, want)
			}
		}
	}
	got, want := tableBoth(t, &metav1.Table{Rows: []metav1.TableRow{}})
	if !bytes.Equal(got, want) {
		t.Errorf("empty table:\n got %s\nwant %s", got, want)
	}
	large := sampleTable(t, "x", metav1.IncludeMetadata)
	for i := range 2000 {
		large.Rows = append(large.Rows, sampleTable(t, fmt.Sprint("node-", i), metav1.IncludeObject).Rows...)
	}
	if got, want := tableBoth(t, large); !bytes.Equal(got, want) {
		t.Errorf("a Table of %d rows (%d bytes) differs from the serializer's (%d bytes)", len(large.Rows), len(got), len(want))
	}
}

// FuzzTableJSON: whatever the strings of the objects and cells, the
// server's Table in JSON is the serializer's.
func FuzzTableJSON(f *testing.F) {
	f.Add("node-1", uint8(1))
	f.Add(`<&>"\`+"\u2028", uint8(2))
	f.Fuzz(func(t *testing.T, s string, include uint8) {
		policy := []metav1.IncludeObjectPolicy{metav1.IncludeNone, metav1.IncludeMetadata, metav1.IncludeObject}[int(include)%3]
		got, want := tableBoth(t, sampleTable(t, s, policy))
		if !bytes.Equal(got, want) {
			t.Fatalf("%s, %q:\n got %s\nwant %s", policy, s, got, want)
		}
	})
}

// BenchmarkTableJSON: writing a Table of 10 000 node leases, as kubectl
// gets it, in JSON.
func BenchmarkTableJSON(b *testing.B) {
	tbl := &metav1.Table{ColumnDefinitions: append([]metav1.TableColumnDefinition{registry.NameColumn}, registry.Leases.Columns...)}
	for i := range 10000 {
		tbl.Rows = append(tbl.Rows, sampleTable(b, fmt.Sprint("leasehold-bench-node-", i), metav1.IncludeMetadata).Rows[0])
	}
	ts := &tableStream{head: tbl, gv: metaV1, n: len(tbl.Rows), row: func(i int) (metav1.TableRow, error) { return tbl.Rows[i], nil }}
	info, _ := serializerFor(mediaJSON)
	e := encoding{info: info, mediaType: mediaJSON}
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		if err := encodeTo(&buf, e, ts, metaV1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(tbl.Rows)), "ns/row")
}
