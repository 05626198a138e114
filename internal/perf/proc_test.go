package perf_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

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

// TestScannerFollowsExec runs a shell that execs a program of a name no
// other process has, after the Scanner saw it as a shell: the scan after
// the exec must find it although it reads only what changed, and a scan
// with nothing new must read next to nothing.
func TestScannerFollowsExec(t *testing.T) {
	w, err := perf.OpenExecWatcher()
	testchild.RequirePerf(t, err)
	s := perf.NewScanner(w)
	defer s.Close()

	sleep := testchild.LookTool(t, "sleep")
	name := fmt.Sprintf("scanexec%d", os.Getpid()%100000)
	bin := filepath.Join(t.TempDir(), name)
	if b, err := os.ReadFile(sleep); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copy sleep: %v", err)
	}
	match := func(p perf.Process) bool { return p.Matches([]string{name}) }

	// The first scan reads every process.
	if got, err := s.Scan(match); err != nil || len(got) != 0 {
		t.Fatalf("first scan: %v, %v", got, err)
	}
	all := s.Stats().Reads
	sh := exec.Command("sh", "-c", "read x; exec "+bin+" 30")
	in, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sh.Process.Kill(); sh.Wait() }()
	testchild.WaitExec(t, sh.Process.Pid, "sh")

	// The shell is new: read, and it does not match.
	before := s.Stats().Reads
	if got, err := s.Scan(match); err != nil || len(got) != 0 {
		t.Fatalf("scan before the exec: %v, %v", got, err)
	}
	if n := s.Stats().Reads - before; n > all/2 {
		t.Errorf("scan before the exec read %d processes of %d: want only the new ones", n, all)
	}
	// Idle: nothing new, nothing changed.
	before = s.Stats().Reads
	s.Scan(match)
	idle := s.Stats().Reads - before

	in.Write([]byte("go\n"))
	var found []perf.Process
	deadline := time.Now().Add(5 * time.Second)
	for len(found) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		found, err = s.Scan(match)
		if err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	t.Logf("%d processes; an idle scan read %d; %d scans, %d full, %d reads", all, idle, st.Scans, st.Full, st.Reads)
	if len(found) != 1 || found[0].Pid != sh.Process.Pid {
		t.Fatalf("after the exec: found %v, want pid %d", found, sh.Process.Pid)
	}
	if st.Full > 1 {
		t.Errorf("%d full scans: the exec was found by a full scan, not by the watcher", st.Full)
	}
	if idle > 3 {
		t.Errorf("an idle scan read %d processes", idle)
	}
}

// TestScannerWithoutWatcher: every scan reads every process.
func TestScannerWithoutWatcher(t *testing.T) {
	s := perf.NewScanner(nil)
	for range 3 {
		if _, err := s.Scan(func(perf.Process) bool { return false }); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Full != 3 || st.Reads < 3*10 {
		t.Errorf("without a watcher: %+v, want 3 full scans of every process", st)
	}
}

// TestRingCPUs: a Session's rings are one per online CPU, at least the CPUs
// the collector may run on. Under `taskset -c 0` on a host with more CPUs,
// runtime.NumCPU is 1 and RingCPUs is not.
func TestRingCPUs(t *testing.T) {
	n, err := perf.RingCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if n < runtime.NumCPU() {
		t.Fatalf("RingCPUs %d, runtime.NumCPU %d", n, runtime.NumCPU())
	}
	t.Logf("RingCPUs %d, runtime.NumCPU %d", n, runtime.NumCPU())
}

// TestMatchesForgedComm: a process can set its comm to anything
// (prctl(PR_SET_NAME), a write to /proc/self/comm). A bare name selects
// it then; an executable path does not, however the comm reads.
func TestMatchesForgedComm(t *testing.T) {
	sleep := testchild.LookTool(t, "sleep")
	bin := filepath.Join(t.TempDir(), fmt.Sprintf("svc%d", os.Getpid()%100000))
	if b, err := os.ReadFile(sleep); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copy sleep: %v", err)
	}
	// A shell that names itself after the service (its base name, and
	// its path cut to the comm's 15 bytes), then waits.
	forged := filepath.Base(bin)
	if len(bin) <= 15 {
		forged = bin
	}
	sh := exec.Command("sh", "-c", "printf %s \"$1\" > /proc/$$/comm; read x", "sh", forged)
	in, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); sh.Wait() }()
	real := exec.Command(bin, "30")
	if err := real.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { real.Process.Kill(); real.Wait() }()

	var forger perf.Process
	deadline := time.Now().Add(5 * time.Second)
	for forger.Comm != forged && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		forger, _ = perf.ReadProcess(sh.Process.Pid)
	}
	if forger.Comm != forged {
		t.Fatalf("the shell's comm is %q, want %q", forger.Comm, forged)
	}
	service, err := perf.ReadProcess(real.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !forger.Matches([]string{filepath.Base(bin)}) {
		t.Error("a bare name did not select the process that took it as its comm (the documented weakness)")
	}
	if forger.Matches([]string{bin}) {
		t.Errorf("the path %s selected a shell whose comm is %q", bin, forger.Comm)
	}
	if !service.Matches([]string{bin}) {
		t.Errorf("the path %s did not select the process running it (exe %q)", bin, service.Exe)
	}
	// Forging a path as comm: a 15-byte comm that is a path prefix.
	p := perf.Process{Exe: "/bin/sh", Comm: "/opt/app/server"}
	if p.Matches([]string{"/opt/app/server"}) {
		t.Error("a path matched a comm")
	}
}
