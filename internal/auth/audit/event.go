// Package audit writes leasehold's audit log: one audit.k8s.io/v1 Event per
// line, in the JSON Kubernetes writes, chosen by a Policy in Kubernetes'
// audit.k8s.io/v1 Policy format.
//
// The types here carry the same JSON field names as Kubernetes' (package
// k8s.io/apiserver/pkg/apis/audit/v1); they are defined here because that
// module is not otherwise needed and pulls in a large dependency tree.
//
// Model: request handlers hand finished events to a Logger without
// blocking; one goroutine (Logger.Run) writes them in order to a rotating
// file. The buffer between them is bounded: when it is full, events are
// dropped and counted (apiserver_audit_error_total), so a slow
// disk never holds up requests.
package audit

import (
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// APIVersion is the group version of Event and Policy.
const APIVersion = "audit.k8s.io/v1"

// Level says how much of a request is recorded.
type Level string

// Levels, from least to most.
const (
	LevelNone            Level = "None"
	LevelMetadata        Level = "Metadata"
	LevelRequest         Level = "Request"
	LevelRequestResponse Level = "RequestResponse"
)

func (l Level) ord() int {
	switch l {
	case LevelMetadata:
		return 1
	case LevelRequest:
		return 2
	case LevelRequestResponse:
		return 3
	}
	return 0
}

// Less reports whether l records less than o.
func (l Level) Less(o Level) bool { return l.ord() < o.ord() }

// Stage is a point in a request's life at which an event is written.
type Stage string

// Stages.
const (
	StageRequestReceived  Stage = "RequestReceived"
	StageResponseStarted  Stage = "ResponseStarted"
	StageResponseComplete Stage = "ResponseComplete"
	StagePanic            Stage = "Panic"
)

// Annotation keys the API server sets.
const (
	AnnotationDecision = "authorization.k8s.io/decision"
	AnnotationReason   = "authorization.k8s.io/reason"
)

// Event is audit.k8s.io/v1 Event.
type Event struct {
	metav1.TypeMeta `json:",inline"`

	Level                    Level                      `json:"level"`
	AuditID                  types.UID                  `json:"auditID"`
	Stage                    Stage                      `json:"stage"`
	RequestURI               string                     `json:"requestURI"`
	Verb                     string                     `json:"verb"`
	User                     authenticationv1.UserInfo  `json:"user"`
	ImpersonatedUser         *authenticationv1.UserInfo `json:"impersonatedUser,omitempty"`
	SourceIPs                []string                   `json:"sourceIPs,omitempty"`
	UserAgent                string                     `json:"userAgent,omitempty"`
	ObjectRef                *ObjectReference           `json:"objectRef,omitempty"`
	ResponseStatus           *metav1.Status             `json:"responseStatus,omitempty"`
	RequestObject            *runtime.Unknown           `json:"requestObject,omitempty"`
	ResponseObject           *runtime.Unknown           `json:"responseObject,omitempty"`
	RequestReceivedTimestamp metav1.MicroTime           `json:"requestReceivedTimestamp"`
	StageTimestamp           metav1.MicroTime           `json:"stageTimestamp"`
	Annotations              map[string]string          `json:"annotations,omitempty"`
}

// ObjectReference is what a request was about.
type ObjectReference struct {
	Resource        string    `json:"resource,omitempty"`
	Namespace       string    `json:"namespace,omitempty"`
	Name            string    `json:"name,omitempty"`
	UID             types.UID `json:"uid,omitempty"`
	APIGroup        string    `json:"apiGroup,omitempty"`
	APIVersion      string    `json:"apiVersion,omitempty"`
	ResourceVersion string    `json:"resourceVersion,omitempty"`
	Subresource     string    `json:"subresource,omitempty"`
}
