package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
)

func (s *Server) deleteOptions(req *request) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	body, err := s.readBody(req)
	if err != nil {
		return nil, err
	}
	if len(body) > 0 {
		if _, err := decodeBody(req.r.Header.Get("Content-Type"), body, opts, metav1.SchemeGroupVersion.String(), metav1.SchemeGroupVersion.WithKind("DeleteOptions"), false); err != nil {
			// Older clients label the options with their own group.
			if _, _, err2 := registry.Codecs.UniversalDeserializer().Decode(body, nil, opts); err2 != nil {
				return nil, err
			}
		}
	} else if err := metainternalversionscheme.ParameterCodec.DecodeParameters(req.info.query, metav1.SchemeGroupVersion, opts); err != nil {
		return nil, badRequest("%v", err)
	}
	if _, err := parseWriteOptions(req, "DeleteOptions", opts.DryRun, "", ""); err != nil {
		return nil, err
	}
	// As kube-apiserver with its unsafe deletion of unreadable objects off:
	// the option is dropped, and the rest checked by apimachinery's rules
	// (422: propagationPolicy: Unsupported value).
	opts.IgnoreStoreReadErrorWithClusterBreakingPotential = nil
	if errs := metav1validation.ValidateDeleteOptions(opts); len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "DeleteOptions"}, "", errs)
	}
	return opts, nil
}

func checkPreconditions(p *metav1.Preconditions, obj runtime.Object, gr schema.GroupResource) error {
	if p == nil {
		return nil
	}
	m, _ := meta.Accessor(obj)
	if p.UID != nil && *p.UID != m.GetUID() {
		return apierrors.NewConflict(gr, m.GetName(), fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, m.GetUID()))
	}
	if p.ResourceVersion != nil && *p.ResourceVersion != m.GetResourceVersion() {
		return apierrors.NewConflict(gr, m.GetName(), fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, m.GetResourceVersion()))
	}
	return nil
}

// checkDeletePreconditions checks a delete's preconditions in
// kube-apiserver's words: its generic registry's, which name the kind, or,
// for a namespace, its namespace storage's, which are checkPreconditions'.
func checkDeletePreconditions(p *metav1.Preconditions, obj runtime.Object, req *request) error {
	if p == nil || req.res == registry.Namespaces {
		return checkPreconditions(p, obj, req.gr)
	}
	m, _ := meta.Accessor(obj)
	gk := schema.GroupResource{Group: req.res.GroupVersion.Group, Resource: req.res.Kind}
	if p.UID != nil && *p.UID != m.GetUID() {
		return apierrors.NewConflict(gk, m.GetName(), fmt.Errorf("the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", *p.UID, m.GetUID()))
	}
	if p.ResourceVersion != nil && *p.ResourceVersion != m.GetResourceVersion() {
		return apierrors.NewConflict(gk, m.GetName(), fmt.Errorf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s). The object might have been modified", *p.ResourceVersion, m.GetResourceVersion()))
	}
	return nil
}

func (s *Server) delete(req *request) error {
	opts, err := s.deleteOptions(req)
	if err != nil {
		return err
	}
	if _, err := s.negotiate(req.r, req.info.query); err != nil {
		return err
	}
	obj, deleted, err := s.deleteOne(req, req.info.namespace, req.info.name, opts)
	if err != nil {
		return err
	}
	if !deleted {
		// As kube-apiserver: 202 to a client that asked, the deprecated
		// way, for its dependents not to be orphaned.
		code := http.StatusOK
		if opts.OrphanDependents != nil && !*opts.OrphanDependents {
			code = http.StatusAccepted
		}
		return s.respond(req, code, obj)
	}
	m, _ := meta.Accessor(obj)
	st := &metav1.Status{Status: metav1.StatusSuccess, Details: &metav1.StatusDetails{
		Name: m.GetName(), Group: req.res.GroupVersion.Group, Kind: req.res.Name, UID: m.GetUID(),
	}}
	st.Kind, st.APIVersion = "Status", "v1"
	e, _ := s.negotiate(req.r, req.info.query)
	if e.as != "" {
		e = s.negotiateOrJSON(req.r, req.info.query)
	}
	s.writeObject(req.w, req.r, http.StatusOK, e, st, coreV1)
	return nil
}

