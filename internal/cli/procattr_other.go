//go:build !linux

package cli

import "syscall"

// childProcAttr puts a command in its own process group. Outside Linux
// there is no parent-death signal: run leasehold elect under a supervisor
// that kills the group when it dies.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
