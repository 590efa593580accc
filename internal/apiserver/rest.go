package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"unicode"

	"k8s.io/apiserver/pkg/storage/names"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metainternalversionvalidation "k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
)

// request is one resource request being served.
type request struct {
	w    http.ResponseWriter
	r    *http.Request
	ctx  context.Context
	info requestInfo
	res  *registry.Resource
	kind objectStore
	gr   schema.GroupResource
	// warnings go out in Warning headers before the body.
	warnings []string
	// changed is set by prepareUpdate when the object it returned is a
	// heartbeat that certainly differs from the current one.
	changed bool
	// renewal is set by prepareUpdate when the object it returned changes
	// spec.renewTime and nothing else but its manager's managedFields
	// timestamp.
	renewal bool
	// deferred is set when the update's answer stands for a write that
	// did not happen (renewalCheckpoint); each attempt of the update
	// starts it false.
	deferred bool
	// body is the buffer from bodyBuffers the request's body was read
	// into, returned once the request is answered.
	body *[]byte
}

// bodyBuffers recycles the buffers that request bodies of up to
// maxPooledBody bytes are read into: a renewal's body was 2 % of the bytes
// a renewal allocated. Decoding copies what it keeps of a body, and the
// audit log keeps a copy of its own, so a buffer is free again once its
// request has been answered.
var bodyBuffers sync.Pool // of *[]byte

const (
	maxPooledBody = 16 << 10
	// minPooledBody is the capacity a pooled buffer gets at least, so that
	// one buffer serves the bodies of most requests.
	minPooledBody = 4 << 10
)

// bodyBuffer returns n bytes to read the request's body into.
func (req *request) bodyBuffer(n int) []byte {
	if n > maxPooledBody || req.body != nil {
		return make([]byte, n)
	}
	p, _ := bodyBuffers.Get().(*[]byte)
	if p == nil || cap(*p) < n {
		b := make([]byte, max(n, minPooledBody))
		p = &b
	}
	*p = (*p)[:n]
	req.body = p
	return *p
}

// releaseBody returns the request's body buffer to bodyBuffers, zeroed:
// whatever still used the body after it would read zeros, not another
// request's bytes, and fail at once rather than now and then.
func (req *request) releaseBody() {
	if req.body != nil {
		clear(*req.body)
		bodyBuffers.Put(req.body)
		req.body = nil
	}
}

// noneOf answers the lists kubectl reads of what leasehold has none of,
// and fails without: an empty list, to those allowed to list it (RBAC has
// decided by now). Pods: kubectl describe node lists a node's pods, and
// kubectl drain lists them to evict them after it cordons the node, which
// in leasehold leaves nothing else to do. LimitRanges: kubectl describe
// namespace lists them, and says so when there are none.
// CustomResourceDefinitions:
// kubectl's validation of a kind whose API has no PATCH (the reviews:
// kubectl create -f review.yaml) lists them to learn whether the kind is
// a custom one. Neither is otherwise served, nor discovered.
func noneOf(info requestInfo) (string, bool) {
	switch {
	case info.verb != "list":
	case info.gv == coreV1 && info.resource == "pods":
		return `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}` + "\n", true
	case info.gv == coreV1 && info.resource == "limitranges":
		return `{"kind":"LimitRangeList","apiVersion":"v1","metadata":{},"items":[]}` + "\n", true
	case info.gv == apiextensionsV1 && info.resource == "customresourcedefinitions" && info.namespace == "":
		return `{"kind":"CustomResourceDefinitionList","apiVersion":"apiextensions.k8s.io/v1","metadata":{},"items":[]}` + "\n", true
	}
	return "", false
}

