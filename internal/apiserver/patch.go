package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/mergepatch"
	kjson "sigs.k8s.io/json"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/leasehold/leasehold/internal/store"
)

func (s *Server) patch(req *request) error {
	// The media type as kube-apiserver's router matches it: exactly, its
	// parameters left out; any other is its router's bare 415.
	mt, _, _ := strings.Cut(req.r.Header.Get("Content-Type"), ";")
	pt := types.PatchType(strings.TrimSpace(mt))
	switch pt {
	case types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType, types.ApplyYAMLPatchType:
	default:
		return apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", schema.GroupResource{}, "", "415: Unsupported Media Type", 0, false)
	}
	var opts metav1.PatchOptions
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(req.info.query, metav1.SchemeGroupVersion, &opts); err != nil {
		return badRequest("%v", err)
	}
	optErrs := field.ErrorList{}
	if pt == types.ApplyYAMLPatchType && opts.FieldManager == "" {
		optErrs = append(optErrs, field.Required(field.NewPath("fieldManager"), "is required for apply patch"))
	}
	if pt != types.ApplyYAMLPatchType && opts.Force != nil {
		optErrs = append(optErrs, field.Forbidden(field.NewPath("force"), "may not be specified for non-apply patch"))
	}
	wo, err := parseWriteOptions(req, "PatchOptions", opts.DryRun, opts.FieldManager, opts.FieldValidation, optErrs...)
	if err != nil {
		return err
	}
	if _, err := s.negotiate(req.r, req.info.query); err != nil {
		return err
	}
	body, err := s.readBody(req)
	if err != nil {
		return err
	}
	var applied *unstructured.Unstructured
	nameGiven := false
	switch pt {
	case types.ApplyYAMLPatchType:
		if applied, nameGiven, err = s.decodeApply(req, body, wo.fieldValidation); err != nil {
			return err
		}
	default:
		// As kube-apiserver checks it before it looks for the object.
		if !json.Valid(body) {
			return apierrors.NewBadRequest("invalid JSON patch")
		}
	}

	key := req.kind.Key(req.info.namespace, req.info.name)
	created := false
	// The cached object spares a read of etcd, as kube-apiserver patches
	// its watch cache's copy: without a quorum the write then ends at the
	// commit timeout, not at the request's.
	var guess runtime.Object
	warned := len(req.warnings)
	if cur, err := req.kind.Cached(req.ctx, key); err == nil {
		guess = cur
	}
	out, err := req.kind.Update(req.ctx, key, store.UpdateOptions{
		Guess:       guess,
		AllowCreate: pt == types.ApplyYAMLPatchType && req.info.subresource == "",
		DryRun:      wo.dryRun,
		Delete:      deletesOnUpdate,
	}, func(cur runtime.Object) (runtime.Object, error) {
		req.warnings = req.warnings[:warned] // each attempt warns anew
		created = cur == nil
		force := opts.Force != nil && *opts.Force
		if cur == nil {
			// Server-side apply of an object that does not exist creates it:
			// one it names, and not one of a uid, which is gone.
			if !nameGiven {
				return nil, badRequest("the name of the object (%s based on URL) was undeterminable: name must be provided", req.info.name)
			}
			if uid := applied.GetUID(); uid != "" {
				return nil, apierrors.NewConflict(req.gr, req.info.name, fmt.Errorf("uid mismatch: the provided object specified uid %s, and no existing object was found", uid))
			}
			if err := s.namespaceAccepts(req); err != nil {
				return nil, err
			}
			live := req.res.New()
			lm, _ := meta.Accessor(live)
			lm.SetName(req.info.name)
			lm.SetNamespace(req.info.namespace)
			obj, err := s.fields[fieldManagerKey{req.res, ""}].Apply(live, applied.DeepCopy(), wo.fieldManager, force)
			if err != nil {
				return nil, applyError(err)
			}
			dedupOwnerReferences(req, obj, true)
			if obj, err = s.prepareCreate(req, obj, wo.fieldManager, false); err != nil {
				return nil, err
			}
			return obj, s.chargeQuota(req, wo.dryRun)
		}
		if pt == types.ApplyYAMLPatchType {
			obj, err := s.fields[fieldManagerKey{req.res, req.info.subresource}].Apply(cur.DeepCopyObject(), applied.DeepCopy(), wo.fieldManager, force)
			if err != nil {
				return nil, applyError(err)
			}
			dedupOwnerReferences(req, obj, true)
			// The result keeps the stored resourceVersion, or the one the
			// configuration gave: a precondition, as a patch's is.
			return s.prepareUpdate(req, obj, cur, wo.fieldManager, false)
		}
		obj, err := s.applyPatch(req, pt, body, cur, wo.fieldValidation)
		if err != nil {
			return nil, err
		}
		dedupOwnerReferences(req, obj, true)
		return s.prepareUpdate(req, obj, cur, wo.fieldManager, true)
	})
	if err != nil {
		return err
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
		s.created(req, wo.dryRun)
	}
	return s.respond(req, code, out)
}

