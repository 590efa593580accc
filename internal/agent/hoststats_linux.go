package agent

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// readHostStats measures the host: memory from /proc/meminfo (MemAvailable,
// as the kernel estimates what can be had without swapping), the root file
// system's space and inodes, and process IDs left from
// /proc/sys/kernel/pid_max less the threads that hold one, and the CPUs the
// agent may run on.
func readHostStats() (HostStats, error) {
	var h HostStats
	var errs []string
	if total, avail, err := meminfo("/proc/meminfo"); err == nil {
		h.MemoryCapacity, h.MemoryAvailable = total, avail
	} else {
		errs = append(errs, err.Error())
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err == nil {
		bs := int64(st.Bsize)
		h.FsCapacity, h.FsAvailable = int64(st.Blocks)*bs, int64(st.Bavail)*bs
		h.Inodes, h.InodesFree = int64(st.Files), int64(st.Ffree)
	} else {
		errs = append(errs, fmt.Sprintf("statfs /: %v", err))
	}
	h.CPUs = int64(runtime.NumCPU())
	if max, threads, err := pids(); err == nil {
		h.PIDs, h.PIDsAvailable = max, max-threads
	} else {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return h, fmt.Errorf("measuring the host: %s", strings.Join(errs, "; "))
	}
	return h, nil
}

// meminfo reads MemTotal and MemAvailable, in bytes, from a meminfo file.
func meminfo(path string) (total, available int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	return parseMeminfo(bufio.NewScanner(f))
}

func parseMeminfo(sc *bufio.Scanner) (total, available int64, err error) {
	found := 0
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "MemTotal" && key != "MemAvailable") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("meminfo: %s: %q is not a number of kB", key, rest)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("meminfo: %s: %w", key, err)
		}
		if key == "MemTotal" {
			total = kb << 10
		} else {
			available = kb << 10
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("meminfo: no MemTotal or MemAvailable")
	}
	return total, available, nil
}

// pids returns the largest process ID the kernel hands out and the number
// of threads (each of which holds one), the fourth field of /proc/loadavg.
func pids() (max, threads int64, err error) {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return 0, 0, err
	}
	if max, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("pid_max: %w", err)
	}
	if b, err = os.ReadFile("/proc/loadavg"); err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0, 0, fmt.Errorf("loadavg: %q", b)
	}
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return 0, 0, fmt.Errorf("loadavg: %q", b)
	}
	if threads, err = strconv.ParseInt(total, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("loadavg: %w", err)
	}
	return max, threads, nil
}
