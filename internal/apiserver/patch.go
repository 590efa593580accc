package apiserver

import (
	"fmt"
	"mime"
	"net/http"
	"strings"

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

var patchTypes = []string{string(types.JSONPatchType), string(types.MergePatchType), string(types.StrategicMergePatchType), string(types.ApplyYAMLPatchType)}

func (s *Server) patch(req *request) error {
	mt, _, _ := mime.ParseMediaType(req.r.Header.Get("Content-Type"))
	pt := types.PatchType(mt)
	switch pt {
	case types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType, types.ApplyYAMLPatchType:
	default:
		return unsupportedMediaType(strings.Join(patchTypes, ", "))
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
	if len(optErrs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "PatchOptions"}, "", optErrs)
	}
	wo, err := parseWriteOptions(req, "PatchOptions", opts.DryRun, opts.FieldManager, opts.FieldValidation)
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
	switch pt {
	case types.ApplyYAMLPatchType:
		if applied, err = s.decodeApply(req, body); err != nil {
			return err
		}
	case types.JSONPatchType:
		if _, err := jsonpatch.DecodePatch(body); err != nil {
			return badRequest("error decoding patch: %v", err)
		}
	}

	key := req.kind.Key(req.info.namespace, req.info.name)
	created := false
	out, err := req.kind.Update(req.ctx, key, store.UpdateOptions{
		AllowCreate: pt == types.ApplyYAMLPatchType && req.info.subresource == "",
		DryRun:      wo.dryRun,
	}, func(cur runtime.Object) (runtime.Object, error) {
		created = cur == nil
		force := opts.Force != nil && *opts.Force
		if cur == nil {
			// Server-side apply of an object that does not exist creates it.
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
			if obj, err = s.prepareCreate(req, obj, wo.fieldManager, false); err != nil {
				return nil, err
			}
			return obj, s.chargeQuota(req, wo.dryRun)
		}
		if pt == types.ApplyYAMLPatchType {
			obj, err := s.fields[fieldManagerKey{req.res, statusOnly(req.info.subresource)}].Apply(cur.DeepCopyObject(), applied.DeepCopy(), wo.fieldManager, force)
			if err != nil {
				return nil, applyError(err)
			}
			// The result keeps the stored resourceVersion, or the one the
			// configuration gave: a precondition, as a patch's is.
			return s.prepareUpdate(req, obj, cur, wo.fieldManager, false)
		}
		obj, err := s.applyPatch(req, pt, body, cur, wo.fieldValidation)
		if err != nil {
			return nil, err
		}
		return s.prepareUpdate(req, obj, cur, wo.fieldManager, true)
	})
	if err != nil {
		return err
	}
	if out, err = s.finishDeletion(req, key, out, wo.dryRun); err != nil {
		return err
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
		s.created(req, wo.dryRun)
	}
	return s.respond(req, code, out)
}

// applyPatch applies a JSON, merge or strategic merge patch to cur's JSON
// form and decodes the result.
func (s *Server) applyPatch(req *request, pt types.PatchType, patch []byte, cur runtime.Object, validation string) (runtime.Object, error) {
	jsonInfo, _ := serializerFor(mediaJSON)
	original, err := encode(encoding{info: jsonInfo}, cur, req.res.GroupVersion)
	if err != nil {
		return nil, err
	}
	var patched []byte
	switch pt {
	case types.JSONPatchType:
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, badRequest("error decoding patch: %v", err)
		}
		if patched, err = applyJSONPatch(p, original); err != nil {
			// As Kubernetes: 422, and the library's reason as a cause so
			// that kubectl shows it.
			msg := "the JSON patch could not be applied: " + err.Error()
			return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Message: msg,
				Details: &metav1.StatusDetails{Name: req.info.name, Group: req.gr.Group, Kind: req.gr.Resource,
					Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Message: msg}}},
			}}
		}
	case types.MergePatchType:
		if patched, err = jsonpatch.MergePatch(original, patch); err != nil {
			return nil, badRequest("error applying merge patch: %v", err)
		}
	case types.StrategicMergePatchType:
		if patched, err = strategicpatch.StrategicMergePatch(original, patch, req.res.New()); err != nil {
			return nil, badRequest("error applying strategic merge patch: %v", err)
		}
	}
	r := *req
	hdr := req.r.Header.Clone()
	hdr.Set("Content-Type", mediaJSON)
	r.r = req.r.Clone(req.ctx)
	r.r.Header = hdr
	obj, err := s.decodeObject(&r, patched, validation)
	req.warnings = r.warnings
	if err != nil {
		return nil, err
	}
	m, _ := meta.Accessor(obj)
	cm, _ := meta.Accessor(cur)
	if m.GetName() != cm.GetName() {
		return nil, badRequest("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), cm.GetName())
	}
	if m.GetNamespace() != cm.GetNamespace() {
		return nil, badRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	return obj, nil
}

// decodeApply reads a server-side apply body (YAML or JSON) and checks it
// names the request's kind and object.
func (s *Server) decodeApply(req *request, body []byte) (*unstructured.Unstructured, error) {
	js, err := yaml.YAMLToJSON(body)
	if err != nil {
		return nil, badRequest("error decoding YAML: %v", err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		return nil, badRequest("error decoding apply patch: %v", err)
	}
	gvk := u.GroupVersionKind()
	if want := req.res.GroupVersionKind(); gvk != want {
		return nil, kindMismatch(gvk, want)
	}
	switch {
	case u.GetName() == "":
		u.SetName(req.info.name)
	case u.GetName() != req.info.name:
		return nil, badRequest("the name of the object (%s) does not match the name on the URL (%s)", u.GetName(), req.info.name)
	}
	if req.res.Namespaced {
		switch ns := u.GetNamespace(); {
		case ns == "":
			u.SetNamespace(req.info.namespace)
		case ns != req.info.namespace:
			return nil, badRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
	}
	return u, nil
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
