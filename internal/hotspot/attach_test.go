package hotspot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/testchild"
)

const (
	alphaName = `perfprof-burner-alpha "quoted" thread`
	betaName  = "perfprof-burner-beta-with-a-long-name"
)

// perfMapLine is HotSpot's perf map format: start and size in hex, then
// the symbol, for a compiled method "return-type class.method(arg-types)".
var perfMapLine = regexp.MustCompile(`^0x[0-9a-f]{16} 0x[0-9a-f]{16} \S.*$`)

func TestPerfMap(t *testing.T) {
	forEachJDK(t, func(t *testing.T, j jdk) {
		vm := startJVM(t, j, jvmOpts{})
		ctx := testContext(t)

		start := time.Now()
		if _, err := Exec(ctx, vm.pid, "jcmd", "VM.version"); err != nil {
			t.Fatal(err)
		}
		first := time.Since(start)
		start = time.Now()
		version, err := Exec(ctx, vm.pid, "jcmd", "VM.version")
		if err != nil {
			t.Fatal(err)
		}
		later := time.Since(start)
		t.Logf("%s", strings.TrimSpace(version))
		t.Logf("first Exec (SIGQUIT, listener start): %v; later Exec: %v", first, later)

		path, err := PerfMapPath(vm.pid)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("/proc/%d/root/tmp/perf-%d.map", vm.pid, vm.pid); path != want {
			t.Errorf("PerfMapPath = %s, want %s", path, want)
		}

		// The burners are compiled within a second or so of the start.
		var took time.Duration
		var content string
		for {
			start = time.Now()
			if err := PerfMap(ctx, vm.pid); err != nil {
				t.Fatal(err)
			}
			took = time.Since(start)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			content = string(b)
			if strings.Contains(content, "Burn.burnAlpha(long)") && strings.Contains(content, "Burn.burnBeta(long)") {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("burn methods not in the perf map:\n%s", content)
			}
			time.Sleep(200 * time.Millisecond)
		}
		lines := strings.Split(strings.TrimSuffix(content, "\n"), "\n")
		var burn []string
		for _, l := range lines {
			if !perfMapLine.MatchString(l) {
				t.Errorf("perf map line %q does not match %s", l, perfMapLine)
			}
			if strings.Contains(l, "Burn.burn") {
				burn = append(burn, l)
			}
		}
		t.Logf("Compiler.perfmap took %v; %s: %d bytes, %d lines; burn lines:\n%s",
			took, path, len(content), len(lines), strings.Join(burn, "\n"))

		// A second call rewrites the same inode: open, truncate, write.
		// Garbage appended before it is gone after it.
		before, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		garbage := strings.Repeat("0x0 0x0 garbage\n", 10000)
		f.WriteString(garbage)
		f.Close()
		held, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		if err := PerfMap(ctx, vm.pid); err != nil {
			t.Fatal(err)
		}
		after, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "garbage") {
			t.Errorf("second perf map kept the appended garbage: not truncated")
		}
		if !os.SameFile(before, after) {
			t.Errorf("second perf map is a new file, not a rewrite of the old one")
		}
		heldInfo, _ := held.Stat()
		t.Logf("second call: same inode %v (held descriptor sees %d bytes); size %d -> %d (%d with garbage appended)",
			os.SameFile(before, after), heldInfo.Size(), before.Size(), after.Size(), before.Size()+int64(len(garbage)))
		noTriggers(t, vm.pid, vm.nspid)
	})
}

func TestThreadNames(t *testing.T) {
	forEachJDK(t, func(t *testing.T, j jdk) {
		vm := startJVM(t, j, jvmOpts{})
		checkThreadNames(t, vm)
	})
}