// deleteOne deletes an object or, when finalizers must run first (its own,
// the namespace's, or those the propagation policy asks the garbage
// collector for), marks it deleted and leaves it to them. deleted says
// whether the object is gone.
func (s *Server) deleteOne(req *request, namespace, name string, opts *metav1.DeleteOptions) (runtime.Object, bool, error) {
	if req.res == registry.Namespaces && slices.Contains(registry.ImmortalNamespaces, name) {
		return nil, false, apierrors.NewForbidden(req.gr, name, errors.New("this namespace may not be deleted"))
	}
	key := req.kind.Key(namespace, name)
	dryRun := len(opts.DryRun) > 0
	var gone, kept runtime.Object
	var deleted bool
	out, err := req.kind.Update(req.ctx, key, store.UpdateOptions{DryRun: dryRun}, func(cur runtime.Object) (runtime.Object, error) {
		if err := checkDeletePreconditions(opts.Preconditions, cur, req); err != nil {
			return nil, err
		}
		cm, _ := meta.Accessor(cur)
		ns, isNamespace := cur.(*corev1.Namespace)
		if isNamespace && cm.GetDeletionTimestamp() != nil && len(ns.Spec.Finalizers) > 0 {
			// As kube-apiserver's namespace storage: a namespace being
			// emptied is left as it is until its spec finalizers are gone.
			kept, deleted = cur, false
			return nil, errUnchanged
		}
		finalizers := cm.GetFinalizers()
		if s.cfg.GarbageCollection {
			finalizers = gcFinalizers(finalizers, opts)
		}
		if len(finalizers) == 0 && !(isNamespace && len(ns.Spec.Finalizers) > 0) {
			gone, deleted = cur, true
			return nil, errDeleteNow
		}
		deleted = false
		obj := cur.DeepCopyObject()
		m, _ := meta.Accessor(obj)
		if m.GetDeletionTimestamp() == nil {
			now := metav1.NewTime(s.clock.Now())
			m.SetDeletionTimestamp(&now)
			if !isNamespace {
				// A kind without graceful deletion, held by finalizers.
				zero := int64(0)
				m.SetDeletionGracePeriodSeconds(&zero)
			}
		}
		m.SetFinalizers(finalizers)
		if isNamespace {
			obj.(*corev1.Namespace).Status.Phase = corev1.NamespaceTerminating
		}
		return obj, nil
	})
	if err == errUnchanged {
		return kept, false, nil
	}
	switch {
	case err == errDeleteNow:
		rv := resourceVersionOf(gone)
		obj, err := req.kind.Delete(req.ctx, key, dryRun, func(cur runtime.Object) error {
			if resourceVersionOf(cur) != rv {
				return store.ErrConflict
			}
			return nil
		})
		if err == store.ErrConflict {
			return s.deleteOne(req, namespace, name, opts)
		}
		return obj, err == nil, err
	case err != nil:
		return nil, false, err
	}
	return out, deleted, nil
}

// errDeleteNow tells deleteOne's update function found nothing to wait for.
var errDeleteNow = fmt.Errorf("delete now")

// errUnchanged tells deleteOne's update function left the object as it is.
var errUnchanged = fmt.Errorf("unchanged")

// gcFinalizers returns the finalizers of an object being deleted with opts,
// as kube-apiserver's store works them out at each delete: the object's
// own, then the garbage collector's as the options ask (orphan for Orphan,
// foregroundDeletion for Foreground, neither for Background) or, when they
// ask for nothing, as the object has them. A second delete can so take an
// object out of a foreground deletion that waits, or turn it into an
// orphaning one. The order stands when the set does not change.
func gcFinalizers(finalizers []string, opts *metav1.DeleteOptions) []string {
	var orphan, foreground bool
	switch {
	case opts.OrphanDependents != nil:
		orphan = *opts.OrphanDependents
	case opts.PropagationPolicy != nil:
		orphan = *opts.PropagationPolicy == metav1.DeletePropagationOrphan
		foreground = *opts.PropagationPolicy == metav1.DeletePropagationForeground
	default:
		// The first of the two the object has decides both.
		if i := slices.IndexFunc(finalizers, func(f string) bool {
			return f == metav1.FinalizerOrphanDependents || f == metav1.FinalizerDeleteDependents
		}); i >= 0 {
			orphan = finalizers[i] == metav1.FinalizerOrphanDependents
			foreground = !orphan
		}
	}
	out := slices.DeleteFunc(slices.Clone(finalizers), func(f string) bool {
		return f == metav1.FinalizerOrphanDependents || f == metav1.FinalizerDeleteDependents
	})
	if orphan {
		out = append(out, metav1.FinalizerOrphanDependents)
	}
	if foreground {
		out = append(out, metav1.FinalizerDeleteDependents)
	}
	if sets.New(out...).Equal(sets.New(finalizers...)) {
		return finalizers
	}
	return out
}

func resourceVersionOf(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetResourceVersion()
}

func (s *Server) deleteCollection(req *request) error {
	opts, err := s.deleteOptions(req)
	if err != nil {
		return err
	}
	lo, err := listOptions(req)
	if err != nil {
		return err
	}
	pred, err := filter(req.res, lo.LabelSelector, lo.FieldSelector)
	if err != nil {
		return err
	}
	result, err := req.kind.List(req.ctx, store.ListOptions{Namespace: req.info.namespace, Filter: pred})
	if err != nil {
		return err
	}
	for _, obj := range result.Items {
		m, _ := meta.Accessor(obj)
		if _, _, err := s.deleteOne(req, m.GetNamespace(), m.GetName(), opts); err != nil && err != store.ErrNotFound {
			return err
		}
	}
	// The answer is the list as it was listed, as kube-apiserver's.
	list := &itemList{Items: result.Items}
	list.ResourceVersion = strconv.FormatInt(result.ResourceVersion, 10)
	return s.respond(req, http.StatusOK, list)
}
