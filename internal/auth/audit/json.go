package audit

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strconv"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// appendJSON appends ev as encoding/json writes it, HTML escaped (<, > and &
// as \u003c, \u003e and \u0026) as kube-apiserver's audit log is, whose JSON
// serializer is an encoding/json Encoder: byte for byte (FuzzEventJSON checks it). Every request writes an event;
// written by hand, the common one costs a fraction of what reflection
// does. The parts requests rarely carry (objects, status details, user
// extras, strings with control or non-ASCII bytes) still go through
// encoding/json, so their escaping is encoding/json's own.
func (ev *Event) appendJSON(b []byte) ([]byte, error) {
	o := object{b: append(b, '{')}
	o.str("kind", ev.Kind, true)
	o.str("apiVersion", ev.APIVersion, true)
	o.str("level", string(ev.Level), false)
	o.str("auditID", string(ev.AuditID), false)
	o.str("stage", string(ev.Stage), false)
	o.str("requestURI", ev.RequestURI, false)
	o.str("verb", ev.Verb, false)
	o.key("user")
	o.user(&ev.User)
	if ev.ImpersonatedUser != nil {
		o.key("impersonatedUser")
		o.user(ev.ImpersonatedUser)
	}
	o.strs("sourceIPs", ev.SourceIPs)
	o.str("userAgent", ev.UserAgent, true)
	if r := ev.ObjectRef; r != nil {
		o.key("objectRef")
		o.objectRef(r)
	}
	if ev.ResponseStatus != nil {
		o.key("responseStatus")
		o.status(ev.ResponseStatus)
	}
	if ev.RequestObject != nil {
		o.key("requestObject")
		o.marshal(ev.RequestObject)
	}
	if ev.ResponseObject != nil {
		o.key("responseObject")
		o.marshal(ev.ResponseObject)
	}
	o.key("requestReceivedTimestamp")
	o.b = appendMicroTime(o.b, ev.RequestReceivedTimestamp)
	o.key("stageTimestamp")
	o.b = appendMicroTime(o.b, ev.StageTimestamp)
	if len(ev.Annotations) > 0 {
		o.key("annotations")
		// encoding/json's order; an event has two or three.
		var small [4]string
		keys := small[:0]
		for k := range ev.Annotations {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		a := object{b: append(o.b, '{')}
		for _, k := range keys {
			a.sep()
			a.b = appendString(a.b, k)
			a.b = append(a.b, ':')
			a.b = appendString(a.b, ev.Annotations[k])
		}
		o.b = append(a.b, '}')
	}
	if o.err != nil {
		return nil, o.err
	}
	return append(o.b, '}'), nil
}

// object writes the fields of one JSON object after its opening brace: a
// comma before each but the first, and the first error of encoding/json.
type object struct {
	b     []byte
	comma bool
	err   error
}

// sep writes the comma before every field but the first.
func (o *object) sep() {
	if o.comma {
		o.b = append(o.b, ',')
	}
	o.comma = true
}

// key writes a field's name, one of the Event's own (which need no
// escaping).
func (o *object) key(name string) {
	o.sep()
	o.b = append(o.b, '"')
	o.b = append(o.b, name...)
	o.b = append(o.b, '"', ':')
}

// str writes a string field, none when empty and omitEmpty.
func (o *object) str(name, value string, omitEmpty bool) {
	if value == "" && omitEmpty {
		return
	}
	o.key(name)
	o.b = appendString(o.b, value)
}

// strs writes a list of strings, none when empty (omitempty).
func (o *object) strs(name string, values []string) {
	if len(values) == 0 {
		return
	}
	o.key(name)
	o.b = append(o.b, '[')
	for i, s := range values {
		if i > 0 {
			o.b = append(o.b, ',')
		}
		o.b = appendString(o.b, s)
	}
	o.b = append(o.b, ']')
}

// marshal writes v through encoding/json.
func (o *object) marshal(v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		if o.err == nil {
			o.err = err
		}
		return
	}
	o.b = append(o.b, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...)
}

func (o *object) user(u *authenticationv1.UserInfo) {
	f := object{b: append(o.b, '{')}
	f.str("username", u.Username, true)
	f.str("uid", u.UID, true)
	f.strs("groups", u.Groups)
	if len(u.Extra) > 0 {
		f.key("extra")
		f.marshal(u.Extra)
	}
	o.b, o.err = append(f.b, '}'), cmp.Or(o.err, f.err)
}

func (o *object) objectRef(r *ObjectReference) {
	f := object{b: append(o.b, '{')}
	f.str("resource", r.Resource, true)
	f.str("namespace", r.Namespace, true)
	f.str("name", r.Name, true)
	f.str("uid", string(r.UID), true)
	f.str("apiGroup", r.APIGroup, true)
	f.str("apiVersion", r.APIVersion, true)
	f.str("resourceVersion", r.ResourceVersion, true)
	f.str("subresource", r.Subresource, true)
	o.b = append(f.b, '}')
}

// status writes the status of a response as the API server records it (a
// code, and for failures a status, message and reason); any other status
// goes through encoding/json.
func (o *object) status(s *metav1.Status) {
	if s.TypeMeta != (metav1.TypeMeta{}) || s.ListMeta.SelfLink != "" || s.ListMeta.ResourceVersion != "" ||
		s.ListMeta.Continue != "" || s.ListMeta.RemainingItemCount != nil || s.Details != nil {
		o.marshal(s)
		return
	}
	f := object{b: append(o.b, `{"metadata":{}`...), comma: true}
	f.str("status", s.Status, true)
	f.str("message", s.Message, true)
	f.str("reason", string(s.Reason), true)
	if s.Code != 0 {
		f.key("code")
		f.b = strconv.AppendInt(f.b, int64(s.Code), 10)
	}
	o.b = append(f.b, '}')
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

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string. Printable ASCII needs escaping
// only for quotes, backslashes and the HTML characters; a string with any
// other byte is left to encoding/json (control characters, invalid UTF-8,
// U+2028 and U+2029).
func appendString(b []byte, s string) []byte {
	mark := len(b)
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e:
			o := object{b: b[:mark]}
			o.marshal(s) // a string always encodes
			return o.b
		case c == '"' || c == '\\':
			b = append(b, s[start:i]...)
			b = append(b, '\\', c)
			start = i + 1
		case c == '<' || c == '>' || c == '&':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			start = i + 1
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
