// Package safety holds process-level tests of leader election: contenders
// built from ./contender, each in its own OS process, compete for one Lease
// on a `leasehold serve` the test starts, while the test SIGKILLs, pauses
// (SIGSTOP/SIGCONT) and restarts them and kill -9s and restarts the server.
//
// TestSafety checks every recorded term of leadership against every other:
// terms do not overlap, and their fencing tokens strictly increase, except
// where a leader was frozen by SIGSTOP before its successor began (see the
// test for the exact rule). TestFailoverBenchmark, run only with
// LEASEHOLD_FAILOVER_BENCH=1, measures takeover times.
//
// Time across processes is CLOCK_MONOTONIC, read by every process with
// clock_gettime: one clock for the whole machine that NTP cannot step and
// that keeps counting while a process is stopped.
//
// Environment:
//
//	LEASEHOLD_BINARY            use this leasehold binary instead of building one
//	LEASEHOLD_SAFETY_DURATION   how long TestSafety injects faults (default 60s)
//	LEASEHOLD_SAFETY_SEED       the random seed (default: the time)
//	LEASEHOLD_FAILOVER_BENCH    1 runs TestFailoverBenchmark
//	LEASEHOLD_FAILOVER_TRIALS   trials per case (default 20)
//	LEASEHOLD_FAILOVER_DURATIONS  LeaseDuration,RenewDeadline,RetryPeriod (default 15s,10s,2s)
package safety
