package audit

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// appendJSON appends ev as encoding/json writes it with HTML escaping off,
// byte for byte (FuzzEventJSON checks it). Every request writes an event;
// written by hand, the common one costs a fraction of what reflection
// does. The parts requests rarely carry (objects, status details, user
// extras, strings with control or non-ASCII bytes) still go through
// encoding/json, so their escaping is encoding/json's own.
func (ev *Event) appendJSON(b []byte) ([]byte, error) {
	var err error
	b = append(b, '{')
	comma := false
	field := func(name string) {
		b = appendKey(b, comma, name)
		comma = true
	}
	if ev.Kind != "" {
		field("kind")
		b = appendString(b, ev.Kind)
	}
	if ev.APIVersion != "" {
		field("apiVersion")
		b = appendString(b, ev.APIVersion)
	}
	field("level")
	b = appendString(b, string(ev.Level))
	field("auditID")
	b = appendString(b, string(ev.AuditID))
	field("stage")
	b = appendString(b, string(ev.Stage))
	field("requestURI")
	b = appendString(b, ev.RequestURI)
	field("verb")
	b = appendString(b, ev.Verb)
	field("user")
	if b, err = appendUser(b, &ev.User); err != nil {
		return nil, err
	}
	if ev.ImpersonatedUser != nil {
		field("impersonatedUser")
		if b, err = appendUser(b, ev.ImpersonatedUser); err != nil {
			return nil, err
		}
	}
	if len(ev.SourceIPs) > 0 {
		field("sourceIPs")
		b = appendStrings(b, ev.SourceIPs)
	}
	if ev.UserAgent != "" {
		field("userAgent")
		b = appendString(b, ev.UserAgent)
	}
	if r := ev.ObjectRef; r != nil {
		field("objectRef")
		b = appendObjectRef(b, r)
	}
	if ev.ResponseStatus != nil {
		field("responseStatus")
		if b, err = appendStatus(b, ev.ResponseStatus); err != nil {
			return nil, err
		}
	}
	if ev.RequestObject != nil {
		field("requestObject")
		if b, err = appendMarshalled(b, ev.RequestObject); err != nil {
			return nil, err
		}
	}
	if ev.ResponseObject != nil {
		field("responseObject")
		if b, err = appendMarshalled(b, ev.ResponseObject); err != nil {
			return nil, err
		}
	}
	field("requestReceivedTimestamp")
	b = appendMicroTime(b, ev.RequestReceivedTimestamp)
	field("stageTimestamp")
	b = appendMicroTime(b, ev.StageTimestamp)
	if len(ev.Annotations) > 0 {
		field("annotations")
		b = append(b, '{')
		// encoding/json's order; an event has two or three.
		var small [4]string
		keys := small[:0]
		for k := range ev.Annotations {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, ev.Annotations[k])
		}
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

func appendUser(b []byte, u *authenticationv1.UserInfo) ([]byte, error) {
	b = append(b, '{')
	comma := false
	field := func(name string) {
		b = appendKey(b, comma, name)
		comma = true
	}
	if u.Username != "" {
		field("username")
		b = appendString(b, u.Username)
	}
	if u.UID != "" {
		field("uid")
		b = appendString(b, u.UID)
	}
	if len(u.Groups) > 0 {
		field("groups")
		b = appendStrings(b, u.Groups)
	}
	if len(u.Extra) > 0 {
		field("extra")
		var err error
		if b, err = appendMarshalled(b, u.Extra); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

func appendObjectRef(b []byte, r *ObjectReference) []byte {
	b = append(b, '{')
	comma := false
	for _, f := range [...]struct{ name, value string }{
		{"resource", r.Resource}, {"namespace", r.Namespace}, {"name", r.Name}, {"uid", string(r.UID)},
		{"apiGroup", r.APIGroup}, {"apiVersion", r.APIVersion}, {"resourceVersion", r.ResourceVersion},
		{"subresource", r.Subresource},
	} {
		if f.value == "" {
			continue
		}
		b = appendKey(b, comma, f.name)
		comma = true
		b = appendString(b, f.value)
	}
	return append(b, '}')
}

// appendStatus writes the status of a response as the API server records
// it (a code, and for failures a status, message and reason); any other
// status goes through encoding/json.
func appendStatus(b []byte, s *metav1.Status) ([]byte, error) {
	if s.TypeMeta != (metav1.TypeMeta{}) || s.ListMeta.SelfLink != "" || s.ListMeta.ResourceVersion != "" ||
		s.ListMeta.Continue != "" || s.ListMeta.RemainingItemCount != nil || s.Details != nil {
		return appendMarshalled(b, s)
	}
	b = append(b, `{"metadata":{}`...)
	if s.Status != "" {
		b = append(b, `,"status":`...)
		b = appendString(b, s.Status)
	}
	if s.Message != "" {
		b = append(b, `,"message":`...)
		b = appendString(b, s.Message)
	}
	if s.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendString(b, string(s.Reason))
	}
	if s.Code != 0 {
		b = append(b, `,"code":`...)
		b = strconv.AppendInt(b, int64(s.Code), 10)
	}
	return append(b, '}'), nil
}

// appendMicroTime writes t as metav1.MicroTime's MarshalJSON does.
func appendMicroTime(b []byte, t metav1.MicroTime) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, metav1.RFC3339Micro)
	return append(b, '"')
}

// appendKey writes an object's key, after a comma unless it is the first.
func appendKey(b []byte, comma bool, name string) []byte {
	if comma {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendString writes s as a JSON string. Printable ASCII needs escaping
// only for quotes and backslashes; a string with any other byte is left to
// encoding/json (control characters, invalid UTF-8, U+2028 and U+2029).
func appendString(b []byte, s string) []byte {
	mark := len(b)
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e:
			b, _ = appendMarshalled(b[:mark], s) // a string always encodes
			return b
		case c == '"' || c == '\\':
			b = append(b, s[start:i]...)
			b = append(b, '\\', c)
			start = i + 1
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendMarshalled writes v through encoding/json with HTML escaping off,
// as the Logger's encoder did for the whole event.
func appendMarshalled(b []byte, v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...), nil
}
