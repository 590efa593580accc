// Package servertest holds the tests of package election that run against
// a real leasehold server (embedded etcd, HTTPS, watch cache), kept apart
// so that the election package's unit tests build without the server.
package servertest
