package registry

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// eventColumns are the columns Kubernetes prints for events (the same for
// both API groups); only LAST SEEN, TYPE, REASON, OBJECT and MESSAGE show
// without -o wide.
var eventColumns = []metav1.TableColumnDefinition{
	{Name: "Last Seen", Type: "string", Description: corev1.Event{}.SwaggerDoc()["lastTimestamp"]},
	{Name: "Type", Type: "string", Description: corev1.Event{}.SwaggerDoc()["type"]},
	{Name: "Reason", Type: "string", Description: corev1.Event{}.SwaggerDoc()["reason"]},
	{Name: "Object", Type: "string", Description: corev1.Event{}.SwaggerDoc()["involvedObject"]},
	{Name: "Subobject", Type: "string", Priority: 1, Description: corev1.ObjectReference{}.SwaggerDoc()["fieldPath"]},
	{Name: "Source", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["source"]},
	{Name: "Message", Type: "string", Description: corev1.Event{}.SwaggerDoc()["message"]},
	{Name: "First Seen", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["firstTimestamp"]},
	{Name: "Count", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["count"]},
	{Name: "Name", Type: "string", Format: "name", Priority: 1, Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
}

// Events is v1 Event, what controllers report about objects.
var Events = &Resource{
	GroupVersion: corev1.SchemeGroupVersion,
	Name:         "events",
	SingularName: "event",
	Kind:         "Event",
	ShortNames:   []string{"ev"},
	Namespaced:   true,
	// As kube-apiserver checks a v1 Event's name: only as a path segment
	// (its event validation leaves metadata to the generic checks).
	NameRule: path.ValidatePathSegmentName,
	New:      func() runtime.Object { return &corev1.Event{} },
	NewList:  func() runtime.Object { return &corev1.EventList{} },
	Validate: func(obj runtime.Object) field.ErrorList { return ValidateEvent(obj.(*corev1.Event)) },
	ValidateUpdate: func(obj, _ runtime.Object) field.ErrorList {
		return ValidateEvent(obj.(*corev1.Event))
	},
	AllowCreateOnUpdate:      true,
	AllowUnconditionalUpdate: true,
	OwnColumns:               true,
	Columns:                  eventColumns,
	Cells:                    func(obj runtime.Object, now time.Time) []interface{} { return eventCells(obj.(*corev1.Event), now) },
	SelectableFields: func(obj runtime.Object) map[string]string {
		e := obj.(*corev1.Event)
		// As kube-apiserver selects it: an event posted the events.k8s.io
		// way has no source, and is selected by its reporting controller.
		source := e.Source.Component
		if source == "" {
			source = e.ReportingController
		}
		return map[string]string{
			"involvedObject.kind":            e.InvolvedObject.Kind,
			"involvedObject.namespace":       e.InvolvedObject.Namespace,
			"involvedObject.name":            e.InvolvedObject.Name,
			"involvedObject.uid":             string(e.InvolvedObject.UID),
			"involvedObject.apiVersion":      e.InvolvedObject.APIVersion,
			"involvedObject.resourceVersion": e.InvolvedObject.ResourceVersion,
			"involvedObject.fieldPath":       e.InvolvedObject.FieldPath,
			"reason":                         e.Reason,
			"reportingComponent":             e.ReportingController,
			"source":                         source,
			"type":                           e.Type,
		}
	},
}

// EventsV1 is events.k8s.io/v1 Event: the same objects as v1 Event,
// converted field by field.
var EventsV1 = &Resource{
	GroupVersion:   eventsv1.SchemeGroupVersion,
	Name:           "events",
	SingularName:   "event",
	Kind:           "Event",
	KubeFinalizers: true,
	ShortNames:     []string{"ev"},
	Namespaced:     true,
	New:            func() runtime.Object { return &eventsv1.Event{} },
	NewList:        func() runtime.Object { return &eventsv1.EventList{} },
	Storage:        Events,
	ToStorage:      func(obj runtime.Object) (runtime.Object, error) { return EventToCore(obj.(*eventsv1.Event)), nil },
	FromStorage:    func(obj runtime.Object) (runtime.Object, error) { return EventFromCore(obj.(*corev1.Event)), nil },
	Validate:       func(obj runtime.Object) field.ErrorList { return ValidateEventV1(obj.(*eventsv1.Event)) },
	ValidateUpdate: func(obj, old runtime.Object) field.ErrorList {
		return ValidateEventV1Update(obj.(*eventsv1.Event), old.(*eventsv1.Event))
	},
	AllowCreateOnUpdate:      true,
	AllowUnconditionalUpdate: true,
	OwnColumns:               true,
	Columns:                  eventColumns,
	Cells: func(obj runtime.Object, now time.Time) []interface{} {
		return eventCells(EventToCore(obj.(*eventsv1.Event)), now)
	},
	SelectableFields: func(obj runtime.Object) map[string]string {
		e := obj.(*eventsv1.Event)
		// source, as for the core API's Events (kube-apiserver maps it to
		// the same field).
		source := e.DeprecatedSource.Component
		if source == "" {
			source = e.ReportingController
		}
		return map[string]string{
			"regarding.kind":            e.Regarding.Kind,
			"regarding.namespace":       e.Regarding.Namespace,
			"regarding.name":            e.Regarding.Name,
			"regarding.uid":             string(e.Regarding.UID),
			"regarding.apiVersion":      e.Regarding.APIVersion,
			"regarding.resourceVersion": e.Regarding.ResourceVersion,
			"regarding.fieldPath":       e.Regarding.FieldPath,
			"reason":                    e.Reason,
			"reportingController":       e.ReportingController,
			"source":                    source,
			"type":                      e.Type,
		}
	},
}

func init() {
	register(Events)
	register(EventsV1)
}

func eventCells(e *corev1.Event, now time.Time) []interface{} {
	first := Age(e.FirstTimestamp, now)
	if e.FirstTimestamp.IsZero() {
		first = microAge(e.EventTime, now)
	}
	last := Age(e.LastTimestamp, now)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if e.Series != nil {
		last, count = microAge(e.Series.LastObservedTime, now), e.Series.Count
	} else if count == 0 {
		count = 1
	}
	target := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		target += "/" + e.InvolvedObject.Name
	}
	source := e.Source.Component
	instance := e.Source.Host
	if source == "" {
		source, instance = e.ReportingController, e.ReportingInstance
	}
	if instance != "" {
		source += ", " + instance
	}
	return []interface{}{last, e.Type, e.Reason, target, e.InvolvedObject.FieldPath, source, strings.TrimSpace(e.Message), first, int64(count), e.Name}
}

