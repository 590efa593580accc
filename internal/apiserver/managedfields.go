package apiserver

import (
	"errors"
	"io"
	"strings"

	jsoniter "github.com/json-iterator/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// heartbeatManagedFields is the fast path of managed fields for the update
// that dominates leasehold's traffic: a renewal, in which a client changes
// only fields it alone already owns through an earlier Update. For such an
// update the full computation (structured-merge-diff over the whole object,
// most of the cost of a renewal) can only refresh that manager's timestamp,
// so this does exactly that. It returns false, changing nothing, whenever
// the update is anything else; the caller then runs the field manager.
// changed tells that the update changes a field (so the object to store
// differs from cur).
//
// Conditions, each of which sends the update down the full path:
//   - the resource can list the fields an update changes (ChangedFields);
//   - the request is for the main resource or its status;
//   - the client sent back the managed fields it read, or none;
//   - every changed field is owned by this manager's Update entry for this
//     API version and subresource, and by no other entry;
//   - no field went from set to unset (the resource's hook checks that).
func (s *Server) heartbeatManagedFields(req *request, obj, cur runtime.Object, manager string) (heartbeat, changed bool) {
	if req.res.ChangedFields == nil || req.info.subresource != "" && req.info.subresource != "status" {
		return false, false
	}
	nm, cm := objectMeta(obj), objectMeta(cur)
	if len(nm.ManagedFields) == 0 {
		nm.ManagedFields = cm.ManagedFields
	}
	paths, ok := req.res.ChangedFields(obj, cur)
	if !ok {
		return false, false
	}
	if len(paths) == 0 {
		return true, false
	}
	apiVersion := req.res.GroupVersion.String()
	mine := -1
	for i, e := range nm.ManagedFields {
		if e.FieldsV1 == nil {
			continue
		}
		self := e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationUpdate &&
			e.Subresource == req.info.subresource && e.APIVersion == apiVersion
		for _, p := range paths {
			owned, err := fieldsHas(e.FieldsV1.Raw, p)
			if err != nil || self && !owned || !self && owned {
				return false, false
			}
		}
		if self {
			mine = i
		}
	}
	if mine < 0 {
		return false, false
	}
	entries := make([]metav1.ManagedFieldsEntry, len(nm.ManagedFields))
	copy(entries, nm.ManagedFields)
	now := metav1.NewTime(s.clock.Now().UTC())
	entries[mine].Time = &now
	nm.ManagedFields = entries
	return true, true
}

// fieldsHas reports whether raw, a FieldsV1 document (a set of field paths
// as structured-merge-diff writes it), has path as a member. path's
// elements are spelled as the set writes them: ["f:spec", "f:renewTime"],
// or ["f:status", "f:conditions", `k:{"type":"Ready"}`, "f:lastHeartbeatTime"].
// It reads only the objects on the way to path and skips the rest, without
// building the set: at fleet scale every Lease's document is unique (it
// names its owner's UID), so parsing it whole was a tenth of what a renewal
// allocated, and a cache of parsed sets never hit.
//
// It reads with the JSON iterator and the membership rules of
// fieldpath.Set.FromJSON, so on every document FromJSON accepts it gives
// the parsed set's answer (FuzzFieldsHas checks it). It does not parse the
// path elements it skips, so it may answer where FromJSON would fail on a
// malformed one; raw is what the store holds, written by the field manager.
func fieldsHas(raw []byte, path []string) (bool, error) {
	iter := jsoniter.ConfigCompatibleWithStandardLibrary.BorrowIterator(raw)
	defer jsoniter.ConfigCompatibleWithStandardLibrary.ReturnIterator(iter)
	found, _ := fieldsMember(iter, path)
	if iter.Error != nil {
		return false, iter.Error
	}
	if iter.WhatIsNext(); iter.Error != io.EOF {
		return false, errors.New("unexpected data after a FieldsV1 document")
	}
	return found, nil
}

// fieldsMember reads the object at iter, the value of some path element E,
// and reports whether path, relative to E, is a member of the set; with an
// empty path, whether E itself is. It also reports whether the object has
// children, keys naming path elements. As in FromJSON, E is a member when
// its object holds "." or no children, and when a key appears twice the
// later object's children replace the earlier's while membership of either
// counts.
func fieldsMember(iter *jsoniter.Iterator, path []string) (found, children bool) {
	dot := false
	iter.ReadMapCB(func(iter *jsoniter.Iterator, key string) bool {
		// A field, a value, a key or an index; FromJSON drops other kinds.
		isElement := len(key) >= 2 && key[1] == ':' && strings.IndexByte("fvki", key[0]) >= 0
		switch {
		case key == ".":
			dot = true
			iter.Skip()
		case len(path) > 0 && isElement && key == path[0]:
			f, c := fieldsMember(iter, path[1:])
			if len(path) == 1 {
				found = found || f
			} else if c {
				found = f
			}
		default:
			iter.Skip()
		}
		children = children || isElement
		return true
	})
	if len(path) == 0 {
		found = dot || !children
	}
	return found, children
}
