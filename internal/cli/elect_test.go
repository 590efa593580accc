package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
)

// TestElectStopGrace: a command whose term was given up gets --grace after
// SIGTERM; one whose term was lost must be gone before a successor may
// start, so it gets less.
func TestElectStopGrace(t *testing.T) {
	f := electFlags{leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, grace: 10 * time.Second}
	for _, tc := range []struct {
		cause error
		want  time.Duration
	}{
		{context.Canceled, 10 * time.Second},
		{election.ErrHandedOver, 10 * time.Second},
		{election.ErrRenewDeadlinePassed, 4 * time.Second}, // 15 s - 10 s, less a second
		{election.ErrLeaseHeldByAnother, 0},
	} {
		if got := f.stopGrace(tc.cause); got != tc.want {
			t.Errorf("after %v: %v, want %v", tc.cause, got, tc.want)
		}
	}
	short := f
	short.grace = 2 * time.Second
	if got := short.stopGrace(election.ErrRenewDeadlinePassed); got != 2*time.Second {
		t.Errorf("--grace 2s after the renew deadline: %v, want 2s (never more than --grace)", got)
	}
	tight := f
	tight.renewDeadline = 14500 * time.Millisecond
	if got := tight.stopGrace(election.ErrRenewDeadlinePassed); got != 0 {
		t.Errorf("renew deadline 14.5s of 15s: %v, want 0", got)
	}
}

// TestElectFlagErrors: flags that cannot work are refused before anything
// reaches a server.
func TestElectFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lease", "x", "--lease-duration", "0", "--", "true"}, "--lease-duration must be positive"},
		{[]string{"--lease", "x", "--retry-period", "0", "--", "true"}, "--retry-period must be positive"},
		{[]string{"--lease", "x", "--grace", "-1s", "--", "true"}, "--grace must not be negative"},
		{[]string{"--lease", "x", "--observe", "--", "true"}, "--observe runs no command"},
		{[]string{"--lease", "x", "--observe", "--retry"}, "--observe runs no command"},
	} {
		err := runElect(context.Background(), tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("leasehold elect %s: %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