// checkThreadNames checks that ThreadNames gives vm's burners and VM
// Thread with their full names, under the tids whose comm is the start of
// those names.
func checkThreadNames(t *testing.T, vm *jvm) map[int]string {
	t.Helper()
	ctx := testContext(t)
	start := time.Now()
	names, err := ThreadNames(ctx, vm.pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ThreadNames: %d threads in %v", len(names), time.Since(start))
	found := map[string]int{}
	for tid, name := range names {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", vm.pid, tid))
		if err != nil {
			t.Errorf("tid %d (%q) is not a thread of %d: %v", tid, name, vm.pid, err)
			continue
		}
		comm := strings.TrimSuffix(string(b), "\n")
		found[name] = tid
		t.Logf("tid %d comm %q name %q", tid, comm, name)
		// HotSpot names its threads' comm after the first 15 bytes.
		if name != "main" && name != "DestroyJavaVM" && comm != name[:min(len(name), 15)] {
			t.Errorf("tid %d: comm %q is not the start of %q", tid, comm, name)
		}
	}
	for _, want := range []string{alphaName, betaName, "VM Thread", "Attach Listener"} {
		if _, ok := found[want]; !ok {
			t.Errorf("no thread named %q", want)
		}
	}
	return names
}

func TestNonRootJVM(t *testing.T) {
	needRoot(t)
	forEachJDK(t, func(t *testing.T, j jdk) {
		vm := startJVM(t, j, jvmOpts{nobody: true})
		ctx := testContext(t)
		if _, err := Exec(ctx, vm.pid, "jcmd", "VM.version"); err != nil {
			t.Fatal(err)
		}
		if uid := socketOwner(t, vm.pid, vm.nspid); uid != 65534 {
			t.Errorf("socket owned by %d, want 65534", uid)
		}
		noTriggers(t, vm.pid, vm.nspid)
		checkThreadNames(t, vm)
		if err := PerfMap(ctx, vm.pid); err != nil {
			t.Fatal(err)
		}
	})
}

// TestContainer attaches to a JVM that is pid 1 of its own pid namespace
// and has a /tmp of its own, as in a container.
func TestContainer(t *testing.T) {
	needRoot(t)
	forEachJDK(t, func(t *testing.T, j jdk) {
		vm := startJVM(t, j, jvmOpts{container: true})
		if vm.nspid != 1 || vm.pid == 1 {
			t.Fatalf("pid %d, nspid %d", vm.pid, vm.nspid)
		}
		ctx := testContext(t)
		if err := PerfMap(ctx, vm.pid); err != nil {
			t.Fatal(err)
		}
		path, _ := PerfMapPath(vm.pid)
		if want := fmt.Sprintf("/proc/%d/root/tmp/perf-1.map", vm.pid); path != want {
			t.Errorf("PerfMapPath = %s, want %s", path, want)
		}
		if _, err := os.Stat(path); err != nil {
			t.Error(err)
		}
		for _, p := range []string{"/tmp/perf-1.map", "/tmp/.java_pid1"} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("%s exists outside the container", p)
			}
		}
		names := checkThreadNames(t, vm)
		for tid := range names {
			if tid < vm.pid {
				t.Errorf("tid %d is a namespace tid, not ours", tid)
			}
		}
		noTriggers(t, vm.pid, vm.nspid)
	})
}

// TestUserNamespace attaches to a JVM that is root of a user namespace in
// which our root is nobody: it accepts neither our trigger file nor our
// connection unless they carry its user.
func TestUserNamespace(t *testing.T) {
	needRoot(t)
	forEachJDK(t, func(t *testing.T, j jdk) {
		vm := startJVM(t, j, jvmOpts{userns: true, flags: []string{"-XX:-UsePerfData", "-Xlog:attach=trace"}})
		if sameUserNS(vm.pid) {
			t.Fatal("jvm is in our user namespace")
		}
		ctx := testContext(t)
		out, err := Exec(ctx, vm.pid, "jcmd", "VM.version")
		if err != nil {
			t.Fatalf("%v\njvm output:\n%s", err, vm.output())
		}
		if !strings.Contains(out, "JDK") {
			t.Errorf("VM.version: %q", out)
		}
		if uid := socketOwner(t, vm.pid, vm.nspid); uid != 65534 {
			t.Errorf("socket owned by %d, want 65534", uid)
		}
		noTriggers(t, vm.pid, vm.nspid)
		if os.Geteuid() != 0 || os.Getegid() != 0 {
			t.Errorf("our credentials changed to %d:%d", os.Geteuid(), os.Getegid())
		}
	})
}

func TestRefuseNonJVM(t *testing.T) {
	ctx := testContext(t)
	t.Run("sleep", func(t *testing.T) {
		pid := startProcess(t, "sleep", "60")
		_, err := Exec(ctx, pid, "jcmd", "VM.version")
		if !errors.Is(err, ErrNoAttach) {
			t.Fatalf("Exec on sleep: %v, want ErrNoAttach", err)
		}
		t.Log(err)
		time.Sleep(100 * time.Millisecond)
		if !alive(pid) {
			t.Fatal("sleep died")
		}
		noTriggers(t, pid, pid)
	})
	t.Run("shell-catching-SIGQUIT", func(t *testing.T) {
		testchild.LookTool(t, "bash")
		pid := startProcess(t, "bash", "-c", `trap "echo quit" QUIT; while :; do sleep 0.1; done`)
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, err := readStatus(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				t.Fatal(err)
			}
			if st.catchesQuit {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("bash did not install its SIGQUIT trap")
			}
			time.Sleep(10 * time.Millisecond)
		}
		_, err := Exec(ctx, pid, "jcmd", "VM.version")
		if !errors.Is(err, ErrNoAttach) || !strings.Contains(err.Error(), "libjvm.so") {
			t.Fatalf("Exec on bash: %v, want ErrNoAttach for not mapping libjvm.so", err)
		}
		t.Log(err)
		noTriggers(t, pid, pid)
	})
}

