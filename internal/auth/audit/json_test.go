package audit

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// reference is the event as encoding/json's Encoder writes it, HTML
// escaped, as kube-apiserver's JSON serializer writes its events.
func reference(t testing.TB, ev *Event) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(ev); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// sampleEvent is a renewal's event at the Metadata level, as a node agent's
// lease update writes it.
func sampleEvent() *Event {
	at := time.Date(2026, 11, 22, 20, 52, 8, 223087123, time.UTC)
	return &Event{
		TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: APIVersion},
		Level:    LevelMetadata, AuditID: "cda356de-358f-467b-a8a1-4571ffed17bb", Stage: StageResponseComplete,
		RequestURI: "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1",
		Verb:       "update",
		User:       authenticationv1.UserInfo{Username: "system:node:node-1", Groups: []string{"system:nodes", "system:authenticated"}},
		SourceIPs:  []string{"127.0.0.1"}, UserAgent: "leasehold-agent/v1",
		ObjectRef: &ObjectReference{Resource: "leases", Namespace: "kube-node-lease", Name: "node-1",
			APIGroup: "coordination.k8s.io", APIVersion: "v1"},
		ResponseStatus:           &metav1.Status{Code: 200},
		RequestReceivedTimestamp: metav1.NewMicroTime(at),
		StageTimestamp:           metav1.NewMicroTime(at.Add(1192 * time.Microsecond)),
		Annotations: map[string]string{
			AnnotationDecision: "allow",
			AnnotationReason:   `RBAC: allowed by ClusterRoleBinding "system:nodes" of ClusterRole "system:node" to Group "system:nodes"`,
		},
	}
}

// TestAppendJSONCases: events with each optional part, and those that go
// through encoding/json, come out as encoding/json writes them.
func TestAppendJSONCases(t *testing.T) {
	cases := map[string]func(*Event){
		"renewal": func(*Event) {},
		"bare": func(ev *Event) {
			*ev = Event{}
		},
		"failure": func(ev *Event) {
			ev.ResponseStatus = &metav1.Status{Status: metav1.StatusFailure, Message: `leases "x" not found`, Reason: metav1.StatusReasonNotFound, Code: 404}
		},
		"status details": func(ev *Event) {
			ev.ResponseStatus = &metav1.Status{Code: 422, Details: &metav1.StatusDetails{Name: "x", Causes: []metav1.StatusCause{{Field: "spec"}}}}
		},
		"status list meta": func(ev *Event) {
			ev.ResponseStatus = &metav1.Status{ListMeta: metav1.ListMeta{RemainingItemCount: ptr.To[int64](3)}}
		},
		"status kind": func(ev *Event) {
			ev.ResponseStatus = &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status"}, Code: 409}
		},
		"impersonation and extras": func(ev *Event) {
			ev.ImpersonatedUser = &authenticationv1.UserInfo{Username: "bob", UID: "7", Extra: map[string]authenticationv1.ExtraValue{"scopes": {"b", "a"}, "a": nil}}
			ev.User.Extra = map[string]authenticationv1.ExtraValue{"x": {"<&>"}}
		},
		"objects": func(ev *Event) {
			ev.RequestObject = &runtime.Unknown{Raw: []byte(` {"a": "<b>", "c": [1, 2]} `), ContentType: runtime.ContentTypeJSON}
			ev.ResponseObject = &runtime.Unknown{Raw: []byte(`{"kind":"Lease"}`)}
		},
		"empty object ref and no status": func(ev *Event) {
			ev.ObjectRef = &ObjectReference{}
			ev.ResponseStatus = nil
			ev.Annotations = map[string]string{}
			ev.SourceIPs = []string{}
		},
		"escapes": func(ev *Event) {
			ev.UserAgent = "tab\there \"quoted\" back\\slash <html> & \u2028 é \x00 \xff"
			ev.RequestURI = `/api?q="\"`
			ev.Annotations["k\n"] = "\u2029"
		},
		"zero times, other zone": func(ev *Event) {
			ev.RequestReceivedTimestamp = metav1.MicroTime{}
			ev.StageTimestamp = metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600)))
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			ev := sampleEvent()
			change(ev)
			want, err := reference(t, ev)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ev.appendJSON([]byte("prefix"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(got, []byte("prefix")) || !bytes.Equal(got[len("prefix"):], want) {
				t.Errorf("appendJSON:\n%s\nencoding/json:\n%s", got, want)
			}
		})
	}
}

// TestAppendJSONError: an object that is not JSON fails the event, as it
// failed encoding/json's.
func TestAppendJSONError(t *testing.T) {
	ev := sampleEvent()
	ev.RequestObject = &runtime.Unknown{Raw: []byte(`{not json`)}
	if _, err := reference(t, ev); err == nil {
		t.Fatal("encoding/json accepted the object")
	}
	if _, err := ev.appendJSON(nil); err == nil {
		t.Fatal("appendJSON accepted the object")
	}
}

// FuzzEventJSON checks appendJSON against encoding/json on events whose
// strings, status and annotations come from the fuzzer.
func FuzzEventJSON(f *testing.F) {
	f.Add("node-1", "system:nodes", `RBAC: allowed by "x"`, "allow", "", int32(200), "", int64(1795380728223087), false)
	f.Add("tab\t\"é\u2028\xff", "<&>", "\\", "\x00", "Failure", int32(404), `{"a":1}`, int64(0), true)
	f.Fuzz(func(t *testing.T, name, group, reason, decision, status string, code int32, object string, micros int64, impersonate bool) {
		ev := sampleEvent()
		ev.ObjectRef.Name, ev.User.Username, ev.Verb = name, name, decision
		ev.User.Groups = []string{group, name}
		ev.Annotations = map[string]string{AnnotationReason: reason, AnnotationDecision: decision, name: group}
		ev.ResponseStatus = &metav1.Status{Status: status, Message: reason, Reason: metav1.StatusReason(name), Code: code}
		ev.StageTimestamp = metav1.NewMicroTime(time.UnixMicro(micros))
		if object != "" {
			ev.RequestObject = &runtime.Unknown{Raw: []byte(object)}
		}
		if impersonate {
			ev.ImpersonatedUser = &authenticationv1.UserInfo{Username: group, Extra: map[string]authenticationv1.ExtraValue{reason: {name}}}
		}
		want, werr := reference(t, ev)
		got, gerr := ev.appendJSON(nil)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("encoding/json error %v, appendJSON error %v", werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("appendJSON:\n%s\nencoding/json:\n%s", got, want)
		}
	})
}

func BenchmarkEventJSON(b *testing.B) {
	ev := sampleEvent()
	b.Run("appendJSON", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = ev.appendJSON(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for b.Loop() {
			buf.Reset()
			if err := enc.Encode(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
