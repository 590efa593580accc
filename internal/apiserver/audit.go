package apiserver

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/auth/audit"
	"github.com/leasehold/leasehold/internal/registry"
)

// auditMaxBody bounds how much of a request or response body an audit
// event may carry; larger bodies are left out.
const auditMaxBody = 1 << 20

// A user agent longer than auditMaxUserAgent is cut to it in the event, and
// ends with auditTruncated, as kube-apiserver's events do.
const (
	auditMaxUserAgent = 1024
	auditTruncated    = "...TRUNCATED"
)

// auditRecord follows one request for the audit log: the event as it
// stands, written at each stage the policy asks for.
type auditRecord struct {
	s        *Server
	decision audit.Decision
	watch    bool
	// unauthenticated: the request was refused before it was
	// authenticated, and its event is written once, at ResponseStarted,
	// as kube-apiserver writes it.
	unauthenticated bool

	mu      sync.Mutex
	ev      audit.Event
	reqBody *limitedBuffer
	// done: the event has gone to the log at its last stage; it is the
	// log's now, and nothing may change it.
	done bool
}

// auditBegin starts the record of a request, writing RequestReceived; nil
// when nothing of it is to be recorded. a.User is the authenticated user,
// nil for a request refused before it was authenticated, whose event is
// written once, when its response starts; id is the request's audit ID.
func (s *Server) auditBegin(r *http.Request, info requestInfo, a auth.Attributes, id types.UID) *auditRecord {
	if s.cfg.Audit == nil {
		return nil
	}
	unauthenticated := a.User == nil
	if unauthenticated {
		a.User = &auth.User{}
	}
	d := s.cfg.Audit.Policy().Decide(a)
	if d.Level == audit.LevelNone {
		return nil
	}
	now := metav1.NewMicroTime(s.clock.Now())
	ua := r.UserAgent()
	if len(ua) > auditMaxUserAgent {
		ua = ua[:auditMaxUserAgent] + auditTruncated
	}
	rec := &auditRecord{s: s, decision: d, watch: info.verb == "watch", unauthenticated: unauthenticated}
	rec.ev = audit.Event{
		TypeMeta:                 metav1.TypeMeta{Kind: "Event", APIVersion: audit.APIVersion},
		Level:                    d.Level,
		AuditID:                  id,
		RequestURI:               r.RequestURI,
		Verb:                     a.Verb,
		User:                     userInfo(a.User),
		SourceIPs:                sourceIPs(r),
		UserAgent:                ua,
		RequestReceivedTimestamp: now,
	}
	if info.resourceRequest {
		rec.ev.ObjectRef = &audit.ObjectReference{
			Resource: info.resource, Namespace: info.namespace, Name: info.name,
			APIGroup: info.gv.Group, APIVersion: info.gv.Version, Subresource: info.subresource,
		}
	}
	if unauthenticated {
		return rec
	}
	if !d.Level.Less(audit.LevelRequest) && r.Body != nil && r.Body != http.NoBody {
		rec.reqBody = &limitedBuffer{max: auditMaxBody}
		r.Body = teeBody{Reader: io.TeeReader(r.Body, rec.reqBody), Closer: r.Body}
	}
	rec.emit(audit.StageRequestReceived)
	return rec
}

type teeBody struct {
	io.Reader
	io.Closer
}

// emit writes the event at stage, if the policy records it. The log takes
// the event as it stands: a copy at the early stages, and at the last
// (ResponseComplete or Panic, or the one stage of a request that failed
// authentication) the record's own, which nothing changes afterwards
// (done). RequestReceived is stamped with the time the request came.
func (rec *auditRecord) emit(stage audit.Stage) {
	if !rec.decision.Records(stage) {
		return
	}
	now := metav1.NewMicroTime(rec.s.clock.Now())
	rec.mu.Lock()
	ev := &rec.ev
	if stage == audit.StageResponseComplete || stage == audit.StagePanic || rec.unauthenticated {
		rec.done = true
	} else {
		c := rec.ev
		c.Annotations = maps.Clone(rec.ev.Annotations)
		ev = &c
	}
	if stage == audit.StageRequestReceived {
		now = ev.RequestReceivedTimestamp
	}
	ev.Stage, ev.StageTimestamp = stage, now
	rec.mu.Unlock()
	rec.s.cfg.Audit.Log(ev)
}