func (s *Server) serveResource(w http.ResponseWriter, r *http.Request, info requestInfo) {
	res, ok := info.lookup()
	if !ok {
		if list, ok := noneOf(info); ok {
			setContentType(w.Header(), mediaJSON)
			io.WriteString(w, list)
			return
		}
		s.writeError(w, r, notFoundPath(r), schema.GroupResource{}, "")
		return
	}
	req := &request{w: w, r: r, ctx: r.Context(), info: info, res: res, kind: s.kinds[res], gr: res.GroupResource()}
	switch {
	case res.Namespaced && info.namespace == "" && !info.named && info.verb != "list" && info.verb != "watch" && !(res.Virtual && info.verb == "create"):
		// Of every namespace, a namespaced kind is listed and watched,
		// nothing else: as kube-apiserver routes it, a create or a delete
		// of the collection there is 405. (A delete of the collection
		// went through, in every namespace at once.)
		s.writeError(w, r, methodNotAllowed(), schema.GroupResource{}, "")
		return
	case res.Namespaced && info.namespace == "" && info.named && !(res.Virtual && info.verb == "create"),
		!res.Namespaced && info.namespace != "",
		info.subresource != "" && !slices.ContainsFunc(subresources(res), func(sr subresource) bool { return sr.name == info.subresource }):
		s.writeError(w, r, notFoundPath(r), schema.GroupResource{}, "")
		return
	}
	if (info.verb == "patch" || info.verb == "update") && info.name == "" {
		// A collection is not patched or replaced: 405, as kube-apiserver
		// routes it.
		s.writeError(w, r, methodNotAllowed(), req.gr, "")
		return
	}
	if r.Method == http.MethodHead {
		// Authorized as a get, and then not routed, as in kube-apiserver.
		s.writeError(w, r, methodNotAllowed(), req.gr, info.name)
		return
	}
	verbs := res.AllVerbs()
	if info.subresource != "" {
		for _, sr := range subresources(res) {
			if sr.name == info.subresource {
				verbs = sr.verbs
			}
		}
	}
	if !slices.Contains(verbs, info.verb) {
		s.writeError(w, r, methodNotAllowed(), req.gr, info.name)
		return
	}
	var err error
	switch info.verb {
	case "get":
		err = s.get(req)
	case "list":
		err = s.list(req)
	case "watch":
		err = s.watch(req)
	case "create":
		err = s.create(req)
	case "update":
		err = s.update(req)
	case "patch":
		err = s.patch(req)
	case "delete":
		err = s.delete(req)
	case "deletecollection":
		err = s.deleteCollection(req)
	default:
		err = methodNotAllowed()
	}
	if err != nil {
		s.writeError(w, r, err, req.gr, req.info.name)
	}
	req.releaseBody()
}

// respond writes obj (or its Table or metadata form) with code.
func (s *Server) respond(req *request, code int, obj runtime.Object) error {
	e, err := s.negotiate(req.r, req.info.query)
	if err != nil {
		return err
	}
	for _, wmsg := range req.warnings {
		req.w.Header().Add("Warning", fmt.Sprintf("299 - %q", wmsg))
	}
	gv := req.res.GroupVersion
	if l, ok := obj.(*itemList); ok {
		if obj, err = l.forEncoding(req.res); err != nil {
			return err
		}
	}
	switch e.as {
	case "Table":
		obj, err = s.table(req, e, obj)
		if err != nil {
			return err
		}
		gv = e.meta
	case "PartialObjectMetadata", "PartialObjectMetadataList":
		obj, err = partialMetadata(obj, e.as, e.meta)
		if err != nil {
			return err
		}
		gv = e.meta
	}
	s.writeObject(req.w, req.r, code, e, obj, gv)
	return nil
}

func (s *Server) get(req *request) error {
	var opts metav1.GetOptions
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(req.info.query, metav1.SchemeGroupVersion, &opts); err != nil {
		return badRequest("%v", err)
	}
	key := req.kind.Key(req.info.namespace, req.info.name)
	var obj runtime.Object
	var err error
	switch opts.ResourceVersion {
	case "":
		obj, err = req.kind.Get(req.ctx, key)
	case "0":
		obj, err = req.kind.Cached(req.ctx, key)
	default:
		// Not older than the revision named: the watch cache once it has
		// reached it, 504 with the ResourceVersionTooLarge cause if it does
		// not within 3 s, as kube-apiserver answers.
		rv, perr := store.ParseResourceVersion(opts.ResourceVersion)
		if perr != nil {
			return perr
		}
		obj, err = req.kind.GetNotOlderThan(req.ctx, key, rv)
	}
	if err != nil {
		return err
	}
	return s.respond(req, http.StatusOK, obj)
}