func microAge(t metav1.MicroTime, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return Age(metav1.NewTime(t.Time), now)
}

// Limits of an event's strings, as kube-apiserver sets them.
const (
	eventReportingInstanceLimit = 128
	eventActionLimit            = 128
	eventReasonLimit            = 128
	eventNoteLimit              = 1024
)

// ValidateEvent checks an Event as kube-apiserver does through either API
// group. An event without eventTime (written as client-go's legacy recorder
// writes it) lives in its object's namespace, or in "default" (or none) for
// a cluster-scoped object. One with eventTime names who reported it
// (reportingController, reportingInstance), what was done (action) and why
// (reason), within their lengths, and regards a cluster-scoped object from
// "default" or "kube-system".
func ValidateEvent(e *corev1.Event) field.ErrorList {
	var errs field.ErrorList
	objNS := field.NewPath("involvedObject", "namespace")
	if e.EventTime.IsZero() {
		if (e.InvolvedObject.Namespace == "" && e.Namespace != "" && e.Namespace != metav1.NamespaceDefault) ||
			(e.InvolvedObject.Namespace != "" && e.InvolvedObject.Namespace != e.Namespace) {
			errs = append(errs, field.Invalid(objNS, e.InvolvedObject.Namespace, "does not match event.namespace"))
		}
		return errs
	}
	if e.InvolvedObject.Namespace == "" && e.Namespace != metav1.NamespaceDefault && e.Namespace != metav1.NamespaceSystem {
		errs = append(errs, field.Invalid(objNS, e.InvolvedObject.Namespace, "does not match event.namespace"))
	}
	if e.ReportingController == "" {
		errs = append(errs, field.Required(field.NewPath("reportingController"), ""))
	}
	for _, msg := range validation.IsQualifiedName(e.ReportingController) {
		errs = append(errs, field.Invalid(field.NewPath("reportingController"), e.ReportingController, msg))
	}
	errs = append(errs, eventString(field.NewPath("reportingInstance"), e.ReportingInstance, eventReportingInstanceLimit, true)...)
	errs = append(errs, eventString(field.NewPath("action"), e.Action, eventActionLimit, true)...)
	errs = append(errs, eventString(field.NewPath("reason"), e.Reason, eventReasonLimit, true)...)
	return append(errs, eventString(field.NewPath("message"), e.Message, eventNoteLimit, false)...)
}

// eventString checks one of an event's strings: present when required, and
// no longer than limit.
func eventString(path *field.Path, s string, limit int, required bool) field.ErrorList {
	var errs field.ErrorList
	if required && s == "" {
		errs = append(errs, field.Required(path, ""))
	}
	if len(s) > limit {
		errs = append(errs, field.Invalid(path, "", fmt.Sprintf("can have at most %d characters", limit)))
	}
	return errs
}