// TestReduceSignalUsage: a JVM started with -Xrs does not catch SIGQUIT
// and starts its attach listener at once. Exec uses its socket; once the
// socket is gone, Exec refuses to signal.
func TestReduceSignalUsage(t *testing.T) {
	forEachJDK(t, func(t *testing.T, j jdk) {
		vm := startJVM(t, j, jvmOpts{flags: []string{"-Xrs"}})
		ctx := testContext(t)
		st, err := readStatus(fmt.Sprintf("/proc/%d/status", vm.pid))
		if err != nil {
			t.Fatal(err)
		}
		if st.catchesQuit {
			t.Fatal("a jvm with -Xrs catches SIGQUIT")
		}
		socket := fmt.Sprintf("/tmp/.java_pid%d", vm.pid)
		if _, err := os.Stat(socket); err != nil {
			t.Fatalf("-Xrs: no attach socket at startup: %v", err)
		}
		if _, err := Exec(ctx, vm.pid, "jcmd", "VM.version"); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(socket); err != nil {
			t.Fatal(err)
		}
		_, err = Exec(ctx, vm.pid, "jcmd", "VM.version")
		if !errors.Is(err, ErrNoAttach) {
			t.Fatalf("Exec without socket: %v, want ErrNoAttach", err)
		}
		t.Log(err)
		time.Sleep(200 * time.Millisecond)
		if !alive(vm.pid) {
			t.Fatal("the jvm died")
		}
		noTriggers(t, vm.pid, vm.nspid)
	})
}

func TestNoProcess(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	ctx := testContext(t)
	_, err := Exec(ctx, pid, "jcmd", "VM.version")
	t.Log(err)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), fmt.Sprintf("attach to jvm %d", pid)) {
		t.Errorf("Exec: %v, want os.ErrNotExist", err)
	}
	if err := PerfMap(ctx, pid); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("PerfMap: %v, want os.ErrNotExist", err)
	}
	if _, err := ThreadNames(ctx, pid); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ThreadNames: %v, want os.ErrNotExist", err)
	}
	if _, err := IsJVM(pid); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("IsJVM: %v, want os.ErrNotExist", err)
	}
}

// TestDisabledAttach: a JVM with -XX:+DisableAttachMechanism takes the
// SIGQUIT for a thread dump request and never opens a socket. Exec ends
// with the context.
func TestDisabledAttach(t *testing.T) {
	forEachJDK(t, func(t *testing.T, j jdk) {
		vm := startJVM(t, j, jvmOpts{flags: []string{"-XX:+DisableAttachMechanism"}})

		const timeout = 1500 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		_, err := Exec(ctx, vm.pid, "jcmd", "VM.version")
		took := time.Since(start)
		t.Logf("after %v: %v", took, err)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "DisableAttachMechanism") {
			t.Errorf("Exec: %v, want a deadline error naming DisableAttachMechanism", err)
		}
		if took > timeout+300*time.Millisecond {
			t.Errorf("Exec took %v with a %v deadline", took, timeout)
		}

		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		start = time.Now()
		_, err = Exec(ctx, vm.pid, "jcmd", "VM.version")
		took = time.Since(start)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Exec: %v, want context.Canceled", err)
		}
		if took > 500*time.Millisecond {
			t.Errorf("Exec took %v to notice a cancellation after 200ms", took)
		}

		time.Sleep(200 * time.Millisecond)
		if !alive(vm.pid) {
			t.Fatal("the jvm died")
		}
		noTriggers(t, vm.pid, vm.nspid)
		t.Logf("thread dumps printed by the jvm on its stdout: %d", strings.Count(vm.output(), "Full thread dump"))
	})
}

// startProcess starts a process that is killed when the test ends.
func startProcess(t *testing.T, name string, args ...string) int {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd.Process.Pid
}
