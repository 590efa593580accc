package audit

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/auth"
)

const policyYAML = `
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-controller-manager"]
  verbs: ["get", "update"]
  namespaces: ["kube-system"]
  resources:
  - group: coordination.k8s.io
    resources: ["leases"]
- level: None
  nonResourceURLs: ["/healthz*", "/version"]
- level: RequestResponse
  userGroups: ["devs"]
  resources:
  - group: rbac.authorization.k8s.io
- level: Request
  resources:
  - group: ""
    resources: ["nodes/status"]
- level: RequestResponse
  users: ["carol"]
  resources:
  - group: "*"
    resources: ["namespaces", "leases"]
- level: Metadata
  resources:
  - group: coordination.k8s.io
    resources: ["leases"]
    resourceNames: ["special"]
  omitStages: [ResponseStarted]
- level: Metadata
  resources:
  - group: ""
    resources: ["*/finalize"]
- level: Metadata
  namespaces: [""]
- level: Request
`

func TestPolicyDecide(t *testing.T) {
	p, err := ParsePolicy([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	kcm := &auth.User{Name: "system:kube-controller-manager"}
	dev := &auth.User{Name: "alice", Groups: []string{"devs"}}
	other := &auth.User{Name: "bob"}
	r := func(u *auth.User, verb, group, resource, sub, ns, name string) auth.Attributes {
		return auth.Attributes{User: u, Verb: verb, ResourceRequest: true, APIGroup: group, Resource: resource, Subresource: sub, Namespace: ns, Name: name}
	}
	tests := []struct {
		name      string
		a         auth.Attributes
		want      Level
		wantStage Stage // a stage that must not be recorded
	}{
		{"controller manager renewing its lease", r(kcm, "update", "coordination.k8s.io", "leases", "", "kube-system", "x"), LevelNone, ""},
		{"controller manager elsewhere", r(kcm, "update", "coordination.k8s.io", "leases", "", "default", "x"), LevelRequest, StageRequestReceived},
		{"controller manager deleting", r(kcm, "delete", "coordination.k8s.io", "leases", "", "kube-system", "x"), LevelRequest, ""},
		{"health", auth.Attributes{User: other, Verb: "get", Path: "/healthz/etcd"}, LevelNone, ""},
		{"version", auth.Attributes{User: other, Verb: "get", Path: "/version"}, LevelNone, ""},
		{"other non-resource falls to the catch-all", auth.Attributes{User: other, Verb: "get", Path: "/metrics"}, LevelRequest, ""},
		{"devs and rbac, any resource of the group", r(dev, "create", "rbac.authorization.k8s.io", "rolebindings", "", "a", ""), LevelRequestResponse, ""},
		{"not devs, rbac, namespaced", r(other, "create", "rbac.authorization.k8s.io", "rolebindings", "", "a", ""), LevelRequest, ""},
		{"subresource", r(other, "patch", "", "nodes", "status", "", "n"), LevelRequest, ""},
		{"resource name", r(other, "get", "coordination.k8s.io", "leases", "", "a", "special"), LevelMetadata, StageResponseStarted},
		{"other name", r(other, "get", "coordination.k8s.io", "leases", "", "a", "plain"), LevelRequest, ""},
		{"any resource's subresource", r(other, "update", "", "namespaces", "finalize", "", "a"), LevelMetadata, ""},
		{"cluster-scoped by empty namespace", r(other, "get", "", "nodes", "", "", "n"), LevelMetadata, ""},
		{"any group, the core one", r(&auth.User{Name: "carol"}, "get", "", "namespaces", "", "", "a"), LevelRequestResponse, ""},
		{"any group, another", r(&auth.User{Name: "carol"}, "get", "coordination.k8s.io", "leases", "", "a", "x"), LevelRequestResponse, ""},
		{"any group, but not that resource", r(&auth.User{Name: "carol"}, "get", "", "nodes", "", "", "n"), LevelMetadata, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Decide(tt.a)
			if d.Level != tt.want {
				t.Errorf("level %s, want %s", d.Level, tt.want)
			}
			if d.Records(StageRequestReceived) {
				t.Error("RequestReceived recorded despite the policy's omitStages")
			}
			if tt.wantStage != "" && d.Records(tt.wantStage) {
				t.Errorf("stage %s recorded", tt.wantStage)
			}
		})
	}
}

// A decision shares the policy's omitted stages when its rule adds none;
// neither a rule's own stages nor a caller's append may reach the policy.
func TestDecideLeavesPolicyStages(t *testing.T) {
	p, err := ParsePolicy([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	// Room past its end, where an append without a copy would write.
	p.OmitStages = append(make([]Stage, 0, 4), p.OmitStages...)
	u := &auth.User{Name: "bob"}
	get := func(name string) auth.Attributes {
		return auth.Attributes{User: u, Verb: "get", ResourceRequest: true, APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "a", Name: name}
	}
	special := p.Decide(get("special"))
	plain := p.Decide(get("plain"))
	for _, d := range []Decision{special, plain} {
		if cap(d.OmitStages) != len(d.OmitStages) {
			t.Fatalf("stages %v with room for %d: an append would write into what they share", d.OmitStages, cap(d.OmitStages))
		}
	}
	_ = append(plain.OmitStages, StageResponseComplete)
	if !slices.Equal(p.OmitStages, []Stage{StageRequestReceived}) {
		t.Fatalf("the policy's omitted stages became %v", p.OmitStages)
	}
	if special.Records(StageResponseStarted) || !special.Records(StageResponseComplete) {
		t.Fatalf("one decision's stages changed another's: %v", special.OmitStages)
	}
	if d := p.Decide(get("plain")); !d.Records(StageResponseStarted) || !d.Records(StageResponseComplete) {
		t.Fatalf("a rule's or a caller's stage reached the next decision: %v", d.OmitStages)
	}
}

func TestParsePolicyErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"kind", "apiVersion: audit.k8s.io/v1\nkind: Pod\nrules: [{level: None}]\n", "kind Policy"},
		{"no rules", "apiVersion: audit.k8s.io/v1\nkind: Policy\n", "at least one rule"},
		{"level", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Everything}]\n", "unsupported value"},
		{"unknown field", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, user: [a]}]\n", "unknown field"},
		{"both kinds", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [/a], namespaces: [b]}]\n", "both"},
		{"stage", "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [Later]\nrules: [{level: None}]\n", "unsupported stage"},
		{"star in the middle", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [/a*b]}]\n", "at its end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParsePolicy([]byte(tt.yaml)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestLoadPolicyLenient: a policy file that only strict decoding refuses
// (a field leasehold does not know) is loaded without that field, with a
// warning, as kube-apiserver loads it; one that fails its checks is not.
func TestLoadPolicyLenient(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	p, err := LoadPolicy(write("newer.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Request\n  futureField: true\n"), log)
	if err != nil || len(p.Rules) != 1 || p.Rules[0].Level != LevelRequest {
		t.Errorf("a policy with an unknown field: %+v, %v; want its one rule", p, err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "futureField") {
		t.Errorf("no warning naming the field: %q", logs.String())
	}
	if _, err := LoadPolicy(write("bad.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Everything\n  futureField: true\n"), log); err == nil {
		t.Error("a policy with an unsupported level and an unknown field loaded")
	}
}

func TestRotatingFile(t *testing.T) {
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rf, err := OpenRotating(RotateConfig{Path: filepath.Join(dir, "audit.log"), MaxBytes: 100, MaxBackups: 2, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	line := bytes.Repeat([]byte("x"), 59)
	line = append(line, '\n') // 60 bytes: one line per file
	for i := 0; i < 5; i++ {
		if _, err := rf.Write(line); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Minute)
	}
	backups, err := rf.Backups()
	if err != nil {
		t.Fatal(err)
	}
	if len(backups) != 2 {
		t.Fatalf("backups %v, want the 2 newest", backups)
	}
	if !strings.HasSuffix(backups[0], "audit-2026-01-01T00-04-00.000.log") {
		t.Errorf("newest backup %s", backups[0])
	}
	if fi, _ := os.Stat(filepath.Join(dir, "audit.log")); fi.Size() != 60 || fi.Mode().Perm() != 0o600 {
		t.Errorf("live file size %d mode %v, want 60 and 0600", fi.Size(), fi.Mode().Perm())
	}

	// The file is this one's alone while it is open.
	if _, err := OpenRotating(RotateConfig{Path: filepath.Join(dir, "audit.log")}); !errors.Is(err, ErrInUse) {
		t.Errorf("a second open of the file: %v, want ErrInUse", err)
	}
	rf.Close()

	// Age: backups older than MaxAge go at the next rotation.
	rf2, err := OpenRotating(RotateConfig{Path: filepath.Join(dir, "audit.log"), MaxBytes: 100, MaxAge: time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer rf2.Close()
	for _, b := range backups {
		old := time.Now().Add(-2 * time.Hour)
		os.Chtimes(b, old, old)
	}
	clk.SetTime(time.Now())
	rf2.Write(line) // the live file holds a line already: this rotates
	left, _ := rf2.Backups()
	if len(left) != 1 {
		t.Errorf("after aging, backups %v, want only the new one", left)
	}
}

func TestLoggerWritesAndDrops(t *testing.T) {
	var out bytes.Buffer
	l, err := New(Config{Out: &out, BufferSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	before, madeBefore := counterValue(t, logLost), counterValue(t, eventsMade)
	ev := func(id string) *Event {
		return &Event{Level: LevelMetadata, AuditID: types.UID("id-" + id), Stage: StageResponseComplete, Verb: "get"}
	}
	// Nobody writes yet: the third event does not fit.
	l.Log(ev("1"))
	l.Log(ev("2"))
	l.Log(ev("3"))
	if got := counterValue(t, logLost) - before; got != 1 {
		t.Errorf("dropped %v, want 1", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l.Run(ctx) // writes what is queued, then returns
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("wrote %d lines, want 2:\n%s", len(lines), out.String())
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatal(err)
	}
	if got["auditID"] != "id-1" || got["stage"] != "ResponseComplete" || got["level"] != "Metadata" {
		t.Errorf("event %v", got)
	}
	l.Log(ev("4"))
	if got := counterValue(t, logLost) - before; got != 2 {
		t.Errorf("after Run ended, dropped %v, want 2", got)
	}
	// Every event made counts, those lost too, as kube-apiserver's
	// apiserver_audit_event_total counts them.
	if got := counterValue(t, eventsMade) - madeBefore; got != 4 {
		t.Errorf("apiserver_audit_event_total counted %v events, want the 4 made", got)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestRotatingFileRemoved: a log file removed from under the writer (by
// hand) does not end the log: the next rotation starts a new file.
func TestRotatingFileRemoved(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rf, err := OpenRotating(RotateConfig{Path: path, MaxBytes: 100, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	line := append(bytes.Repeat([]byte("x"), 59), '\n')
	if _, err := rf.Write(line); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := rf.Write(line); err != nil {
			t.Fatalf("write %d after the file was removed: %v", i, err)
		}
		clk.Step(time.Minute)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 60 {
		t.Errorf("live file after the removal: %v, %v; want a new one with the last line", fi, err)
	}
	if err := rf.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := rf.Write(line); !errors.Is(err, os.ErrClosed) {
		t.Errorf("write after Close: %v, want os.ErrClosed", err)
	}
}

// failOnce fails its first write, telling failed, then writes to out.
type failOnce struct {
	failed chan struct{}
	mu     sync.Mutex
	out    bytes.Buffer
}

func (f *failOnce) Write(p []byte) (int, error) {
	select {
	case <-f.failed:
	default:
		close(f.failed)
		return 0, errors.New("disk full")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.out.Write(p)
}

// TestLoggerRecovers: after the output fails once, later events are
// written again (a bufio.Writer would otherwise keep the error forever).
func TestLoggerRecovers(t *testing.T) {
	out := &failOnce{failed: make(chan struct{})}
	l, err := New(Config{Out: out, BufferSize: 4, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(id string) *Event {
		return &Event{Level: LevelMetadata, AuditID: types.UID(id), Stage: StageResponseComplete, Verb: "get"}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	l.Log(ev("lost"))
	<-out.failed // its flush failed
	l.Log(ev("kept"))
	cancel()
	<-done
	out.mu.Lock()
	defer out.mu.Unlock()
	if got := out.out.String(); !strings.Contains(got, `"auditID":"kept"`) || strings.Contains(got, "lost") {
		t.Errorf("written after the failure: %q, want only the event logged after it", got)
	}
}

// writeRecorder keeps each write to it apart and tells of each on wrote.
type writeRecorder struct {
	mu     sync.Mutex
	writes []string
	wrote  chan struct{}
}

func (w *writeRecorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, string(p))
	w.mu.Unlock()
	w.wrote <- struct{}{}
	return len(p), nil
}

func (w *writeRecorder) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.writes...)
}

// TestLoggerBatchMaxWait: the events logged while the writer waits go out
// with the one that woke it, in one write once the wait is over; a Logger
// stopped during a wait writes what it has without waiting longer.
func TestLoggerBatchMaxWait(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	out := &writeRecorder{wrote: make(chan struct{}, 4)}
	l, err := New(Config{Out: out, BatchMaxWait: 10 * time.Millisecond, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(id string) *Event {
		return &Event{Level: LevelMetadata, AuditID: types.UID(id), Stage: StageResponseComplete, Verb: "update"}
	}
	waiting := func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !clk.HasWaiters(); runtime.Gosched() {
			if time.Now().After(deadline) {
				t.Fatal("the writer never waited for more events")
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()

	l.Log(ev("a"))
	waiting() // the writer has taken a and waits
	l.Log(ev("b"))
	l.Log(ev("c"))
	clk.Step(9 * time.Millisecond)
	if got := out.all(); len(got) != 0 {
		t.Fatalf("written before the wait was over: %q", got)
	}
	clk.Step(time.Millisecond)
	<-out.wrote
	got := out.all()
	if len(got) != 1 || strings.Count(got[0], "\n") != 3 || !strings.Contains(got[0], `"auditID":"c"`) {
		t.Fatalf("writes %q, want one of the three events", got)
	}

	l.Log(ev("d"))
	waiting()
	cancel()
	<-done
	if got := out.all(); len(got) != 2 || !strings.Contains(got[1], `"auditID":"d"`) {
		t.Errorf("writes after the stop %q, want d written", got)
	}
}

func TestLoggerNegativeBatchMaxWait(t *testing.T) {
	if _, err := New(Config{Out: &bytes.Buffer{}, BatchMaxWait: -time.Second}); err == nil {
		t.Error("a negative BatchMaxWait was accepted")
	}
}

// TestLoggerWebhook: with a webhook, events go out as audit.k8s.io/v1
// EventLists of at most MaxBatch, a batch once full or MaxWait after its
// first event; a batch the webhook does not take is dropped and counted;
// what is queued at a stop is sent. Events go to the file as well.
func TestLoggerWebhook(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	posts := make(chan []string, 10)
	var fail sync.Mutex // held: the webhook refuses
	out := &bytes.Buffer{}
	var outMu sync.Mutex
	l, err := New(Config{Out: struct{ io.Writer }{lockedWriter{&outMu, out}}, Clock: clk, Logger: slog.New(slog.DiscardHandler), Webhook: &WebhookConfig{
		MaxBatch: 3, MaxWait: 30 * time.Second,
		Post: func(ctx context.Context, body []byte) error {
			var list struct {
				Kind, APIVersion string
				Items            []struct {
					AuditID string `json:"auditID"`
				}
			}
			if err := json.Unmarshal(body, &list); err != nil || list.Kind != "EventList" || list.APIVersion != "audit.k8s.io/v1" {
				t.Errorf("not an EventList: %v %s", err, body)
			}
			var ids []string
			for _, it := range list.Items {
				ids = append(ids, it.AuditID)
			}
			if !fail.TryLock() {
				posts <- append(ids, "refused")
				return errors.New("refused")
			}
			fail.Unlock()
			posts <- ids
			return nil
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(id string) *Event {
		return &Event{Level: LevelMetadata, AuditID: types.UID(id), Stage: StageResponseComplete, Verb: "get"}
	}
	droppedBefore := counterValue(t, webhookLost)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()

	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		l.Log(ev(id))
	}
	for _, want := range []string{"a b c", "d e f"} {
		if got := strings.Join(<-posts, " "); got != want {
			t.Fatalf("a full batch: %q, want %q", got, want)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); !clk.HasWaiters(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("g's batch never waited")
		}
	}
	select {
	case got := <-posts:
		t.Fatalf("sent %q before MaxWait", got)
	default:
	}
	clk.Step(30 * time.Second)
	if got := strings.Join(<-posts, " "); got != "g" {
		t.Fatalf("after MaxWait: %q, want g", got)
	}

	fail.Lock()
	l.Log(ev("h"))
	l.Log(ev("i"))
	l.Log(ev("j"))
	if got := strings.Join(<-posts, " "); got != "h i j refused" {
		t.Fatalf("a refused batch: %q", got)
	}
	fail.Unlock()

	l.Log(ev("k"))
	for deadline := time.Now().Add(10 * time.Second); !clk.HasWaiters(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("k's batch never waited")
		}
	}
	cancel()
	if got := strings.Join(<-posts, " "); got != "k" {
		t.Fatalf("at the stop: %q, want k", got)
	}
	<-done
	// Counted after the refused Post returned, before the next batch.
	if got := counterValue(t, webhookLost) - droppedBefore; got != 3 {
		t.Errorf("%v events counted dropped, want 3", got)
	}
	outMu.Lock()
	defer outMu.Unlock()
	if n := strings.Count(out.String(), "\n"); n != 11 {
		t.Errorf("the file holds %d events, want all 11", n)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestLoggerNeedsAnOutput(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("a Logger with neither Out nor Webhook was made")
	}
	if _, err := New(Config{Webhook: &WebhookConfig{}}); err == nil {
		t.Error("a webhook without Post was taken")
	}
}

// TestRotatingFileCompress: with Compress each rotated file becomes
// <name>.gz holding what was written to it, and counts as a backup for
// MaxBackups.
func TestRotatingFileCompress(t *testing.T) {
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rf, err := OpenRotating(RotateConfig{Path: filepath.Join(dir, "audit.log"), MaxBytes: 100, MaxBackups: 2, Compress: true, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		// 60 bytes: one line per file, so each write after the first
		// rotates.
		if _, err := fmt.Fprintf(rf, "%058d\n", i); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Minute)
	}
	if err := rf.Close(); err != nil { // waits for the compressions
		t.Fatal(err)
	}
	backups, err := rf.Backups()
	if err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(backups) != 2 || len(names) != 4 {
		t.Fatalf("backups %q among %q; want the 2 newest, compressed, the live file and its lock", backups, names)
	}
	for i, b := range backups {
		if !strings.HasSuffix(b, ".log.gz") {
			t.Fatalf("backup %s is not compressed", b)
		}
		f, err := os.Open(b)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(zr)
		f.Close()
		if want := fmt.Sprintf("%058d\n", 2-i); err != nil || string(data) != want {
			t.Errorf("%s holds %q, %v; want %q", b, data, err, want)
		}
	}
}
