package hotspot

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/perfprof/perfprof/internal/testchild"
)

// The tests run real JVMs: each JDK found below gets a subtest. Without
// one they skip, unless PERFPROF_REQUIRE_RUNTIMES=1.

type jdk struct {
	name string // subtest name
	home string
}

var jdkVersions = []string{"17", "25"}

// forEachJDK runs f in a subtest per JDK.
func forEachJDK(t *testing.T, f func(t *testing.T, j jdk)) {
	for _, v := range jdkVersions {
		t.Run("jdk"+v, func(t *testing.T) {
			home := testchild.FindJDK(v)
			if home == "" {
				testchild.NeedJDK(t, v)
			}
			f(t, jdk{name: "jdk" + v, home: home})
		})
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	testchild.NeedRoot(t, "this test")
}

// Burn.class is compiled once per JDK, in a directory every user can read.
var (
	classMu   sync.Mutex
	classDirs = map[string]string{}
)

func burnClasses(t *testing.T, j jdk) string {
	t.Helper()
	classMu.Lock()
	defer classMu.Unlock()
	if dir, ok := classDirs[j.home]; ok {
		return dir
	}
	dir, err := os.MkdirTemp("", "hotspot-burn-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := filepath.Abs("testdata/Burn.java")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(j.home, "bin", "javac"), "-d", dir, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("javac: %v\n%s", err, out)
	}
	classDirs[j.home] = dir
	return dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range classDirs {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

type jvmOpts struct {
	flags []string
	// nobody runs the JVM as uid/gid 65534.
	nobody bool
	// container runs the JVM as pid 1 of new pid and mount namespaces,
	// with a /tmp of its own.
	container bool
	// userns runs the JVM as root of a new user namespace whose root is
	// uid 65534 outside: a rootless container.
	userns bool
}

// jvm is a running Burn.
type jvm struct {
	pid   int // as we see it
	nspid int // as it sees itself
	cmd   *exec.Cmd

	mu  sync.Mutex
	out bytes.Buffer // stdout and stderr after "ready"
}

func (v *jvm) output() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.out.String()
}

// startJVM starts Burn and waits for it to print "ready". The JVM is
// killed when the test ends.
func startJVM(t *testing.T, j jdk, o jvmOpts) *jvm {
	t.Helper()
	dir := burnClasses(t, j)
	args := append([]string{"-Xmx64m"}, o.flags...)
	args = append(args, "-cp", ".", "Burn")
	java := filepath.Join(j.home, "bin", "java")
	var cmd *exec.Cmd
	if o.container {
		testchild.LookTool(t, "unshare")
		// The class is copied from the working directory, which the new
		// /tmp hides, to the new /tmp.
		script := `mount -t tmpfs -o mode=1777 tmpfs /tmp && mkdir /tmp/app && cp ./*.class /tmp/app && cd /tmp/app && exec "$@"`
		cmd = exec.Command("unshare", append([]string{"--pid", "--fork", "--kill-child", "--mount", "--propagation", "private",
			"sh", "-c", script, "sh", java}, args...)...)
	} else {
		cmd = exec.Command(java, args...)
	}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if o.nobody {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	if o.userns {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}}
		// A new user namespace leaves the process host root, nobody
		// inside; setuid(0) inside makes it the namespace's root.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true}
	}
	// The JVM lives while its stdin is open: if the test binary dies,
	// so does the JVM.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	v := &jvm{cmd: cmd, pid: cmd.Process.Pid}
	t.Cleanup(func() { v.stop(stdin) })

	ready := make(chan int, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			if n, ok := strings.CutPrefix(line, "ready "); ok {
				pid, _ := strconv.Atoi(n)
				select {
				case ready <- pid:
					continue
				default:
				}
			}
			v.mu.Lock()
			v.out.WriteString(line + "\n")
			v.mu.Unlock()
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case v.nspid = <-ready:
	case <-exited:
		t.Fatalf("%s exited: %s", java, v.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start: %s", java, v.output())
	}
	if o.container {
		// The JVM is unshare's child.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", v.pid, v.pid))
		f := strings.Fields(string(b))
		if err != nil || len(f) != 1 {
			t.Fatalf("children of unshare %d: %q %v", v.pid, b, err)
		}
		v.pid, _ = strconv.Atoi(f[0])
	} else if v.nspid != v.pid {
		t.Fatalf("jvm says its pid is %d, we started %d", v.nspid, v.pid)
	}
	return v
}

// stop ends the JVM by closing its stdin, so that it removes its attach
// socket and perf data file as it exits, or else kills it.
func (v *jvm) stop(stdin io.Closer) {
	stdin.Close()
	done := make(chan struct{})
	go func() {
		v.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		if v.pid != v.cmd.Process.Pid {
			syscall.Kill(v.pid, syscall.SIGKILL)
		}
		v.cmd.Process.Kill()
		<-done
	}
	// A container's /tmp went with it; ours holds files named after
	// the pid only if it is ours.
	if v.pid == v.nspid {
		os.Remove(fmt.Sprintf("/tmp/.java_pid%d", v.pid))
		os.Remove(fmt.Sprintf("/tmp/perf-%d.map", v.pid))
	}
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// noTriggers checks that no attach trigger file is left for pid.
func noTriggers(t *testing.T, pid, nspid int) {
	t.Helper()
	for _, dir := range []string{fmt.Sprintf("/proc/%d/cwd", pid), fmt.Sprintf("/proc/%d/root/tmp", pid)} {
		p := fmt.Sprintf("%s/.attach_pid%d", dir, nspid)
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("trigger %s left behind", p)
		}
	}
}

// socketOwner returns the uid owning the attach socket of pid.
func socketOwner(t *testing.T, pid, nspid int) int {
	t.Helper()
	var st unix.Stat_t
	p := fmt.Sprintf("/proc/%d/root/tmp/.java_pid%d", pid, nspid)
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return int(st.Uid)
}
