package apiserver

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"golang.org/x/net/websocket"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/store"
)

// minWatchTimeout is kube-apiserver's --min-request-timeout: a watch
// without timeoutSeconds ends after a random time between it and twice it,
// so that reconnecting clients spread over the servers.
const minWatchTimeout = 30 * time.Minute

// initialEventsEnd is the annotation on the bookmark that ends the initial
// events of a watch-list (sendInitialEvents=true).
const initialEventsEnd = "k8s.io/initial-events-end"

func (s *Server) watch(req *request) error {
	opts, err := listOptions(req)
	if err != nil {
		return err
	}
	e, err := s.negotiate(req.r, req.info.query)
	if err != nil {
		return err
	}
	if e.info.StreamSerializer == nil {
		return notAcceptable("application/json, application/vnd.kubernetes.protobuf")
	}
	pred, err := filter(req.res, opts.LabelSelector, opts.FieldSelector)
	if err != nil {
		return err
	}
	timeout := time.Duration(float64(minWatchTimeout) * (1 + rand.Float64()))
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	w, werr := req.kind.Watch(req.ctx, store.WatchOptions{
		Namespace: req.info.namespace, ResourceVersion: opts.ResourceVersion,
		SendInitialEvents: opts.SendInitialEvents, Bookmarks: opts.AllowWatchBookmarks, Filter: pred,
	})
	if werr != nil && !errors.Is(werr, store.ErrCompacted) {
		return werr
	}

	contentType := e.info.MediaType
	if e.as != "" {
		contentType = e.mediaType
	}
	if e.info.MediaType == mediaProtobuf {
		contentType = mediaProtobuf + ";stream=watch"
	}
	req.w.Header().Set("Content-Type", contentType)
	ew := &eventWriter{s: s, req: req, e: e, enc: e.info.StreamSerializer.Serializer, key: e.mediaType + "|" + req.info.query.Get("includeObject") + "|" + req.res.APIVersion()}
	ew.sent, ew.sizes = watchEventSeries(req.res.GroupVersion, req.res.Name)
	if werr == nil {
		// Here rather than in stream: a WebSocket whose handshake fails
		// never streams.
		defer w.Stop()
	}
	stream := func(stop <-chan struct{}, flush func()) {
		if werr != nil {
			// As kube-apiserver: the stream opens and carries one ERROR
			// event, in its words (werr is ErrCompacted).
			st := &apierrors.NewResourceExpired("The resourceVersion for the provided watch is too old.").ErrStatus
			st.Kind, st.APIVersion = "Status", "v1"
			ew.writeRaw(watch.Error, st, coreV1)
			flush()
			return
		}
		ew.stream(w, opts, timeout, stop, flush)
	}

	if auth.IsWebSocketRequest(req.r) {
		// As kube-apiserver: each event is one message, text for JSON and
		// binary for protobuf, without the stream's framing. The client
		// sends nothing; its close, or the connection's, ends the watch.
		websocket.Handler(func(ws *websocket.Conn) {
			defer ws.Close()
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				var discard []byte
				for websocket.Message.Receive(ws, &discard) == nil {
				}
			}()
			ew.out = webSocketWriter{ws: ws, text: e.info.EncodesAsText}
			stream(closed, func() {})
		}).ServeHTTP(req.w, req.r)
		return nil
	}

	req.w.Header().Set("Transfer-Encoding", "chunked")
	req.w.WriteHeader(http.StatusOK)
	ew.out = e.info.StreamSerializer.Framer.NewFrameWriter(req.w)
	flusher, _ := req.w.(http.Flusher)
	stream(req.ctx.Done(), func() {
		if flusher != nil {
			flusher.Flush()
		}
	})
	return nil
}

