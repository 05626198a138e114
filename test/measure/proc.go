package measure

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// TaskCPU returns the CPU time of every live thread of pid, summed, from
// /proc/PID/task/TID/schedstat (nanoseconds; /proc/PID/stat has 10 ms
// ticks). Threads that exited are not counted: for a process's whole CPU
// time over seconds, use StatCPU.
func TaskCPU(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("read CPU time of pid %d: %w", pid, err)
	}
	var sum time.Duration
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read CPU time of pid %d: %s/schedstat: %w", pid, e.Name(), err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// userHZ is the unit of the times in /proc/PID/stat (USER_HZ, fixed at 100
// in the kernel's ABI on every architecture Go runs Linux on).
const userHZ = 100

// StatCPU returns the user and system CPU time of pid, utime + stime of
// /proc/PID/stat: every thread's, those that exited included, in 10 ms
// ticks.
func StatCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time of pid %d: %w", pid, err)
	}
	// The command name, field 2, is in parentheses and may hold spaces
	// and parentheses: the fields after it start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("read CPU time of pid %d: no ')' in /proc/%d/stat", pid, pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("read CPU time of pid %d: /proc/%d/stat has %d fields after the name", pid, pid, len(f))
	}
	var ticks uint64
	for _, v := range f[11:13] {
		t, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read CPU time of pid %d: /proc/%d/stat: %w", pid, pid, err)
		}
		ticks += t
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// Memory is a process's memory from /proc/PID/status, in KiB.
type Memory struct {
	RSS      uint64 // VmRSS: resident now
	HWM      uint64 // VmHWM: the peak of VmRSS since the process started
	RSSAnon  uint64 // RssAnon: resident anonymous memory (heaps, stacks)
	RSSFile  uint64 // RssFile: resident file mappings (the binary, libraries)
	RSSShmem uint64 // RssShmem: resident shared memory
	// VmPin: pages pinned in memory outside RSS, such as the perf rings
	// a process maps (the kernel charges them to pinned_vm).
	Pinned uint64
}

// ReadMemory reads the Memory of pid.
func ReadMemory(pid int) (Memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	var m Memory
	fields := map[string]*uint64{"VmRSS": &m.RSS, "VmHWM": &m.HWM, "RssAnon": &m.RSSAnon, "RssFile": &m.RSSFile, "RssShmem": &m.RSSShmem, "VmPin": &m.Pinned}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		dst := fields[k]
		if !ok || dst == nil {
			continue
		}
		if *dst, err = strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64); err != nil {
			return Memory{}, fmt.Errorf("read memory of pid %d: %s: %w", pid, k, err)
		}
		delete(fields, k)
	}
	if len(fields) > 0 {
		return Memory{}, fmt.Errorf("read memory of pid %d: /proc/%d/status lacks %d of VmRSS, VmHWM, RssAnon, RssFile, RssShmem, VmPin", pid, pid, len(fields))
	}
	return m, nil
}

// PeakRSS returns VmHWM of pid in KiB.
func PeakRSS(pid int) (uint64, error) {
	m, err := ReadMemory(pid)
	return m.HWM, err
}