// listOptions decodes, defaults and checks list and watch parameters as
// kube-apiserver does, with the WatchList feature on (its default since
// 1.34): a watch from "" or "0" sends its initial events as a watch-list
// does. A request for one name (a watch on an object's path, or a field
// selector of metadata.name) selects that name alone.
func listOptions(req *request) (*metainternalversion.ListOptions, error) {
	opts := &metainternalversion.ListOptions{}
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(req.info.query, metav1.SchemeGroupVersion, opts); err != nil {
		return nil, badRequest("%v", err)
	}
	if req.info.verb == "watch" {
		// The /watch/ path prefix is a watch whatever ?watch says.
		opts.Watch = true
	}
	metainternalversion.SetListOptionsDefaults(opts, true)
	if errs := metainternalversionvalidation.ValidateListOptions(opts, true); len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "", errs)
	}
	if name := req.info.name; name != "" {
		if opts.FieldSelector != nil && !opts.FieldSelector.Empty() {
			if selected, ok := opts.FieldSelector.RequiresExactMatch("metadata.name"); !ok || selected != name {
				return nil, badRequest("fieldSelector metadata.name doesn't match requested name")
			}
		} else {
			opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", name)
		}
	}
	return opts, nil
}

// filter returns the predicate of a label and field selector, or nil when
// both are empty. Field selectors may name only the resource's fields. An
// unknown field is refused in the words of kube-apiserver's conversion of
// field labels: the core kinds that select more than their metadata
// (Nodes, Namespaces, Events) have their own, the others apimachinery's
// default.
func filter(res *registry.Resource, ls labels.Selector, fs fields.Selector) (func(runtime.Object) bool, error) {
	emptyLabels := ls == nil || ls.Empty()
	emptyFields := fs == nil || fs.Empty()
	if emptyLabels && emptyFields {
		return nil, nil
	}
	if !emptyFields {
		known := res.Fields("", "", res.New())
		for _, req := range fs.Requirements() {
			if known.Has(req.Field) {
				continue
			}
			if res.SelectableFields != nil {
				return nil, badRequest("field label not supported: %s", req.Field)
			}
			_, _, err := runtime.DefaultMetaV1FieldSelectorConversion(req.Field, req.Value)
			return nil, apierrors.NewBadRequest(err.Error())
		}
	}
	return func(obj runtime.Object) bool {
		m, err := meta.Accessor(obj)
		if err != nil {
			return false
		}
		if !emptyLabels && !ls.Matches(labels.Set(m.GetLabels())) {
			return false
		}
		return emptyFields || fs.Matches(res.Fields(m.GetName(), m.GetNamespace(), obj))
	}, nil
}

func (s *Server) list(req *request) error {
	opts, err := listOptions(req)
	if err != nil {
		return err
	}
	pred, err := filter(req.res, opts.LabelSelector, opts.FieldSelector)
	if err != nil {
		return err
	}
	if opts.Continue != "" && opts.ResourceVersion != "" && opts.ResourceVersion != "0" {
		// kube-apiserver's storage refuses it, after the options' checks.
		return badRequest("specifying resource version is not allowed when using continue")
	}
	result, err := req.kind.List(req.ctx, store.ListOptions{
		Namespace: req.info.namespace, ResourceVersion: opts.ResourceVersion, Match: opts.ResourceVersionMatch,
		Limit: opts.Limit, Continue: opts.Continue, Filter: pred,
	})
	if err != nil {
		if errors.Is(err, store.ErrCompacted) {
			// kube-apiserver's words. It offers a token to go on at the
			// latest revision only with the longer message that mentions it.
			if opts.Continue != "" {
				return apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
			}
			return apierrors.NewResourceExpired("The resourceVersion for the provided list is too old.")
		}
		return err
	}
	list := &itemList{Items: result.Items}
	list.ResourceVersion = fmt.Sprint(result.ResourceVersion)
	list.Continue = result.Continue
	list.RemainingItemCount = result.RemainingItemCount
	return s.respond(req, http.StatusOK, list)
}

