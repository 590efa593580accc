// Package e2e tests leasehold end to end, as a user runs it: the tests build
// the leasehold binary, start `leasehold serve` on a free loopback port with
// its own data directory, and drive it with the real kubectl and with
// client-go through the admin.kubeconfig the server writes.
//
// kubectl is the one named by $LEASEHOLD_KUBECTL, or else the one on the
// PATH. Without one the kubectl tests skip, unless CI=true, where they fail.
// $LEASEHOLD_BINARY names a prebuilt leasehold binary to test instead of
// building one.
//
// Every server is a child process. Tests wait for it with deadlines (never
// fixed sleeps) and stop it when they end; the restart tests kill it with
// SIGKILL or SIGTERM on purpose and start it again on the same data
// directory and port.
//
// Four tests run at once unless -parallel says otherwise (see parallel):
// most of them wait on child processes and timers, not on the CPU.
package e2e
