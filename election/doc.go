// Package election elects one leader among contenders on a
// coordination.k8s.io/v1 Lease.
package election