// readBody reads a request body within the size limit.
func (s *Server) readBody(req *request) ([]byte, error) {
	r := http.MaxBytesReader(req.w, req.r.Body, s.cfg.MaxBodyBytes)
	var body []byte
	var err error
	if n := req.r.ContentLength; n > 0 && n <= s.cfg.MaxBodyBytes {
		// The body is exactly that long (net/http ends it there, and fails
		// a stream whose data disagrees): one allocation, where io.ReadAll
		// starts at 512 bytes and grows.
		body = req.bodyBuffer(int(n))
		_, err = io.ReadFull(r, body)
	} else {
		body, err = io.ReadAll(r)
	}
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", s.cfg.MaxBodyBytes))
		}
		return nil, badRequest("reading request body: %v", err)
	}
	return body, nil
}

// writeOptions are the parameters every write takes.
type writeOptions struct {
	dryRun          bool
	fieldManager    string
	fieldValidation string
}

// parseWriteOptions checks the options of a write the way kube-apiserver
// validates CreateOptions, UpdateOptions, PatchOptions and DeleteOptions
// (kind names which), answering 422 Invalid on that kind.
func parseWriteOptions(req *request, kind string, dryRun []string, manager, validation string, errs ...*field.Error) (writeOptions, error) {
	o := writeOptions{fieldManager: manager, fieldValidation: validation, dryRun: len(dryRun) > 0}
	// In kube-apiserver's order, with apimachinery's checks; errs are the
	// kind's own, found before. Options that plainly pass (every renewal's)
	// skip them, and the paths they would allocate.
	if len(errs) > 0 || !printable(manager, 128) || len(dryRun) > 0 ||
		(validation != "" && validation != metav1.FieldValidationIgnore && validation != metav1.FieldValidationWarn && validation != metav1.FieldValidationStrict) {
		errs = append(errs, metav1validation.ValidateFieldManager(manager, field.NewPath("fieldManager"))...)
		errs = append(errs, metav1validation.ValidateDryRun(field.NewPath("dryRun"), dryRun)...)
		errs = append(errs, metav1validation.ValidateFieldValidation(field.NewPath("fieldValidation"), validation)...)
	}
	if len(errs) > 0 {
		return o, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: kind}, "", errs)
	}
	if o.fieldManager == "" {
		// Kubernetes names an unnamed manager after the client: the user
		// agent's product, its printable characters, at most 128 bytes.
		product, _, _ := strings.Cut(req.r.UserAgent(), "/")
		if printable(product, 128) {
			o.fieldManager = product
		} else {
			var b strings.Builder
			for _, r := range product {
				if !unicode.IsPrint(r) {
					continue
				}
				if b.Len() >= 128 {
					break
				}
				b.WriteRune(r)
			}
			o.fieldManager = b.String()
		}
	}
	if o.fieldManager == "" {
		// The name managedfields records for an unnamed manager; using it
		// here keeps every later comparison of manager names simple.
		o.fieldManager = "unknown"
	}
	return o, nil
}