func (rec *auditRecord) annotate(kv ...string) {
	if rec == nil {
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.done {
		return
	}
	if rec.ev.Annotations == nil {
		rec.ev.Annotations = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		rec.ev.Annotations[kv[i]] = kv[i+1]
	}
}

// auditObject completes the objectRef of the audit event that w's
// auditWriter records, if any, from the object of a create or update, as
// kube-apiserver's does: the name and namespace where the URL gave none,
// and the object's uid and resourceVersion.
func auditObject(w http.ResponseWriter, m metav1.Object) {
	for {
		switch x := w.(type) {
		case *auditWriter:
			x.rec.object(m)
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return
		}
	}
}

func (rec *auditRecord) object(m metav1.Object) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.done || rec.ev.ObjectRef == nil {
		return
	}
	// The events of earlier stages, copies that the log may be writing
	// now, share the reference: it is replaced, not changed.
	ref := *rec.ev.ObjectRef
	if ref.Name == "" {
		ref.Name = m.GetName()
	}
	if ref.Namespace == "" {
		ref.Namespace = m.GetNamespace()
	}
	if ref.UID == "" {
		ref.UID = m.GetUID()
	}
	if ref.ResourceVersion == "" {
		ref.ResourceVersion = m.GetResourceVersion()
	}
	rec.ev.ObjectRef = &ref
}

func (rec *auditRecord) impersonated(u *auth.User) {
	if rec == nil {
		return
	}
	ui := userInfo(u)
	rec.mu.Lock()
	if !rec.done {
		rec.ev.ImpersonatedUser = &ui
	}
	rec.mu.Unlock()
}

// auditWriter passes a response through, noting its code, starting the
// ResponseStarted stage of watches, and keeping the body when the event
// needs it (a Status, or the response object).
type auditWriter struct {
	http.ResponseWriter
	rec         *auditRecord
	wroteHeader bool
	code        int
	body        *limitedBuffer
	finished    bool
}

