package registry

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	New:          func() runtime.Object { return &corev1.Event{} },
	NewList:      func() runtime.Object { return &corev1.EventList{} },
	Validate:     func(obj runtime.Object) field.ErrorList { return validateEvent(obj.(*corev1.Event)) },
	ValidateUpdate: func(obj, _ runtime.Object) field.ErrorList {
		return validateEvent(obj.(*corev1.Event))
	},
	AllowUnconditionalUpdate: true,
	OwnColumns:               true,
	Columns:                  eventColumns,
	Cells:                    func(obj runtime.Object, now time.Time) []interface{} { return eventCells(obj.(*corev1.Event), now) },
	SelectableFields: func(obj runtime.Object) map[string]string {
		e := obj.(*corev1.Event)
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
			"source":                         e.Source.Component,
			"type":                           e.Type,
		}
	},
}

// EventsV1 is events.k8s.io/v1 Event: the same objects as v1 Event,
// converted field by field.
var EventsV1 = &Resource{
	GroupVersion: eventsv1.SchemeGroupVersion,
	Name:         "events",
	SingularName: "event",
	Kind:         "Event",
	ShortNames:   []string{"ev"},
	Namespaced:   true,
	New:          func() runtime.Object { return &eventsv1.Event{} },
	NewList:      func() runtime.Object { return &eventsv1.EventList{} },
	Storage:      Events,
	ToStorage:    func(obj runtime.Object) (runtime.Object, error) { return EventToCore(obj.(*eventsv1.Event)), nil },
	FromStorage:  func(obj runtime.Object) (runtime.Object, error) { return EventFromCore(obj.(*corev1.Event)), nil },
	Validate:     func(obj runtime.Object) field.ErrorList { return validateEventV1(obj.(*eventsv1.Event)) },
	ValidateUpdate: func(obj, _ runtime.Object) field.ErrorList {
		return validateEventV1(obj.(*eventsv1.Event))
	},
	AllowUnconditionalUpdate: true,
	OwnColumns:               true,
	Columns:                  eventColumns,
	Cells: func(obj runtime.Object, now time.Time) []interface{} {
		return eventCells(EventToCore(obj.(*eventsv1.Event)), now)
	},
	SelectableFields: func(obj runtime.Object) map[string]string {
		e := obj.(*eventsv1.Event)
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

// validateEvent keeps Kubernetes' rule that an event lives in its object's
// namespace, or in "default" (or none) for cluster-scoped objects.
func validateEvent(e *corev1.Event) field.ErrorList {
	return eventNamespace(e.Namespace, e.InvolvedObject.Namespace, field.NewPath("involvedObject", "namespace"))
}

func validateEventV1(e *eventsv1.Event) field.ErrorList {
	errs := eventNamespace(e.Namespace, e.Regarding.Namespace, field.NewPath("regarding", "namespace"))
	if e.Type != "" && e.Type != corev1.EventTypeNormal && e.Type != corev1.EventTypeWarning {
		errs = append(errs, field.NotSupported(field.NewPath("type"), e.Type, []string{corev1.EventTypeNormal, corev1.EventTypeWarning}))
	}
	return errs
}

func eventNamespace(ns, objNS string, path *field.Path) field.ErrorList {
	if (objNS == "" && ns != "" && ns != metav1.NamespaceDefault) || (objNS != "" && objNS != ns) {
		return field.ErrorList{field.Invalid(path, objNS, "does not match event.namespace")}
	}
	return nil
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