// printable says whether s is at most max bytes of printable characters.
func printable(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// decodeObject decodes the body into an object of the resource's kind,
// honouring fieldValidation: Strict fails on unknown or duplicate fields,
// Warn (the default) warns, Ignore drops them silently.
func (s *Server) decodeObject(req *request, body []byte, validation string) (runtime.Object, error) {
	obj, err := decodeBody(req.r.Header.Get("Content-Type"), body, req.res.New(), req.res.APIVersion(), req.res.GroupVersionKind(), true)
	if err != nil {
		if !runtime.IsStrictDecodingError(err) {
			return nil, err
		}
		switch validation {
		case metav1.FieldValidationStrict:
			return nil, cannotHandle(req.res.GroupVersionKind(), req.res.GroupVersionKind(), err)
		case metav1.FieldValidationIgnore:
		default:
			if sde, ok := err.(interface{ Errors() []error }); ok {
				for _, e := range sde.Errors() {
					req.warnings = append(req.warnings, e.Error())
				}
			}
		}
	}
	return obj, nil
}

func (s *Server) create(req *request) error {
	if req.res.Virtual {
		return s.review(req)
	}
	if req.info.name != "" {
		return methodNotAllowed()
	}
	var opts metav1.CreateOptions
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(req.info.query, metav1.SchemeGroupVersion, &opts); err != nil {
		return badRequest("%v", err)
	}
	wo, obj, _, err := s.readObject(req, "CreateOptions", opts.DryRun, opts.FieldManager, opts.FieldValidation)
	if err != nil {
		return err
	}
	m, _ := meta.Accessor(obj)
	if m.GetResourceVersion() != "" {
		return badRequest("resourceVersion should not be set on objects to be created")
	}
	dedupOwnerReferences(req, obj, false)
	if m.GetName() == "" && m.GetGenerateName() != "" {
		m.SetName(names.SimpleNameGenerator.GenerateName(m.GetGenerateName()))
	}
	req.info.name = m.GetName()
	auditObject(req.w, m)
	if err := s.namespaceAccepts(req); err != nil {
		return err
	}
	obj, err = s.prepareCreate(req, obj, wo.fieldManager, true)
	if err != nil {
		return err
	}
	if err := s.chargeQuota(req, wo.dryRun); err != nil {
		return err
	}
	key := req.kind.Key(m.GetNamespace(), m.GetName())
	created, err := req.kind.Create(req.ctx, key, obj, wo.dryRun)
	if errors.Is(err, store.ErrExists) {
		// As kube-apiserver says it: the one there is on its way out.
		exists := apierrors.NewAlreadyExists(req.gr, m.GetName())
		if cur, gerr := req.kind.Get(req.ctx, key); gerr == nil && objectMeta(cur).DeletionTimestamp != nil {
			exists.ErrStatus.Message = "object is being deleted: " + exists.ErrStatus.Message
		}
		return exists
	}
	if err != nil {
		return err
	}
	s.created(req, wo.dryRun)
	return s.respond(req, http.StatusCreated, created)
}

// The warnings of duplicate owner references, kube-apiserver's: a create's
// or an update's, and a patch's (after its admission, there).
const (
	duplicateOwnerRefsWarning               = ".metadata.ownerReferences contains duplicate entries; API server dedups owner references in 1.20+, and may reject such requests as early as 1.24; please fix your requests; duplicate UID(s) observed: %v"
	duplicateOwnerRefsAfterAdmissionWarning = ".metadata.ownerReferences contains duplicate entries after mutating admission happens; API server dedups owner references in 1.20+, and may reject such requests as early as 1.24; please fix your requests; duplicate UID(s) observed: %v"
)

// dedupOwnerReferences drops the owner references of obj that repeat an
// earlier one exactly, and warns of them, as kube-apiserver does.
func dedupOwnerReferences(req *request, obj runtime.Object, patch bool) {
	dups := dropDuplicateOwnerReferences(obj)
	if len(dups) == 0 {
		return
	}
	format := duplicateOwnerRefsWarning
	if patch {
		format = duplicateOwnerRefsAfterAdmissionWarning
	}
	req.warnings = append(req.warnings, fmt.Sprintf(format, strings.Join(dups, ", ")))
}

// dropDuplicateOwnerReferences drops the owner references of obj that
// repeat an earlier one exactly, and returns their uids.
func dropDuplicateOwnerReferences(obj runtime.Object) (dups []string) {
	m := objectMeta(obj)
	var kept []metav1.OwnerReference
	for _, r := range m.OwnerReferences {
		if slices.ContainsFunc(kept, func(k metav1.OwnerReference) bool { return apiequality.Semantic.DeepEqual(k, r) }) {
			dups = append(dups, string(r.UID))
			continue
		}
		kept = append(kept, r)
	}
	if len(dups) > 0 {
		m.OwnerReferences = kept
	}
	return dups
}

// checkNamespace fills in or checks the namespace of a body object against
// the URL's.
func (s *Server) checkNamespace(req *request, obj runtime.Object) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	if !req.res.Namespaced {
		m.SetNamespace("")
		return nil
	}
	switch ns := m.GetNamespace(); {
	case ns == "":
		m.SetNamespace(req.info.namespace)
	case ns != req.info.namespace:
		return badRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	return nil
}

// namespaceAccepts checks, like Kubernetes' NamespaceLifecycle admission,
// that the request's namespace exists and is not being deleted.
func (s *Server) namespaceAccepts(req *request) error {
	if !req.res.Namespaced {
		return nil
	}
	nsKind := s.kinds[registry.Namespaces]
	key := nsKind.Key("", req.info.namespace)
	obj, err := nsKind.Cached(req.ctx, key)
	if err != nil {
		// Just created, perhaps, and not yet in the cache.
		if obj, err = nsKind.Get(req.ctx, key); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return apierrors.NewNotFound(registry.Namespaces.GroupResource(), req.info.namespace)
			}
			return err
		}
	}
	if ns := obj.(*corev1.Namespace); ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating {
		// kube-apiserver's namespace lifecycle admission, with the cause
		// controllers look for to let such a refusal pass quietly.
		err := apierrors.NewForbidden(req.gr, req.info.name,
			fmt.Errorf("unable to create new content in namespace %s because it is being terminated", req.info.namespace))
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type:    corev1.NamespaceTerminatingCause,
			Message: fmt.Sprintf("namespace %s is being terminated", req.info.namespace),
			Field:   "metadata.namespace",
		})
		return err
	}
	return nil
}

