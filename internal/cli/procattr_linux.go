package cli

import "syscall"

// childProcAttr puts a command in its own process group and has the kernel
// kill it if leasehold itself dies, so that a leader's work never outlives
// the process that holds its lease.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
