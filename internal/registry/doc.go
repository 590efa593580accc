// Package registry describes the resources leasehold serves: for each one its
// names, its Go types, and the strategy the API server applies to it —
// defaulting, validation with Kubernetes' field errors, the columns of its
// Table form, and the fields it can be selected by.
//
// A Resource is plain data plus hooks; the API server and the store are
// generic over it, so adding a kind means adding one file here.
package registry
