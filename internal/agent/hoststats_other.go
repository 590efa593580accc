//go:build !linux

package agent

import "errors"

// readHostStats measures nothing outside Linux: no signal is known, so no
// pressure condition goes True.
func readHostStats() (HostStats, error) {
	return HostStats{}, errors.New("measuring the host is supported on Linux only")
}