// maxJSONPatchOperations bounds a JSON patch, as kube-apiserver does.
const maxJSONPatchOperations = 10000

// jsonPatchOp is the shape of a JSON patch operation, against which
// fieldValidation checks each (as kube-apiserver does).
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	From  string `json:"from"`
	Value any    `json:"value"`
}

// applyPatch applies a JSON, merge or strategic merge patch to cur and
// decodes the result, as kube-apiserver's patch handler does: with
// fieldValidation Strict or Warn the patch itself is read strictly too
// (duplicate fields, unknown keys of JSON patch operations), and what the
// patched object cannot be decoded as is a 422 on the field "patch".
func (s *Server) applyPatch(req *request, pt types.PatchType, patch []byte, cur runtime.Object, validation string) (runtime.Object, error) {
	jsonInfo, _ := serializerFor(mediaJSON)
	original, err := encode(encoding{info: jsonInfo}, cur, req.res.GroupVersion)
	if err != nil {
		return nil, err
	}
	if validation == "" {
		validation = metav1.FieldValidationWarn
	}
	checkPatch := validation == metav1.FieldValidationStrict || validation == metav1.FieldValidationWarn
	var (
		patched    []byte
		patchErrs  []error // what the strict reading of the patch found
		shownPatch string  // the value a 422 shows
	)
	switch pt {
	case types.JSONPatchType:
		if checkPatch {
			var ops []jsonPatchOp
			errs, err := kjson.UnmarshalStrict(patch, &ops)
			if err != nil {
				return nil, badRequest("error decoding patch: %v", err)
			}
			for _, e := range errs {
				patchErrs = append(patchErrs, fmt.Errorf("json patch %v", e))
			}
		}
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		if len(p) > maxJSONPatchOperations {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("The allowed maximum operations in a JSON patch is %d, got %d", maxJSONPatchOperations, len(p)))
		}
		if patched, err = applyJSONPatch(p, original); err != nil {
			// 422, as Kubernetes answers; the library's reason as a cause
			// so that kubectl shows it (Kubernetes gives a generic text).
			msg := "the JSON patch could not be applied: " + err.Error()
			return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Message: msg,
				Details: &metav1.StatusDetails{Name: req.info.name, Group: req.gr.Group, Kind: req.gr.Resource,
					Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "patch", Message: msg}}},
			}}
		}
		shownPatch = string(patched)
	case types.MergePatchType:
		if checkPatch {
			v := map[string]any{}
			if patchErrs, err = kjson.UnmarshalStrict(patch, &v); err != nil {
				return nil, badRequest("error decoding patch: %v", err)
			}
		}
		if patched, err = jsonpatch.MergePatch(original, patch); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		shownPatch = string(patched)
	case types.StrategicMergePatchType:
		patchMap := map[string]any{}
		if checkPatch {
			patchErrs, err = kjson.UnmarshalStrict(patch, &patchMap)
		} else {
			err = kjson.UnmarshalCaseSensitivePreserveInts(patch, &patchMap)
		}
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		originalMap := map[string]any{}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(original, &originalMap); err != nil {
			return nil, err
		}
		patchedMap, err := strategicpatch.StrategicMergeMapPatch(originalMap, patchMap, req.res.New())
		if err != nil {
			return nil, strategicMergePatchError(err)
		}
		if patched, err = json.Marshal(patchedMap); err != nil {
			return nil, err
		}
		shownPatch = fmt.Sprintf("%+v", patchMap)
	}
	invalid := func(msg string) error {
		return apierrors.NewInvalid(schema.GroupKind{}, "", field.ErrorList{field.Invalid(field.NewPath("patch"), shownPatch, msg)})
	}
	gvk := req.res.GroupVersionKind()
	obj, _, err := jsonInfo.StrictSerializer.Decode(patched, &gvk, req.res.New())
	strictErr, isStrict := runtime.AsStrictDecodingError(err)
	switch {
	case err != nil && !isStrict:
		return nil, invalid(err.Error())
	case isStrict:
		patchErrs = append(patchErrs, strictErr.Errors()...)
	}
	if len(patchErrs) > 0 {
		switch validation {
		case metav1.FieldValidationStrict:
			return nil, invalid(runtime.NewStrictDecodingError(patchErrs).Error())
		case metav1.FieldValidationWarn:
			for _, e := range patchErrs {
				req.warnings = append(req.warnings, e.Error())
			}
		}
	}
	if path, t := unrepresentableTime(obj); path != "" {
		return nil, badRequest("error decoding request body: %s: %s is outside the years 0000 to 9999, which JSON's times (RFC 3339) can carry",
			path, t.UTC().Format(time.RFC3339Nano))
	}
	m, _ := meta.Accessor(obj)
	cm, _ := meta.Accessor(cur)
	if m.GetName() != cm.GetName() {
		return nil, badRequest("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), cm.GetName())
	}
	// As kube-apiserver: a namespace left out is the request's, one on a
	// cluster-scoped object is dropped, and another is refused.
	if err := s.checkNamespace(req, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// strategicMergePatchError classes the errors of a strategic merge patch
// as kube-apiserver does: a malformed patch is a 400, one that contradicts
// itself a 422. Any other is a 400 too, where Kubernetes answers 500.
func strategicMergePatchError(err error) error {
	switch err {
	case mergepatch.ErrNoListOfLists, mergepatch.ErrPatchContentNotMatchRetainKeys:
		return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", err.Error(), 0, false)
	}
	return apierrors.NewBadRequest(err.Error())
}

// decodeApply reads a server-side apply body (YAML or JSON) and checks it
// names the request's kind and object; it says whether the body named the
// object (a create needs it to). With fieldValidation Strict or Warn,
// duplicate keys are refused or warned of, as kube-apiserver does.
func (s *Server) decodeApply(req *request, body []byte, validation string) (*unstructured.Unstructured, bool, error) {
	// In kube-apiserver's steps and words: YAML to JSON, JSON to an
	// object, then the field manager's check of its kind.
	js, err := yaml.YAMLToJSON(body)
	if err != nil {
		return nil, false, badRequest("error encoding patch: %v", err)
	}
	var fields map[string]any
	if err := yaml.Unmarshal(js, &fields); err != nil {
		return nil, false, badRequest("error decoding patch: %v", err)
	}
	apiVersion, _ := fields["apiVersion"].(string)
	kind, _ := fields["kind"].(string)
	if gvk := schema.FromAPIVersionAndKind(apiVersion, kind); gvk != req.res.GroupVersionKind() {
		return nil, false, badRequest("invalid object type: %v", gvk)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		return nil, false, badRequest("error decoding patch: %v", err)
	}
	if validation == "" || validation == metav1.FieldValidationStrict || validation == metav1.FieldValidationWarn {
		if err := yaml.UnmarshalStrict(body, &map[string]any{}); err != nil {
			if validation == metav1.FieldValidationStrict {
				return nil, false, badRequest("error strict decoding patch: %v", err)
			}
			req.warnings = append(req.warnings, yamlWarnings(err)...)
		}
	}
	named := u.GetName() != ""
	switch {
	case !named:
		u.SetName(req.info.name)
	case u.GetName() != req.info.name:
		return nil, false, badRequest("the name of the object (%s) does not match the name on the URL (%s)", u.GetName(), req.info.name)
	}
	if !req.res.Namespaced {
		// As kube-apiserver: a cluster-scoped object's namespace is dropped.
		u.SetNamespace("")
		return u, named, nil
	}
	switch ns := u.GetNamespace(); {
	case ns == "":
		u.SetNamespace(req.info.namespace)
	case ns != req.info.namespace:
		return nil, false, badRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	return u, named, nil
}

// yamlWarnings are the warnings of a strict YAML reading's error: one for
// each duplicate it lists, as kube-apiserver words them.
func yamlWarnings(err error) []string {
	msg := err.Error()
	for _, prefix := range []string{"yaml: unmarshal errors:\n", "error converting YAML to JSON: yaml: unmarshal errors:\n"} {
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			lines := strings.Split(rest, "\n")
			for i, l := range lines {
				lines[i] = strings.TrimSpace(l)
			}
			return lines
		}
	}
	return []string{msg}
}

// applyError passes conflicts (409, with the conflicting managers) through
// and reports other apply failures, such as fields the schema does not
// declare, as bad requests.
func applyError(err error) error {
	if _, ok := err.(apierrors.APIStatus); ok {
		return err
	}
	return badRequest("%v", err)
}

// applyJSONPatch applies p, turning a panic of the patch library on a
// malformed operation into an error.
func applyJSONPatch(p jsonpatch.Patch, doc []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("invalid JSON patch: %v", r)
		}
	}()
	return p.Apply(doc)
}