// prepareCreate sets the fields the server owns, runs the resource's
// strategy, records managed fields and validates.
func (s *Server) prepareCreate(req *request, obj runtime.Object, manager string, managed bool) (runtime.Object, error) {
	m, _ := meta.Accessor(obj)
	m.SetUID(uuid.NewUUID())
	m.SetCreationTimestamp(metav1.NewTime(s.clock.Now()))
	m.SetDeletionTimestamp(nil)
	m.SetDeletionGracePeriodSeconds(nil)
	m.SetSelfLink("")
	if req.res.PrepareForCreate != nil {
		req.res.PrepareForCreate(obj)
	}
	if managed {
		obj = s.fields[fieldManagerKey{req.res, ""}].UpdateNoErrors(req.res.New(), obj, manager)
		m, _ = meta.Accessor(obj)
	}
	errs := registry.ValidateObjectMeta(req.res, objectMeta(obj))
	if req.res.Validate != nil {
		errs = append(errs, req.res.Validate(obj)...)
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(req.res.GroupVersionKind().GroupKind(), m.GetName(), errs)
	}
	if req.res.Warnings != nil {
		req.warnings = append(req.warnings, req.res.Warnings(obj)...)
	}
	if err := s.admit(req, obj, nil); err != nil {
		return nil, err
	}
	return obj, nil
}

// objectMeta returns the ObjectMeta struct of an object (every served kind
// embeds one).
func objectMeta(obj runtime.Object) *metav1.ObjectMeta {
	if a, ok := obj.(metav1.ObjectMetaAccessor); ok {
		if om, ok := a.GetObjectMeta().(*metav1.ObjectMeta); ok {
			return om
		}
	}
	return &metav1.ObjectMeta{}
}