// ValidateEventV1 checks an Event created through events.k8s.io/v1, which
// kube-apiserver holds to stricter rules than v1 for compatibility's sake:
// those of ValidateEvent, and eventTime and a type of Normal or Warning, a
// series of at least two with its last time, and none of the deprecated
// fields the v1 API alone may set. Paths name the v1 fields, as
// kube-apiserver's do (it checks the internal form, which has v1's names).
func ValidateEventV1(v *eventsv1.Event) field.ErrorList {
	e := EventToCore(v)
	errs := ValidateEvent(e)
	errs = append(errs, validateEventSeries(e)...)
	if e.EventTime.IsZero() {
		errs = append(errs, field.Required(field.NewPath("eventTime"), ""))
	}
	if e.Type != corev1.EventTypeNormal && e.Type != corev1.EventTypeWarning {
		errs = append(errs, field.Invalid(field.NewPath("type"), "", "has invalid value: "+e.Type))
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"firstTimestamp", !e.FirstTimestamp.IsZero()},
		{"lastTimestamp", !e.LastTimestamp.IsZero()},
		{"count", e.Count != 0},
		{"source", e.Source.Component != "" || e.Source.Host != ""},
	} {
		if f.set {
			errs = append(errs, field.Invalid(field.NewPath(f.name), "", "needs to be unset"))
		}
	}
	return errs
}

// ValidateEventV1Update checks an update through events.k8s.io/v1: the
// rules of ValidateEvent, a changed series as on create, and everything
// but the series and the metadata kept as it was.
func ValidateEventV1Update(v, oldV *eventsv1.Event) field.ErrorList {
	e, old := EventToCore(v), EventToCore(oldV)
	errs := ValidateEvent(e)
	if !apiequality.Semantic.DeepEqual(e.Series, old.Series) {
		errs = append(errs, validateEventSeries(e)...)
	}
	for _, f := range []struct {
		name     string
		new, old any
	}{
		{"involvedObject", e.InvolvedObject, old.InvolvedObject},
		{"reason", e.Reason, old.Reason},
		{"message", e.Message, old.Message},
		{"source", e.Source, old.Source},
		{"firstTimestamp", e.FirstTimestamp, old.FirstTimestamp},
		{"lastTimestamp", e.LastTimestamp, old.LastTimestamp},
		{"count", e.Count, old.Count},
		{"reason", e.Reason, old.Reason},
		{"type", e.Type, old.Type},
		{"eventTime", e.EventTime, old.EventTime},
		{"action", e.Action, old.Action},
		{"related", e.Related, old.Related},
		{"reportingController", e.ReportingController, old.ReportingController},
		{"reportingInstance", e.ReportingInstance, old.ReportingInstance},
	} {
		errs = append(errs, apivalidation.ValidateImmutableField(f.new, f.old, field.NewPath(f.name))...)
	}
	return errs
}

func validateEventSeries(e *corev1.Event) field.ErrorList {
	var errs field.ErrorList
	if e.Series == nil {
		return nil
	}
	if e.Series.Count < 2 {
		errs = append(errs, field.Invalid(field.NewPath("series.count"), "", "should be at least 2"))
	}
	if e.Series.LastObservedTime.IsZero() {
		errs = append(errs, field.Required(field.NewPath("series.lastObservedTime"), ""))
	}
	return errs
}

// EventToCore converts an events.k8s.io/v1 Event to v1.
func EventToCore(e *eventsv1.Event) *corev1.Event {
	out := &corev1.Event{
		ObjectMeta:          *e.ObjectMeta.DeepCopy(),
		InvolvedObject:      e.Regarding,
		Reason:              e.Reason,
		Message:             e.Note,
		Source:              e.DeprecatedSource,
		FirstTimestamp:      e.DeprecatedFirstTimestamp,
		LastTimestamp:       e.DeprecatedLastTimestamp,
		Count:               e.DeprecatedCount,
		Type:                e.Type,
		EventTime:           e.EventTime,
		Action:              e.Action,
		ReportingController: e.ReportingController,
		ReportingInstance:   e.ReportingInstance,
	}
	if e.Series != nil {
		out.Series = &corev1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
	}
	if e.Related != nil {
		r := *e.Related
		out.Related = &r
	}
	return out
}

// EventFromCore converts a v1 Event to events.k8s.io/v1.
func EventFromCore(e *corev1.Event) *eventsv1.Event {
	out := &eventsv1.Event{
		ObjectMeta:               *e.ObjectMeta.DeepCopy(),
		EventTime:                e.EventTime,
		ReportingController:      e.ReportingController,
		ReportingInstance:        e.ReportingInstance,
		Action:                   e.Action,
		Reason:                   e.Reason,
		Regarding:                e.InvolvedObject,
		Note:                     e.Message,
		Type:                     e.Type,
		DeprecatedSource:         e.Source,
		DeprecatedFirstTimestamp: e.FirstTimestamp,
		DeprecatedLastTimestamp:  e.LastTimestamp,
		DeprecatedCount:          e.Count,
	}
	if e.Series != nil {
		out.Series = &eventsv1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
	}
	if e.Related != nil {
		r := *e.Related
		out.Related = &r
	}
	return out
}
