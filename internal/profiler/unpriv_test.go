package profiler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	sysunix "golang.org/x/sys/unix" // unix is engine_test.go's clock helper

	"github.com/perfprof/perfprof/internal/bpf"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/testchild"
)

// The parent re-runs this test binary as the user nobody; these
// variables tell the child which run it is and where its workload is.
const (
	unprivModeEnv   = "PERFPROF_UNPRIV_CHILD"
	unprivBurnerEnv = "PERFPROF_UNPRIV_BURNER"
	unprivMarker    = "perfprof-unpriv-child-ok"
	nobodyID        = 65534
)

// unprivRun is one less privileged run: its name (the subtest, and the
// child's mode) and the capabilities the child gets, as ambient ones.
type unprivRun struct {
	name string
	caps []uintptr
}

var unprivRuns = []unprivRun{
	{name: "cap_perfmon_only", caps: []uintptr{sysunix.CAP_PERFMON}},
	// CAP_BPF alone loads programs of some types, not of the tracing
	// ones the profiler needs: the first refusal must still name
	// CAP_PERFMON.
	{name: "cap_bpf_only", caps: []uintptr{sysunix.CAP_BPF}},
	{name: "no_capabilities"},
}

// TestEBPFWithoutPrivilege: a collector without the privilege to load BPF
// programs (no CAP_BPF, no CAP_SYS_ADMIN, not root) still profiles. Open
// succeeds with ebpf auto, warns once that samples are joined by thread
// and time and names the missing capability, and the samples of a thread
// are linked to the spans that ran on it, by thread and time, as with
// ebpf off. Each subtest is a real run of the profiler in a process of
// the user nobody: this test binary, run again with the credentials the
// subtest names, checks from inside (see unprivChild) and prints a marker
// at the end of a run that passed, so that a child that skipped fails here.
func TestEBPFWithoutPrivilege(t *testing.T) {
	if mode := os.Getenv(unprivModeEnv); mode != "" {
		unprivChild(t, mode)
		return
	}
	testchild.NeedRoot(t, "running the profiler as another user")
	// Perf events at all: a machine (or container) without them skips,
	// as every test that samples does.
	s, err := perf.Open(perf.Options{Frequency: 99})
	testchild.RequirePerf(t, err)
	s.Close()

	// The test binary and the workload are in 0700 build directories:
	// nobody runs copies, from a directory it can read.
	dir, err := os.MkdirTemp("", "perfprof-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("find the test binary: %v", err)
	}
	bin := filepath.Join(dir, "profiler.test")
	burner := filepath.Join(dir, "burner")
	home := filepath.Join(dir, "home")
	for _, err := range []error{
		os.Chmod(dir, 0o755),
		copyExecutable(self, bin),
		copyExecutable(testchild.Build(t, "burner"), burner),
		os.Mkdir(home, 0o777),
		os.Chmod(home, 0o777), // past the umask
	} {
		if err != nil {
			t.Fatalf("prepare the unprivileged run in %s: %v", dir, err)
		}
	}

	for _, run := range unprivRuns {
		t.Run(run.name, func(t *testing.T) {
			if len(run.caps) == 0 {
				// A user may profile its own processes' user space up
				// to paranoid 2; at 3 (some distributions) it may not.
				if p, err := readInt("/proc/sys/kernel/perf_event_paranoid"); err == nil && p > 2 {
					testchild.RequirePerf(t, fmt.Errorf("kernel.perf_event_paranoid is %d: a user without CAP_PERFMON may not profile: %w", p, perf.ErrPermission))
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "-test.run=^TestEBPFWithoutPrivilege$", "-test.v", "-test.count=1")
			cmd.Dir = home
			cmd.Env = append(os.Environ(),
				unprivModeEnv+"="+run.name, unprivBurnerEnv+"="+burner,
				"HOME="+home, "TMPDIR="+home)
			cmd.SysProcAttr = &syscall.SysProcAttr{
				Credential:  &syscall.Credential{Uid: nobodyID, Gid: nobodyID},
				AmbientCaps: run.caps,
				Pdeathsig:   syscall.SIGKILL,
			}
			out, err := cmd.CombinedOutput()
			t.Logf("child (uid %d, ambient capabilities %v) output:\n%s", nobodyID, run.caps, out)
			if err != nil {
				t.Fatalf("child run %s: %v", run.name, err)
			}
			if !strings.Contains(string(out), unprivMarker+" "+run.name) {
				t.Fatalf("child run %s exited 0 without its marker line %q: it did not run the check", run.name, unprivMarker)
			}
		})
	}
}

// unprivChild is the check, in the less privileged process.
func unprivChild(t *testing.T, mode string) {
	var wantCaps uint64
	switch mode {
	case "cap_perfmon_only":
		wantCaps = 1 << sysunix.CAP_PERFMON
	case "cap_bpf_only":
		wantCaps = 1 << sysunix.CAP_BPF
	case "no_capabilities":
	default:
		t.Fatalf("unknown %s %q", unprivModeEnv, mode)
	}
	// The privileges are what the run is named for, or it proves nothing.
	if uid, euid, gid := os.Getuid(), os.Geteuid(), os.Getgid(); uid != nobodyID || euid != nobodyID || gid != nobodyID {
		t.Fatalf("running as uid %d euid %d gid %d, want %d", uid, euid, gid, nobodyID)
	}
	caps, err := effectiveCaps()
	if err != nil {
		t.Fatal(err)
	}
	if caps != wantCaps {
		t.Fatalf("effective capabilities %#x, want %#x", caps, wantCaps)
	}
	t.Logf("uid %d, CapEff %#x", os.Getuid(), caps)

	// Thread A burns all the time, thread B almost never runs: A's
	// samples say whether the join goes by thread and time.
	child := testchild.Start(t, os.Getenv(unprivBurnerEnv), "-alpha", "1", "-beta", "0")
	pid, tidA, tidB := child.Ready[0], uint32(child.Ready[1]), uint32(child.Ready[2])

	core, logs := observer.New(zapcore.DebugLevel)
	start := time.Now()
	p, err := profiler.Open(profiler.Options{
		Pids: []int{pid}, Perf: perf.Options{Frequency: 499}, Symbolize: true,
		EBPF: profiler.EBPFAuto, Window: 200 * time.Millisecond,
		Logger: zap.New(core),
	})
	if err != nil {
		t.Fatalf("open the profiler without BPF privilege: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_, _ = p.Close()
		}
	})

	// Two spans follow each other on thread A, split at mid, and one of
	// another trace covers the run on thread B.
	mid := start.Add(750 * time.Millisecond)
	unixNs := func(t time.Time) uint64 { return uint64(t.UnixNano()) }
	spanA1 := profiler.Span{Tid: tidA, TraceID: [16]byte{1}, SpanID: [8]byte{0xa1}, Start: unixNs(start.Add(-time.Second)), End: unixNs(mid), Name: "a1", WorkerID: -1, Resource: -1}
	spanA2 := profiler.Span{Tid: tidA, TraceID: [16]byte{1}, SpanID: [8]byte{0xa2}, Start: unixNs(mid), End: unixNs(start.Add(time.Minute)), Name: "a2", WorkerID: -1, Resource: -1}
	spanB := profiler.Span{Tid: tidB, TraceID: [16]byte{2}, SpanID: [8]byte{0xb}, Start: unixNs(start.Add(-time.Second)), End: unixNs(start.Add(time.Minute)), Name: "b", WorkerID: -1, Resource: -1}
	if c := p.AddSpans([]profiler.Span{spanA1, spanA2, spanB}); c.Indexed != 3 {
		t.Fatalf("AddSpans: %+v, want 3 indexed", c)
	}

	// Reports as the receiver takes them, then the last one at Close.
	var samples []profiler.Sample
	for i := 0; i < 5; i++ {
		time.Sleep(300 * time.Millisecond)
		for _, sn := range p.Take(false) {
			if sn.Pid == pid {
				samples = append(samples, sn.Samples...)
			}
		}
	}
	running := p.Stats()
	snaps, err := p.Close()
	closed = true
	if err != nil {
		t.Errorf("close the profiler: %v", err)
	}
	for _, sn := range snaps {
		if sn.Pid == pid {
			samples = append(samples, sn.Samples...)
		}
	}
	st := p.Stats()

	// Started without eBPF, saying why.
	reason := running.EBPF.Reason
	if running.EBPF.Active || reason == nil {
		t.Fatalf("eBPF active %v, reason %v: want inactive with a reason", running.EBPF.Active, reason)
	}
	// It names what this process lacks, and no red herring: the memory
	// lock limit plays no part since Linux 5.11.
	lacks := "lacks CAP_BPF"
	if mode == "cap_bpf_only" {
		lacks = "lacks CAP_PERFMON"
	}
	if !errors.Is(reason, bpf.ErrPermission) || !strings.Contains(reason.Error(), lacks) || strings.Contains(reason.Error(), "MEMLOCK") {
		t.Errorf("reason %q: want bpf.ErrPermission, saying this process %s", reason, lacks)
	}
	var ebpfWarns []observer.LoggedEntry
	for _, e := range logs.All() {
		if e.Level >= zapcore.WarnLevel {
			t.Logf("logged %s: %s %v", e.Level, e.Message, e.ContextMap())
		}
		if e.Level == zapcore.WarnLevel && mentionsBPF(e) {
			ebpfWarns = append(ebpfWarns, e)
		}
	}
	if len(ebpfWarns) != 1 {
		t.Errorf("%d warnings about eBPF over the run, want 1", len(ebpfWarns))
	} else if e := ebpfWarns[0]; !strings.Contains(e.Message, "joining samples to spans by thread and time") ||
		fmt.Sprint(e.ContextMap()["error"]) != reason.Error() {
		t.Errorf("the eBPF warning %q %v does not say samples are joined by thread and time, and why (%v)", e.Message, e.ContextMap(), reason)
	}

	// Thread A's samples are linked by thread and time, each to the span
	// that ran on A at its time, none to B's span.
	var onA, right, toB, early, late int
	for _, smp := range samples {
		if smp.Tid != tidA || smp.OffCPU() {
			continue
		}
		onA++
		want := spanA2.SpanID
		if smp.Time < unixNs(mid) {
			want = spanA1.SpanID
			early++
		} else {
			late++
		}
		l := smp.Link
		switch {
		case l.Linked && l.SpanID == spanB.SpanID:
			toB++
		case l.Linked && l.SpanID == want && l.TraceID == spanA1.TraceID && l.Source == profiler.SourceThread:
			right++
		}
	}
	share := 0.0
	if onA > 0 {
		share = float64(right) / float64(onA)
	}
	t.Logf("thread A: %d samples (%d before the split, %d after), %d linked to their span by thread (%.1f%%), %d to thread B's span; joins %+v",
		onA, early, late, right, 100*share, toB, st.Joins)
	// 1.5 s of a thread burning at 499 Hz is ~750 samples; a busy
	// machine may give it half a CPU.
	if early < 50 || late < 50 {
		t.Errorf("thread A: %d samples before the span split, %d after; want 50 each", early, late)
	}
	if share < 0.9 {
		t.Errorf("thread A: %.1f%% of samples linked to their span by thread, want 90%%", 100*share)
	}
	if toB != 0 {
		t.Errorf("thread A: %d samples linked to thread B's span", toB)
	}
	if r := st.Joins.Read; r[profiler.SourceGoLabels] != 0 || r[profiler.SourceThreadContext] != 0 {
		t.Errorf("joins read at the sample without eBPF: %v", r)
	}
	if st.Joins.Span < int64(right) {
		t.Errorf("joins: %d samples linked, fewer than thread A's %d", st.Joins.Span, right)
	}

	if !t.Failed() {
		fmt.Printf("%s %s samples=%d linked=%.3f\n", unprivMarker, mode, onA, share)
	}
}

// mentionsBPF says whether a log entry is about eBPF: its message or one
// of its fields names BPF.
func mentionsBPF(e observer.LoggedEntry) bool {
	if strings.Contains(e.Message, "BPF") {
		return true
	}
	for _, v := range e.ContextMap() {
		if strings.Contains(fmt.Sprint(v), "BPF") {
			return true
		}
	}
	return false
}

// effectiveCaps reads this process's effective capability set.
func effectiveCaps() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			c, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %q of /proc/self/status: %w", line, err)
			}
			return c, nil
		}
	}
	return 0, errors.New("no CapEff line in /proc/self/status")
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// copyExecutable copies the executable src to dst, executable by all.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, 0o755) // past the umask
}
