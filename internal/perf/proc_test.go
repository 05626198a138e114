package perf_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/testchild"
)

// checkProcEnv tells the test binary, run again in a pid namespace, to
// print what CheckProc says there.
const checkProcEnv = "PERFPROF_PERF_CHECKPROC"

// TestCheckProc: /proc names processes as this process's pid namespace
// does on the host and in a new pid namespace with its own /proc; in a
// new pid namespace that kept the host's /proc, CheckProc says so and how
// to fix it.
func TestCheckProc(t *testing.T) {
	if os.Getenv(checkProcEnv) != "" {
		fmt.Printf("checkproc: %v\n", perf.CheckProc())
		return
	}
	if err := perf.CheckProc(); err != nil {
		t.Fatalf("on the host: %v", err)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		testchild.RequireKernel(t, "pid namespaces", fmt.Errorf("%w: no unshare(1)", perf.ErrNotSupported), perf.ErrNotSupported)
	}
	for _, tc := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"own /proc", []string{"--pid", "--fork", "--mount-proc"}, "checkproc: <nil>"},
		{"host's /proc", []string{"--pid", "--fork"}, "checkproc: /proc is of another pid namespace: it shows this collector as pid"},
	} {
		cmd := exec.Command(unshare, append(tc.flags, os.Args[0], "-test.run", "^TestCheckProc$", "-test.v")...)
		cmd.Env = append(os.Environ(), checkProcEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) && strings.Contains(string(out), "unshare failed") {
				testchild.RequireKernel(t, "pid namespaces", fmt.Errorf("%w: %s", perf.ErrNotSupported, out), perf.ErrNotSupported)
			}
			t.Fatalf("%s: %v\n%s", tc.name, err, out)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: want %q in\n%s", tc.name, tc.want, out)
		}
		if strings.Contains(string(out), "pid 1 in its own") {
			t.Logf("%s: %s", tc.name, out[strings.Index(string(out), "checkproc"):])
		}
	}
}