// prepareUpdate turns a proposed object into the one to store over cur:
// resourceVersion precondition, server-owned metadata carried over, the
// strategy for the main resource or the subresource, managed fields (unless
// the caller already computed them, as apply does), validation.
func (s *Server) prepareUpdate(req *request, obj, cur runtime.Object, manager string, managed bool) (runtime.Object, error) {
	nm, _ := meta.Accessor(obj)
	cm, _ := meta.Accessor(cur)
	switch rv := nm.GetResourceVersion(); {
	case rv == "" && !req.res.AllowUnconditionalUpdate:
		// kube-apiserver's storage words it so: the resource for the kind,
		// the version as the number 0.
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: req.gr.Group, Kind: req.gr.Resource}, nm.GetName(), field.ErrorList{
			field.Invalid(field.NewPath("metadata", "resourceVersion"), 0, "must be specified for an update")})
	case rv != "" && rv != cm.GetResourceVersion():
		return nil, store.ErrConflict
	}
	nm.SetResourceVersion(cm.GetResourceVersion())
	// As kube-apiserver carries them over before it validates: what the
	// client left out, and what no update may change. A uid, a
	// deletionTimestamp or a deletionGracePeriodSeconds the client did
	// change is refused by the validation below (immutable).
	if nm.GetUID() == "" {
		nm.SetUID(cm.GetUID())
	}
	nm.SetCreationTimestamp(cm.GetCreationTimestamp())
	if cm.GetDeletionTimestamp() != nil {
		nm.SetDeletionTimestamp(cm.GetDeletionTimestamp())
	}
	if nm.GetDeletionGracePeriodSeconds() == nil {
		nm.SetDeletionGracePeriodSeconds(cm.GetDeletionGracePeriodSeconds())
	}
	nm.SetGeneration(cm.GetGeneration())
	nm.SetSelfLink("")
	switch req.info.subresource {
	case "status":
		// Metadata is written as sent, as kube-apiserver's status
		// strategies of these kinds write it; only spec stays.
		if req.res.PrepareForStatusUpdate != nil {
			req.res.PrepareForStatusUpdate(obj, cur)
		}
	case "finalize":
		ns, old := obj.(*corev1.Namespace), cur.(*corev1.Namespace)
		finalizers := ns.Spec.Finalizers
		*ns = *old.DeepCopy()
		ns.Spec.Finalizers = finalizers
	default:
		if req.res.PrepareForUpdate != nil {
			req.res.PrepareForUpdate(obj, cur)
		}
	}
	heartbeat := false
	req.changed, req.renewal = false, false
	if managed {
		heartbeat, req.changed = s.heartbeatManagedFields(req, obj, cur, manager)
	}
	if managed && !heartbeat {
		obj = s.fields[fieldManagerKey{req.res, req.info.subresource}].UpdateNoErrors(cur, obj, manager)
		nm, _ = meta.Accessor(obj)
	}
	var errs field.ErrorList
	if !heartbeat {
		// A heartbeat's metadata is the stored metadata with one manager's
		// timestamp moved and, when fields changed hands, field sets moved
		// between Update entries of well-formed shape (the fast path is
		// taken only then), so checking it against the stored one finds
		// nothing: metadata that was valid when written stays so, as
		// Kubernetes' ratcheting lets unchanged fields stay.
		errs = registry.ValidateObjectMetaUpdate(req.res, objectMeta(obj), objectMeta(cur))
	}
	switch {
	case req.info.subresource == "finalize":
		errs = append(errs, registry.ValidateNamespaceFinalize(obj.(*corev1.Namespace))...)
	case req.res.ValidateUpdate != nil:
		errs = append(errs, req.res.ValidateUpdate(obj, cur)...)
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(req.res.GroupVersionKind().GroupKind(), nm.GetName(), errs)
	}
	if req.res.Warnings != nil && req.info.subresource == "" {
		req.warnings = append(req.warnings, req.res.Warnings(obj)...)
	}
	if err := s.admit(req, obj, cur); err != nil {
		return nil, err
	}
	return obj, nil
}

// readObject reads what create and update share: the write options, the
// body, and the object in it with its namespace checked against the URL.
func (s *Server) readObject(req *request, optionsKind string, dryRun []string, manager, validation string) (writeOptions, runtime.Object, []byte, error) {
	wo, err := parseWriteOptions(req, optionsKind, dryRun, manager, validation)
	if err != nil {
		return wo, nil, nil, err
	}
	if _, err := s.negotiate(req.r, req.info.query); err != nil {
		return wo, nil, nil, err
	}
	body, err := s.readBody(req)
	if err != nil {
		return wo, nil, nil, err
	}
	obj, err := s.decodeObject(req, body, wo.fieldValidation)
	if err != nil {
		return wo, nil, nil, err
	}
	return wo, obj, body, s.checkNamespace(req, obj)
}

// decodeAgain decodes a body that readObject took once more, for a second
// attempt at a write: without strictness, whose warnings the first decoding
// gave already, and with the same namespace.
func (s *Server) decodeAgain(req *request, body []byte) (runtime.Object, error) {
	obj, err := decodeBody(req.r.Header.Get("Content-Type"), body, req.res.New(), req.res.APIVersion(), req.res.GroupVersionKind(), false)
	if err != nil {
		return nil, err
	}
	dropDuplicateOwnerReferences(obj) // warned of the first time
	return obj, s.checkNamespace(req, obj)
}

