package apiserver

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Objects are served in JSON as well as protobuf, and JSON writes a time
// as RFC 3339, whose year has four digits. Protobuf carries any second
// of an int64; a time before the year 0000 or after 9999 written that way
// would be served in JSON that no client, kubectl's included, can read
// back. A JSON or YAML body cannot carry one (its decoding fails), so
// unrepresentableTime checks what protobuf bodies decode to.
var (
	minJSONTime = time.Date(0, time.January, 1, 0, 0, 0, 0, time.UTC)
	maxJSONTime = time.Date(10000, time.January, 1, 0, 0, 0, 0, time.UTC)

	timeType      = reflect.TypeFor[metav1.Time]()
	microTimeType = reflect.TypeFor[metav1.MicroTime]()
)

// unrepresentableTime returns the path of the first metav1.Time or
// metav1.MicroTime in obj (a pointer to a struct) that RFC 3339 cannot
// write, and that time; "" when there is none. It is on the path of every
// protobuf write, renewals included: the walk visits only the fields whose
// types can hold a time, and builds a path only for the time it finds.
func unrepresentableTime(obj any) (string, time.Time) {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return "", time.Time{}
	}
	tm, steps, found := findTime(v.Elem())
	if !found {
		return "", time.Time{}
	}
	var path *field.Path
	for i := len(steps) - 1; i >= 0; i-- {
		switch s := steps[i]; {
		case s.name != "":
			path = path.Child(s.name)
		case s.key != "":
			path = path.Key(s.key)
		default:
			path = path.Index(s.index)
		}
	}
	return path.String(), tm
}

// step is one element of a path, innermost first: a field's name, a map's
// key or a slice's index.
type step struct {
	name, key string
	index     int
}

func findTime(v reflect.Value) (time.Time, []step, bool) {
	t := v.Type()
	if t == timeType || t == microTimeType {
		var tm time.Time
		if v.CanAddr() { // a pointer in an interface costs no allocation
			switch p := v.Addr().Interface().(type) {
			case *metav1.Time:
				tm = p.Time
			case *metav1.MicroTime:
				tm = p.Time
			}
		} else {
			tm = v.Field(0).Interface().(time.Time)
		}
		return tm, nil, !tm.IsZero() && (tm.Before(minJSONTime) || !tm.Before(maxJSONTime))
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() && holdsTime(t.Elem()) {
			return findTime(v.Elem())
		}
	case reflect.Slice, reflect.Array:
		if holdsTime(t.Elem()) {
			for i := range v.Len() {
				if tm, steps, found := findTime(v.Index(i)); found {
					return tm, append(steps, step{index: i}), true
				}
			}
		}
	case reflect.Map:
		if holdsTime(t.Elem()) {
			for it := v.MapRange(); it.Next(); {
				if tm, steps, found := findTime(it.Value()); found {
					return tm, append(steps, step{key: fmt.Sprint(it.Key().Interface())}), true
				}
			}
		}
	case reflect.Struct:
		for _, f := range timeFields(t) {
			if tm, steps, found := findTime(v.Field(f.index)); found {
				if f.name != "" {
					steps = append(steps, step{name: f.name})
				}
				return tm, steps, true
			}
		}
	}
	return time.Time{}, nil, false
}

// timeField is a field of a struct whose type can hold a time: its index
// and its name in JSON ("" inlined).
type timeField struct {
	index int
	name  string
}

// structFields caches timeFields by type.
var structFields sync.Map // reflect.Type → []timeField

// timeFields returns the fields of struct type t that can hold a time.
func timeFields(t reflect.Type) []timeField {
	if fs, ok := structFields.Load(t); ok {
		return fs.([]timeField)
	}
	var fs []timeField
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() && holdsTime(f.Type) {
			fs = append(fs, timeField{index: i, name: jsonName(f)})
		}
	}
	structFields.Store(t, fs)
	return fs
}

// jsonName is the name field f has in JSON; "" for an inlined one (or
// one JSON leaves out).
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	switch {
	case name == "-":
		return ""
	case name == "" && !f.Anonymous:
		return f.Name
	}
	return name
}

// holdsTimes caches holdsTime by type.
var holdsTimes sync.Map // reflect.Type → bool

// holdsTime reports whether a value of type t can contain a metav1.Time
// or metav1.MicroTime, so that the walk skips the strings, numbers and
// string maps that make up most of an object.
func holdsTime(t reflect.Type) bool {
	if b, ok := holdsTimes.Load(t); ok {
		return b.(bool)
	}
	b := typeHoldsTime(t, map[reflect.Type]bool{})
	holdsTimes.Store(t, b)
	return b
}

func typeHoldsTime(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == timeType || t == microTimeType {
		return true
	}
	if seen[t] {
		return false // a recursive type: its other fields decide
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return typeHoldsTime(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && typeHoldsTime(f.Type, seen) {
				return true
			}
		}
	}
	return false
}
