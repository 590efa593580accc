package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// leaseClient reads and writes the node leases of the fleet's virtual
// agents with one plain HTTP request each, on the http.Client of one of the
// pool's clientsets, and so on its HTTP/2 connection, with its TLS settings,
// credentials and user agent.
//
// A renewal is the request client-go's typed Update sends: a PUT of the
// whole Lease, encoded in protobuf by apimachinery's serializer, with the
// resourceVersion of the cached copy as its precondition. What it leaves out
// is client-go's per-request machinery (request builder, parameter codec,
// rate limiter, decoding into a fresh object): the Lease the server answers
// with is kept encoded, as received, and decoded only for the next write.
// Answers other than 2xx become the errors client-go would return (a
// *apierrors.StatusError from the server's Status, or a generic one), so
// apierrors.IsConflict and IsNotFound classify them as before.
type leaseClient struct {
	http       *http.Client
	collection string // URL of the leases in kube-node-lease
}

// newLeaseClients returns one leaseClient per clientset of p.
func newLeaseClients(p *pool) ([]*leaseClient, error) {
	out := make([]*leaseClient, len(p.clients))
	for i, c := range p.clients {
		lc, err := newLeaseClient(c)
		if err != nil {
			return nil, err
		}
		out[i] = lc
	}
	return out, nil
}

func newLeaseClient(c kubernetes.Interface) (*leaseClient, error) {
	rc, ok := c.CoordinationV1().RESTClient().(*rest.RESTClient)
	if !ok || rc.Client == nil {
		return nil, fmt.Errorf("bench: clientset has no HTTP client (%T)", c.CoordinationV1().RESTClient())
	}
	u := rc.Post().Namespace(corev1.NamespaceNodeLease).Resource("leases").URL()
	return &leaseClient{http: rc.Client, collection: u.String()}, nil
}

var (
	// leaseCodec encodes the requests, as client-go's protobuf serializer.
	leaseCodec = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	// anyDecoder reads answers in protobuf or JSON, whichever the server
	// chose.
	anyDecoder = scheme.Codecs.UniversalDeserializer()
	leaseGVK   = coordinationv1.SchemeGroupVersion.WithKind("Lease")
	nodeGVK    = corev1.SchemeGroupVersion.WithKind("Node")
	leasesGR   = coordinationv1.Resource("leases")
)

// maxErrorBody bounds the answer text an error carries, as client-go does.
const maxErrorBody = 2048

// leaseScratch is what one request needs for a moment: the lease being
// written and the answer's bytes. Workers take one from scratchPool.
type leaseScratch struct {
	lease coordinationv1.Lease
	rt    metav1.MicroTime
	body  bytes.Buffer
}

var scratchPool = sync.Pool{New: func() any { return new(leaseScratch) }}

// get reads lease name into *into, encoded as the server sent it.
func (c *leaseClient) get(ctx context.Context, name string, sc *leaseScratch, into *[]byte) error {
	return c.do(ctx, http.MethodGet, name, nil, sc, into)
}

// create creates l (named in it) and stores the server's copy in *into.
func (c *leaseClient) create(ctx context.Context, l *coordinationv1.Lease, sc *leaseScratch, into *[]byte) error {
	return c.do(ctx, http.MethodPost, "", l, sc, into)
}

// update writes l over lease name, with l's resourceVersion as the
// precondition, and stores the server's copy in *into.
func (c *leaseClient) update(ctx context.Context, l *coordinationv1.Lease, sc *leaseScratch, into *[]byte) error {
	return c.do(ctx, http.MethodPut, l.Name, l, sc, into)
}

// do sends one request about lease name ("" for the collection) with l as
// its body, if any. On success it copies the answer into *into, reusing its
// room; otherwise *into is left alone.
func (c *leaseClient) do(ctx context.Context, method, name string, l *coordinationv1.Lease, sc *leaseScratch, into *[]byte) error {
	url := c.collection
	if name != "" {
		url += "/" + name
	}
	var body io.Reader
	if l != nil {
		// A new buffer each time: the transport may still hold the body
		// when the answer is in.
		data, err := encode(l, leaseGVK)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	req.Header = http.Header{"Accept": acceptHeader}
	if l != nil {
		req.Header["Content-Type"] = contentTypeHeader
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc.body.Reset()
	if _, err := sc.body.ReadFrom(resp.Body); err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode < http.StatusOK || resp.StatusCode > http.StatusPartialContent {
		return responseError(resp, sc.body.Bytes(), method, name)
	}
	*into = append((*into)[:0], sc.body.Bytes()...)
	return nil
}

var (
	acceptHeader      = []string{Protobuf + ", application/json"}
	contentTypeHeader = []string{Protobuf}
)

// responseError turns an answer other than 2xx into the error client-go
// would return for it: the server's Status if it sent one, else a generic
// error for the status code.
func responseError(resp *http.Response, body []byte, method, name string) error {
	if obj, _, err := anyDecoder.Decode(body, nil, &metav1.Status{}); err == nil {
		if st, ok := obj.(*metav1.Status); ok && st.Status != metav1.StatusSuccess {
			return apierrors.FromObject(st)
		}
	}
	message := "unknown"
	if isText(resp.Header.Get("Content-Type")) {
		message = strings.TrimSpace(string(body[:min(len(body), maxErrorBody)]))
	}
	retryAfter, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return apierrors.NewGenericServerResponse(resp.StatusCode, method, leasesGR, name, message, retryAfter, true)
}

func isText(contentType string) bool {
	if contentType == "" {
		return true
	}
	media, _, err := mime.ParseMediaType(contentType)
	return err == nil && strings.HasPrefix(media, "text/")
}

// encode returns obj in protobuf, as kind gvk, in a buffer of its own.
func encode(obj runtime.Object, gvk schema.GroupVersionKind) ([]byte, error) {
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	var w captureWriter
	if err := leaseCodec.EncodeWithAllocator(obj, &w, &runtime.SimpleAllocator{}); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", gvk.Kind, err)
	}
	return w.b, nil
}

// captureWriter keeps the one slice the serializer writes, without a copy.
type captureWriter struct{ b []byte }

func (w *captureWriter) Write(p []byte) (int, error) {
	if w.b != nil {
		return 0, errors.New("bench: encoder wrote twice")
	}
	w.b = p
	return len(p), nil
}

// decodeInto decodes data (protobuf or JSON) into obj.
func decodeInto(data []byte, obj runtime.Object) error {
	if _, _, err := anyDecoder.Decode(data, nil, obj); err != nil {
		return fmt.Errorf("decoding %T: %w", obj, err)
	}
	return nil
}