func (s *Server) update(req *request) error {
	var opts metav1.UpdateOptions
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(req.info.query, metav1.SchemeGroupVersion, &opts); err != nil {
		return badRequest("%v", err)
	}
	wo, obj, body, err := s.readObject(req, "UpdateOptions", opts.DryRun, opts.FieldManager, opts.FieldValidation)
	if err != nil {
		return err
	}
	dedupOwnerReferences(req, obj, false)
	m, _ := meta.Accessor(obj)
	auditObject(req.w, m)
	if m.GetName() != req.info.name {
		return badRequest("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), req.info.name)
	}
	key := req.kind.Key(req.info.namespace, req.info.name)
	created, attempts, warned := false, 0, len(req.warnings)
	out, err := req.kind.Update(req.ctx, key, store.UpdateOptions{
		Guess:       s.guess(req.ctx, req.kind, key, m.GetResourceVersion()),
		AllowCreate: req.res.AllowCreateOnUpdate && req.info.subresource == "",
		DryRun:      wo.dryRun,
		Changed:     func() bool { return req.changed },
		Delete:      deletesOnUpdate,
		Defer:       s.renewalCheckpoint(req, wo.dryRun),
	}, func(cur runtime.Object) (runtime.Object, error) {
		// The first attempt takes the decoded object as it is and changes
		// it; another attempt (after a conflict) decodes the body again
		// rather than every attempt copying it first.
		proposed := obj
		req.warnings = req.warnings[:warned] // each attempt warns anew
		req.deferred = false
		if attempts++; attempts > 1 {
			var err error
			if proposed, err = s.decodeAgain(req, body); err != nil {
				return nil, err
			}
		}
		if cur == nil {
			created = true
			if err := s.authorizeCreateOnUpdate(req); err != nil {
				return nil, err
			}
			if err := s.namespaceAccepts(req); err != nil {
				return nil, err
			}
			meta.NewAccessor().SetResourceVersion(proposed, "")
			obj, err := s.prepareCreate(req, proposed, wo.fieldManager, true)
			if err != nil {
				return nil, err
			}
			return obj, s.chargeQuota(req, wo.dryRun)
		}
		created = false
		// The body's uid is a precondition, as kube-apiserver takes it
		// for a PUT (a patch that changes it is refused as immutable).
		if uid := objectMeta(proposed).UID; uid != "" {
			if err := checkPreconditions(&metav1.Preconditions{UID: &uid}, cur, req.gr); err != nil {
				return nil, err
			}
		}
		return s.prepareUpdate(req, proposed, cur, wo.fieldManager, true)
	})
	if err != nil {
		return err
	}
	if req.deferred {
		renewalsDeferred.Inc()
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
		s.created(req, wo.dryRun)
	}
	return s.respond(req, code, out)
}

// guess returns the cached object when it is at the revision the client
// based its write on, sparing a read from etcd on the hot path.
func (s *Server) guess(ctx context.Context, k objectStore, key, rv string) runtime.Object {
	if rv == "" {
		return nil
	}
	obj, err := k.Cached(ctx, key)
	if err != nil {
		return nil
	}
	if m, err := meta.Accessor(obj); err != nil || m.GetResourceVersion() != rv {
		return nil
	}
	return obj
}

// deletesOnUpdate tells whether an update of an object being deleted
// deletes it instead (store.UpdateOptions.Delete), by the rule of
// kube-apiserver's ShouldDeleteDuringUpdate (whose package would bring
// its whole storage stack in): the stored object is being deleted with no
// grace period left, and the update leaves it no finalizer. A Namespace
// must have no spec finalizer left either, as its storage adds.
func deletesOnUpdate(obj, cur runtime.Object) bool {
	if ns, ok := obj.(*corev1.Namespace); ok && len(ns.Spec.Finalizers) > 0 {
		return false
	}
	m, cm := objectMeta(obj), objectMeta(cur)
	if len(m.Finalizers) > 0 || cm.DeletionTimestamp == nil {
		return false
	}
	g := cm.DeletionGracePeriodSeconds
	return g == nil || *g == 0
}