func (w *auditWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.wroteHeader, w.code = true, code
		// A delete answers with a Status too, of its success.
		if code >= 400 || w.rec.ev.Verb == "delete" || (w.rec.decision.Level == audit.LevelRequestResponse && !w.rec.watch) {
			w.body = &limitedBuffer{max: auditMaxBody}
		}
		if w.rec.watch && !w.rec.unauthenticated {
			w.rec.setStatus(code, nil)
			w.rec.emit(audit.StageResponseStarted)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *auditWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.body != nil {
		w.body.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

func (w *auditWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *auditWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands the connection over to a watch's WebSocket, whose
// handshake answers 101 Switching Protocols on it: the event records that
// code, as kube-apiserver's do.
func (w *auditWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if !w.wroteHeader {
		w.wroteHeader, w.code = true, http.StatusSwitchingProtocols
		if w.rec.watch {
			w.rec.setStatus(w.code, nil)
			w.rec.emit(audit.StageResponseStarted)
		}
	}
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// finish writes ResponseComplete (or Panic) once.
func (w *auditWriter) finish(panicked bool) {
	if w.finished {
		return
	}
	w.finished = true
	rec := w.rec
	if panicked {
		rec.setStatus(http.StatusInternalServerError, nil)
		rec.emit(audit.StagePanic)
		return
	}
	code := w.code
	if !w.wroteHeader {
		code = http.StatusOK
	}
	var obj runtime.Object
	if w.body != nil && !w.body.overflow && w.body.Len() > 0 {
		body := w.body.Bytes()
		if w.Header().Get("Content-Encoding") == "gzip" {
			body = gunzipAudited(body)
		}
		obj = decodeAudited(body)
	}
	// A Status answered, of an error or a success, is the event's
	// responseStatus, as in kube-apiserver's events.
	st, _ := obj.(*metav1.Status)
	rec.setStatus(code, st)
	rec.mu.Lock()
	if rec.reqBody != nil && !rec.reqBody.overflow && rec.reqBody.Len() > 0 {
		rec.ev.RequestObject = rec.auditedJSON(rec.reqBody.Bytes())
	}
	if rec.decision.Level == audit.LevelRequestResponse && obj != nil {
		if js, err := json.Marshal(obj); err == nil {
			rec.ev.ResponseObject = rec.auditedJSON(js)
		}
	}
	rec.mu.Unlock()
	if rec.unauthenticated {
		rec.emit(audit.StageResponseStarted)
		return
	}
	rec.emit(audit.StageResponseComplete)
}

func (rec *auditRecord) setStatus(code int, st *metav1.Status) {
	rs := &metav1.Status{Code: int32(code)}
	if st != nil {
		rs.Status, rs.Message, rs.Reason, rs.Details = st.Status, st.Message, st.Reason, st.Details
	}
	rec.mu.Lock()
	if !rec.done {
		rec.ev.ResponseStatus = rs
	}
	rec.mu.Unlock()
}

// gunzipAudited reads a gzipped response body as its client does, for
// an event that keeps it: nil if it is not gzip or, uncompressed, larger
// than an event may carry.
func gunzipAudited(b []byte) []byte {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil
	}
	plain, err := io.ReadAll(io.LimitReader(zr, auditMaxBody+1))
	if err != nil || len(plain) > auditMaxBody {
		return nil
	}
	return plain
}

// decodeAudited decodes a body in any of the served encodings.
func decodeAudited(b []byte) runtime.Object {
	obj, _, err := registry.Codecs.UniversalDeserializer().Decode(b, nil, nil)
	if err != nil {
		return nil
	}
	return obj
}

// auditedJSON turns a request or response body into the JSON the event
// carries: objects in any encoding become JSON, a JSON patch stays as it
// is, anything else is left out. Managed fields go when the policy says.
func (rec *auditRecord) auditedJSON(b []byte) *runtime.Unknown {
	var js []byte
	if json.Valid(b) {
		js = b
	} else if obj := decodeAudited(b); obj != nil {
		var err error
		if js, err = json.Marshal(obj); err != nil {
			return nil
		}
	} else {
		return nil
	}
	if rec.decision.OmitManagedFields && bytes.Contains(js, []byte(`"managedFields"`)) {
		var m map[string]any
		if json.Unmarshal(js, &m) == nil {
			if md, ok := m["metadata"].(map[string]any); ok {
				delete(md, "managedFields")
				if out, err := json.Marshal(m); err == nil {
					js = out
				}
			}
		}
	}
	return &runtime.Unknown{Raw: js, ContentType: runtime.ContentTypeJSON}
}

func userInfo(u *auth.User) authenticationv1.UserInfo {
	if u == nil {
		return authenticationv1.UserInfo{}
	}
	ui := authenticationv1.UserInfo{Username: u.Name, UID: u.UID, Groups: u.Groups}
	if len(u.Extra) > 0 {
		ui.Extra = map[string]authenticationv1.ExtraValue{}
		for k, v := range u.Extra {
			ui.Extra[k] = v
		}
	}
	return ui
}

// sourceIPs lists the addresses of X-Forwarded-For, then X-Real-Ip's
// unless that one is among them, then the peer's unless it is the last of
// them, by apimachinery's own reading, as kube-apiserver lists them: the
// last is always the peer's, whatever a client wrote in the headers.
func sourceIPs(r *http.Request) []string {
	// A request that names no proxy's client has the peer's address
	// alone. When it is already in the form net.IP.String writes, it is
	// the answer as it stands, without parsing it into a net.IP and
	// formatting it again (four allocations a request).
	if r.Header.Get("X-Forwarded-For") == "" && r.Header.Get("X-Real-Ip") == "" {
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			var buf [64]byte
			if a, err := netip.ParseAddr(host); err == nil && a.Zone() == "" && !a.Is4In6() && string(a.AppendTo(buf[:0])) == host {
				return []string{host}
			}
		}
	}
	ips := utilnet.SourceIPs(r)
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// limitedBuffer keeps up to max bytes and notes whether more came.
type limitedBuffer struct {
	bytes.Buffer
	max      int
	overflow bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.overflow || b.Len()+len(p) > b.max {
		b.overflow = true
		b.Reset()
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