// stream writes w's events until stop, the server's shutdown, the
// watch's timeout or the end of its events, calling flush whenever it has
// written all that is waiting.
func (ew *eventWriter) stream(w *store.Watch, opts *metainternalversion.ListOptions, timeout time.Duration, stop <-chan struct{}, flush func()) {
	s, req := ew.s, ew.req
	defer openLongRunning(req.r, req.info)()

	for _, ev := range w.Initial {
		if err := ew.write(ev); err != nil {
			return
		}
	}
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents && opts.AllowWatchBookmarks {
		bm := req.res.New()
		m, _ := meta.Accessor(bm)
		m.SetResourceVersion(strconv.FormatInt(w.InitialRV, 10))
		m.SetAnnotations(map[string]string{initialEventsEnd: "true"})
		if err := ew.write(&store.Event{Type: watch.Bookmark, Object: bm, RV: w.InitialRV}); err != nil {
			return
		}
	}
	flush()

	timer := s.clock.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case <-stop:
			return
		case <-s.shutdown:
			return
		case <-timer.C():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if ev.Type == watch.Bookmark && !opts.AllowWatchBookmarks {
				continue
			}
			if err := ew.write(ev); err != nil {
				return
			}
			if len(w.Events) == 0 {
				flush()
			}
		}
	}
}

// webSocketWriter sends each write as one WebSocket message.
type webSocketWriter struct {
	ws   *websocket.Conn
	text bool
}

func (w webSocketWriter) Write(p []byte) (int, error) {
	var err error
	if w.text {
		err = websocket.Message.Send(w.ws, string(p))
	} else {
		err = websocket.Message.Send(w.ws, p)
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// eventWriter encodes watch events in the negotiated form, sharing each
// encoding between all watchers that want the same form.
type eventWriter struct {
	s   *Server
	req *request
	e   encoding
	enc runtime.Encoder
	out interface{ Write([]byte) (int, error) }
	key string
	// headed is set once an event has gone out: a Table's column
	// definitions come only with the first, as kube-apiserver sends them.
	headed bool
	// The watch's series of apiserver_watch_events_total and
	// apiserver_watch_events_sizes.
	sent  prometheus.Counter
	sizes prometheus.Observer
}

func (ew *eventWriter) write(ev *store.Event) error {
	key, headers := ew.key, ew.e.as == "Table" && !ew.headed
	if headers {
		key += "|headers"
	}
	data, err := ev.Encoded(key, func() ([]byte, error) {
		// Every event, bookmarks included, carries the form the client asked
		// for: metadata informers cannot decode anything else.
		obj, gv := ev.Object, ew.req.res.GroupVersion
		switch ew.e.as {
		case "Table":
			t, err := ew.s.table(ew.req, ew.e, obj)
			if err != nil {
				return nil, err
			}
			if !headers {
				t.head.ColumnDefinitions = nil
			}
			if ev.Type == watch.Bookmark {
				t.n = 0 // a bookmark's Table carries a revision, no rows
			}
			obj, gv = t, ew.e.meta
		case "PartialObjectMetadata", "PartialObjectMetadataList":
			obj, gv = &metav1.PartialObjectMetadata{ObjectMeta: *objectMeta(obj)}, ew.e.meta
		}
		return ew.frame(ev.Type, obj, gv)
	})
	if err != nil {
		ew.s.log.Error("encoding watch event", "err", err)
		return err
	}
	ew.headed = true
	ew.sent.Inc()
	ew.sizes.Observe(float64(len(data)))
	_, err = ew.out.Write(data)
	return err
}

func (ew *eventWriter) writeRaw(t watch.EventType, obj runtime.Object, gv schema.GroupVersion) {
	data, err := ew.frame(t, obj, gv)
	if err == nil {
		ew.out.Write(data)
	}
}

// frame encodes one watch event: the object in the response format inside
// a metav1.WatchEvent.
func (ew *eventWriter) frame(t watch.EventType, obj runtime.Object, gv schema.GroupVersion) ([]byte, error) {
	inner := ew.e
	inner.pretty = false
	raw, err := encode(inner, obj, gv)
	if err != nil {
		return nil, err
	}
	// The frame lives as long as the event in the watch cache's ring:
	// room for the object and the envelope, so that it is not twice the
	// size it needs.
	var buf bytes.Buffer
	buf.Grow(len(raw) + 128)
	if err := ew.enc.Encode(&metav1.WatchEvent{Type: string(t), Object: runtime.RawExtension{Raw: bytes.TrimSpace(raw)}}, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
