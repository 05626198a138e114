package perf

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

var (
	// ErrPermission is wrapped by errors caused by perf_event_open being
	// denied; the error text names the cause and the fix.
	ErrPermission = errors.New("perf_event_open denied")
	// ErrNotSupported is wrapped when the kernel lacks a requested feature.
	ErrNotSupported = errors.New("perf event not supported by this kernel")
	// ErrNoProcess is wrapped when a target process does not exist (any more).
	ErrNoProcess = errors.New("no such process")
	// ErrProcNamespace is wrapped by CheckProc when /proc belongs to
	// another pid namespace than this process's.
	ErrProcNamespace = errors.New("/proc is of another pid namespace")
)

// Linux capability numbers (<linux/capability.h>).
const (
	capSysAdmin = 21
	capPerfmon  = 38
)

// explainOpenError turns an errno from perf_event_open into an error that
// says what to do about it.
func explainOpenError(what string, err error, freq uint64) error {
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%s: %w (%v): %s", what, ErrPermission, err, permissionHint())
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("%s: %w", what, ErrNoProcess)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENODEV):
		return fmt.Errorf("%s: %w: %v", what, ErrNotSupported, err)
	case errors.Is(err, unix.EINVAL):
		if max, ok := readSysctl("kernel/perf_event_max_sample_rate"); ok && freq > uint64(max) {
			return fmt.Errorf("%s: %v: frequency %d Hz is above kernel.perf_event_max_sample_rate (%d); lower the frequency or raise the sysctl", what, err, freq, max)
		}
		return fmt.Errorf("%s: %w", what, err)
	case errors.Is(err, unix.EMFILE):
		return fmt.Errorf("%s: %w: out of file descriptors; process scope needs one per thread and CPU, raise the open-files limit (ulimit -n) or use scope: system", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// permissionHint says why perf_event_open was refused on this machine and
// how to allow it.
func permissionHint() string {
	var b strings.Builder
	if p, ok := readSysctl("kernel/perf_event_paranoid"); ok {
		fmt.Fprintf(&b, "kernel.perf_event_paranoid is %d", p)
		switch {
		case p >= 3:
			b.WriteString(" (perf events are disabled for processes without CAP_PERFMON)")
		case p == 2:
			b.WriteString(" (only user-space profiling of one's own processes is allowed without CAP_PERFMON)")
		case p == 1:
			b.WriteString(" (system-wide profiling needs CAP_PERFMON)")
		}
	} else {
		b.WriteString("kernel.perf_event_paranoid could not be read")
	}
	if eff, ok := effectiveCaps(); ok {
		have := func(c uint) bool { return eff&(1<<c) != 0 }
		fmt.Fprintf(&b, "; this process has CAP_PERFMON=%t, CAP_SYS_ADMIN=%t", have(capPerfmon), have(capSysAdmin))
	}
	b.WriteString("; fix: run the collector as root, or grant it CAP_PERFMON and CAP_SYS_PTRACE " +
		"(setcap cap_perfmon,cap_sys_ptrace+ep otelcol-perfprof; in Kubernetes securityContext.capabilities.add: [PERFMON, SYS_PTRACE]), " +
		"or lower the sysctl (sysctl -w kernel.perf_event_paranoid=1)")
	return b.String()
}

func readSysctl(name string) (int, bool) {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return 0, false
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return v, err == nil
}

func effectiveCaps() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			c, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return c, err == nil
		}
	}
	return 0, false
}
