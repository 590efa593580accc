package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/leasehold/leasehold/internal/store"
)

// statusFor is the one place an error becomes a metav1.Status: the code,
// reason, message and details kube-apiserver gives for the same failure,
// which client-go's apierrors.IsNotFound, IsConflict, IsAlreadyExists,
// IsInvalid, IsGone and friends depend on. gr and name describe the object
// the request was about (empty for collections).
func statusFor(err error, gr schema.GroupResource, name string) *metav1.Status {
	var api apierrors.APIStatus
	var badRV *store.InvalidResourceVersionError
	switch {
	case errors.As(err, &api):
		s := api.Status()
		return &s
	case errors.Is(err, store.ErrNotFound):
		return status(apierrors.NewNotFound(gr, name))
	case errors.Is(err, store.ErrExists):
		return status(apierrors.NewAlreadyExists(gr, name))
	case errors.Is(err, store.ErrConflict):
		return status(apierrors.NewConflict(gr, name, errors.New(conflictMessage)))
	case errors.Is(err, store.ErrCompacted):
		return status(apierrors.NewResourceExpired("too old resource version: " + err.Error()))
	case errors.As(err, &badRV):
		// As kube-apiserver answers a list from one, in its words (a get or
		// a watch from one is a 500 there, which is no answer to a
		// client's mistake).
		return status(apierrors.NewBadRequest("invalid resource version: " +
			field.ErrorList{field.Invalid(field.NewPath("resourceVersion"), badRV.RV, badRV.Err.Error())}.ToAggregate().Error()))
	case errors.Is(err, store.ErrInvalidContinue):
		return status(apierrors.NewBadRequest(err.Error()))
	case errors.Is(err, store.ErrTooLargeResourceVersion):
		// As kube-apiserver: a timeout the client may retry, with a cause
		// saying why.
		msg := "Too large resource version"
		var tl *store.TooLargeResourceVersionError
		if errors.As(err, &tl) {
			msg = fmt.Sprintf("%s: %d, current: %d", msg, tl.Requested, tl.Current)
		}
		st := status(apierrors.NewTimeoutError(msg, 1))
		st.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
		return st
	case errors.Is(err, context.DeadlineExceeded):
		return status(apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0))
	default:
		return status(apierrors.NewInternalError(err))
	}
}

// conflictMessage is Kubernetes' wording for a stale resourceVersion.
const conflictMessage = "the object has been modified; please apply your changes to the latest version and try again"

func status(err *apierrors.StatusError) *metav1.Status {
	s := err.Status()
	return &s
}

// writeError answers with the Status for err in the negotiated format.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error, gr schema.GroupResource, name string) {
	st := statusFor(err, gr, name)
	if st.Code == http.StatusInternalServerError && !errors.Is(err, context.Canceled) {
		s.log.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	s.writeStatus(w, r, st)
}

func (s *Server) writeStatus(w http.ResponseWriter, r *http.Request, st *metav1.Status) {
	st.Kind, st.APIVersion = "Status", "v1"
	if st.Status == "" {
		st.Status = metav1.StatusFailure
	}
	// As kube-apiserver writes any Status that asks for a retry (a 429, a
	// 504 of a resourceVersion not reached yet): client-go then retries
	// by itself.
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(st.Details.RetryAfterSeconds))
	}
	enc := s.negotiateOrJSON(r, r.URL.Query())
	s.writeObject(w, r, int(st.Code), enc, st, coreV1)
}

// badRequest, unsupportedMediaType and friends build the Statuses that have
// no constructor in apierrors.
func badRequest(format string, args ...any) error {
	return apierrors.NewBadRequest(fmt.Sprintf(format, args...))
}

func unsupportedMediaType(contentType string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
		Message: fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s", contentType),
	}}
}

func notAcceptable(accepted string) error {
	return apierrors.NewGenericServerResponse(http.StatusNotAcceptable, "", schema.GroupResource{}, "", "only the following media types are accepted: "+accepted, 0, false)
}

// methodNotAllowed is kube-apiserver's answer to a method its routes do
// not serve on a path (a POST to an object, a DELETE of all namespaces).
func methodNotAllowed() error {
	return apierrors.NewGenericServerResponse(http.StatusMethodNotAllowed, "", schema.GroupResource{}, "", "", 0, false)
}
