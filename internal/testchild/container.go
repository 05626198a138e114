package testchild

// Containers, made the way a container runtime makes them but with the
// tools a test machine has: unshare(1) and nsenter(1) for the pid and mount
// namespaces, and cgroups created by hand in every mounted hierarchy in the
// layout the kubelet (systemd driver) and containerd give a pod's
// containers. No image, no network or user namespace: what perfprof reads
// of a containerized process is its pids, its /proc and its cgroups, and
// these are the real thing.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoContainers is wrapped by the reason a test machine cannot make
// containers (not root, no unshare or nsenter, no writable cgroup
// hierarchy, namespaces denied): tests that need them skip, or fail with
// PERFPROF_REQUIRE_PERF=1 (see RequireKernel).
var ErrNoContainers = errors.New("containers unavailable")

// ContainerSpec is the identity a container gets.
type ContainerSpec struct {
	// ID is the container id, named in its cgroup as containerd names it:
	// 64 lowercase hex digits, random when empty.
	ID string
	// PodUID is the Kubernetes uid of the container's pod, a dashed UUID,
	// random when empty.
	PodUID string
	// QoS is the pod's Kubernetes QoS class: "besteffort" (when empty),
	// "burstable" or "guaranteed".
	QoS string
	// CgroupNS runs the workload in a cgroup namespace of its own, rooted
	// at its container's cgroup, as containerd and CRI-O run containers
	// on cgroup v2: it sees its own cgroup as "/", and those of processes
	// outside its container relative to it ("/../../…"). Exec does not
	// enter it.
	CgroupNS bool
}

// inCgroupNS returns the command line that runs name with args as spec
// says: in a cgroup namespace of its own with spec.CgroupNS, made once the
// shell that runs it has moved into the container's cgroups.
func inCgroupNS(spec ContainerSpec, name string, args []string) (string, []string) {
	if !spec.CgroupNS {
		return name, args
	}
	return "unshare", append([]string{"--cgroup", name}, args...)
}

// A Container is a process tree in a pid and mount namespace of its own,
// placed in a container's cgroup in every cgroup hierarchy, as a container
// runtime places it.
//
// Pids differ inside and out: HostPid (and Child.Pid, the same) is the
// workload's pid in the test's pid namespace, the one to give perfprof and
// to read /proc/PID with; the pids the workload prints itself ("ready 1")
// are those of its own namespace.
type Container struct {
	// Child is the workload: its stdout lines (Line, Lines, AwaitReady),
	// its stdin (Send), and Cmd, the unshare or nsenter command that
	// started it.
	*Child
	ID, PodUID, QoS string
	// HostPid is the workload's pid in the test's pid namespace.
	HostPid int
	// Cgroups are the container's cgroup directories, one per hierarchy
	// (/sys/fs/cgroup/<hierarchy>/…/cri-containerd-<ID>.scope).
	Cgroups []string

	proc *nsProc
	stop sync.Once
}

// StartContainer runs name with args as pid 1 of a new pid namespace, with
// a /proc of that namespace in a new mount namespace (unshare --pid --fork
// --mount-proc --kill-child), in the cgroup
//
//	<own>/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice/cri-containerd-<id>.scope
//
// of every mounted, writable cgroup hierarchy, where <own> is the test
// process's own cgroup in that hierarchy (so limits set on it still hold)
// and <uid_> the pod uid with underscores for dashes (a guaranteed pod's
// slice sits directly in kubepods.slice, as the kubelet does it). The
// program is in its cgroups before it runs: a shell moves itself there and
// then execs it. StartContainer returns once it runs; it does not wait for
// a ready line (see AwaitReady). At the end of the test every process in
// the container is killed and waited for, and the cgroups are removed.
func StartContainer(tb testing.TB, spec ContainerSpec, name string, args ...string) *Container {
	tb.Helper()
	return startContainer(tb, spec, []string{"unshare", "--pid", "--fork", "--mount-proc", "--kill-child"}, name, args)
}

// startContainer makes the cgroups of a container of its own pod under
// spec and runs name with args there through launcher.
func startContainer(tb testing.TB, spec ContainerSpec, launcher []string, name string, args []string) *Container {
	tb.Helper()
	hs := requireContainers(tb)
	spec = fillSpec(tb, spec)
	comps := append(podSlice(spec.QoS, spec.PodUID), containerScope(spec.ID))
	leaves := makeCgroups(tb, hs, comps)
	c := &Container{ID: spec.ID, PodUID: spec.PodUID, QoS: spec.QoS, Cgroups: leaves}
	tb.Cleanup(func() {
		c.Stop(tb)
		removeCgroups(tb, hs, comps, len(comps))
	})
	name, args = inCgroupNS(spec, name, args)
	c.proc = startInNamespaces(tb, launcher, leaves, name, args)
	c.Child, c.HostPid = c.proc.child, c.proc.child.Pid
	return c
}

// StartHostContainer runs name with args in a container that shares the
// test's pid and mount namespaces, as a Kubernetes pod with hostPID: true
// does (a per-node collector's DaemonSet): in the container cgroup
// StartContainer places its workload in, and with spec.CgroupNS in a cgroup
// namespace of its own. HostPid is its pid, as the workload sees it too.
// It is killed and its cgroups removed at the end of the test.
func StartHostContainer(tb testing.TB, spec ContainerSpec, name string, args ...string) *Container {
	tb.Helper()
	return startContainer(tb, spec, []string{"unshare", "--fork", "--kill-child"}, name, args)
}

// Stop kills every process of the container and waits until they are
// gone. The test's end does it; a test calls it to see a container end.
// Its cgroups stay until the test ends.
func (c *Container) Stop(tb testing.TB) {
	tb.Helper()
	c.stop.Do(func() {
		if c.proc != nil {
			c.proc.kill(tb)
		}
		// The namespace's other processes, and those exec'd into the
		// container (whose parents are outside it), die with the
		// cgroup.
		killCgroups(tb, c.Cgroups)
		if c.proc != nil {
			c.proc.wait(tb)
		}
		waitEmpty(tb, c.Cgroups)
	})
}

// Exec runs name with args inside the container, as kubectl exec does: in
// its pid and mount namespaces (nsenter --target HostPid --pid --mount) and
// its cgroups, before it runs. The returned Child's Pid is the process's
// pid in the test's pid namespace, its Cmd the nsenter command. The
// process is killed at the end of the test (before the container).
func (c *Container) Exec(tb testing.TB, name string, args ...string) *Child {
	tb.Helper()
	p := startInNamespaces(tb, []string{"nsenter", "--target", strconv.Itoa(c.HostPid), "--pid", "--mount", "--"}, c.Cgroups, name, args)
	tb.Cleanup(func() {
		p.kill(tb)
		p.wait(tb)
	})
	return p.child
}

// A Pod is containers that share one pid namespace, as a Kubernetes pod
// with shareProcessNamespace: true has them. Pid 1 of the namespace is the
// pod's sandbox (the pause container), in a container cgroup of its own
// under the pod's, as containerd places it.
type Pod struct {
	UID, QoS string
	// Sandbox runs pause, pid 1 of the pod's pid namespace.
	Sandbox *Container

	hs []hierarchy
}

// StartPod starts a pod's sandbox: the pause program (testchild/pause)
// under spec, whose PodUID and QoS are the pod's and whose ID is the
// sandbox's. Start its containers with Exec. At the end of the test the
// pod's processes are killed and its cgroups removed.
func StartPod(tb testing.TB, spec ContainerSpec) *Pod {
	tb.Helper()
	requireContainers(tb)
	pause := Build(tb, "pause")
	sb := StartContainer(tb, spec, pause)
	sb.AwaitReady(tb)
	if len(sb.Ready) != 1 || sb.Ready[0] != 1 {
		tb.Fatalf("pod sandbox: ready %v, want pid 1 of its namespace", sb.Ready)
	}
	hs, _ := containerHost()
	return &Pod{UID: sb.PodUID, QoS: sb.QoS, Sandbox: sb, hs: hs}
}

// Exec starts a container of the pod: name with args in the pod's pid
// namespace, in a mount namespace of its own with the pod's /proc (nsenter
// --target <sandbox> --pid, then unshare --mount --mount-proc), in the
// container cgroup
// kubepods.slice/…/kubepods-<qos>-pod<uid_>.slice/cri-containerd-<id>.scope.
// spec.PodUID and spec.QoS must be empty or the pod's. The container is
// stopped and its cgroups removed at the end of the test (before the pod).
func (p *Pod) Exec(tb testing.TB, spec ContainerSpec, name string, args ...string) *Container {
	tb.Helper()
	if (spec.PodUID != "" && spec.PodUID != p.UID) || (spec.QoS != "" && spec.QoS != p.QoS) {
		tb.Fatalf("pod container %+v: not of pod %s (%s)", spec, p.UID, p.QoS)
	}
	spec.PodUID, spec.QoS = p.UID, p.QoS
	spec = fillSpec(tb, spec)
	comps := append(podSlice(spec.QoS, spec.PodUID), containerScope(spec.ID))
	leaves := makeCgroups(tb, p.hs, comps)
	c := &Container{ID: spec.ID, PodUID: spec.PodUID, QoS: spec.QoS, Cgroups: leaves}
	tb.Cleanup(func() {
		c.Stop(tb)
		// The pod's slices are the pod's to remove.
		removeCgroups(tb, p.hs, comps, 1)
	})
	name, args = inCgroupNS(spec, name, args)
	c.proc = startInNamespaces(tb, []string{"nsenter", "--target", strconv.Itoa(p.Sandbox.HostPid), "--pid", "--", "unshare", "--mount", "--mount-proc"}, leaves, name, args)
	c.Child, c.HostPid = c.proc.child, c.proc.child.Pid
	return c
}

// RequireContainers skips the test, with the reason, when this machine
// cannot make containers (see ErrNoContainers), or fails it with
// PERFPROF_REQUIRE_PERF=1. StartContainer and StartPod call it; a test calls
// it first to skip before it builds its workload.
func RequireContainers(tb testing.TB) {
	tb.Helper()
	requireContainers(tb)
}

// requireContainers is RequireContainers, returning the cgroup hierarchies
// to place containers in.
func requireContainers(tb testing.TB) []hierarchy {
	tb.Helper()
	hs, err := containerHost()
	RequireKernel(tb, "containers (pid namespaces and cgroups)", err, ErrNoContainers)
	return hs
}

var (
	hostOnce sync.Once
	hostHier []hierarchy
	hostErr  error
)

// containerHost checks, once per test binary, that containers can be made
// here, and finds the cgroup hierarchies.
func containerHost() ([]hierarchy, error) {
	hostOnce.Do(func() { hostHier, hostErr = probeContainerHost() })
	return hostHier, hostErr
}

func probeContainerHost() ([]hierarchy, error) {
	if euid := os.Geteuid(); euid != 0 {
		return nil, fmt.Errorf("%w: not root (euid %d)", ErrNoContainers, euid)
	}
	for _, tool := range []string{"unshare", "nsenter", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoContainers, err)
		}
	}
	hs, err := cgroupHierarchies()
	if err != nil {
		return nil, err
	}
	if len(hs) == 0 {
		return nil, fmt.Errorf("%w: no writable cgroup hierarchy is mounted", ErrNoContainers)
	}
	if out, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "true").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%w: unshare --pid --fork --mount-proc: %v: %s", ErrNoContainers, err, bytes.TrimSpace(out))
	}
	return hs, nil
}

// fillSpec checks spec and fills in its defaults.
func fillSpec(tb testing.TB, spec ContainerSpec) ContainerSpec {
	tb.Helper()
	if spec.ID == "" {
		spec.ID = randomHex(tb, 32)
	}
	if spec.PodUID == "" {
		u := []byte(randomHex(tb, 16))
		u[12] = '4' // a version 4 UUID
		u[16] = "89ab"[u[16]%4]
		spec.PodUID = fmt.Sprintf("%s-%s-%s-%s-%s", u[0:8], u[8:12], u[12:16], u[16:20], u[20:32])
	}
	if spec.QoS == "" {
		spec.QoS = "besteffort"
	}
	if !slices.Contains([]string{"besteffort", "burstable", "guaranteed"}, spec.QoS) {
		tb.Fatalf("container QoS %q: want besteffort, burstable or guaranteed", spec.QoS)
	}
	for _, s := range []string{spec.ID, spec.PodUID} {
		if strings.Trim(s, "0123456789abcdef-") != "" {
			tb.Fatalf("container spec %+v: ids are lowercase hex digits and dashes", spec)
		}
	}
	return spec
}

func randomHex(tb testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// podSlice is the cgroup path of a pod under the kubelet's systemd driver:
// kubepods.slice, the QoS class's slice (none for guaranteed), and the
// pod's, whose name escapes the uid's dashes as underscores.
func podSlice(qos, uid string) []string {
	u := strings.ReplaceAll(uid, "-", "_")
	if qos == "guaranteed" {
		return []string{"kubepods.slice", "kubepods-pod" + u + ".slice"}
	}
	return []string{"kubepods.slice", "kubepods-" + qos + ".slice", "kubepods-" + qos + "-pod" + u + ".slice"}
}

// containerScope is the cgroup containerd gives a container in a pod slice.
func containerScope(id string) string { return "cri-containerd-" + id + ".scope" }

// A hierarchy is a mounted cgroup hierarchy.
type hierarchy struct {
	// own is the test process's cgroup directory in it.
	own string
	// v1 is set for a v1 hierarchy (filesystem type cgroup).
	v1 bool
}

// cgroupHierarchies finds the writable cgroup hierarchies in
// /proc/self/mountinfo and the test process's cgroup in each from
// /proc/self/cgroup.
func cgroupHierarchies() ([]hierarchy, error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoContainers, err)
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoContainers, err)
	}
	type ownLine struct {
		ctrls []string // nil for the unified hierarchy
		path  string
	}
	var lines []ownLine
	for _, l := range strings.Split(strings.TrimSpace(string(own)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		ol := ownLine{path: f[2]}
		if f[0] != "0" || f[1] != "" {
			ol.ctrls = strings.Split(f[1], ",")
		}
		lines = append(lines, ol)
	}
	var hs []hierarchy
	seen := map[string]bool{} // by device: one hierarchy mounted twice
	for _, l := range strings.Split(string(mountinfo), "\n") {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		f := strings.Fields(l)
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			continue
		}
		fstype, super := f[sep+1], strings.Split(f[sep+3], ",")
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		dev, root, mnt := f[2], unescapeMountinfo(f[3]), unescapeMountinfo(f[4])
		if seen[dev] || slices.Contains(strings.Split(f[5], ","), "ro") || slices.Contains(super, "ro") {
			continue
		}
		i := slices.IndexFunc(lines, func(ol ownLine) bool {
			if fstype == "cgroup2" {
				return ol.ctrls == nil
			}
			if ol.ctrls == nil {
				return false
			}
			for _, c := range ol.ctrls {
				if !slices.Contains(super, c) {
					return false
				}
			}
			return true
		})
		if i < 0 {
			continue
		}
		p := lines[i].path
		rel, ok := strings.CutPrefix(p, root)
		if root == "/" {
			rel, ok = p, true
		}
		if !ok || (rel != "" && rel[0] != '/') {
			// The test's cgroup is outside what this mount shows.
			return nil, fmt.Errorf("%w: own cgroup %s is outside the mount of %s at %s (root %s)", ErrNoContainers, p, fstype, mnt, root)
		}
		seen[dev] = true
		hs = append(hs, hierarchy{own: filepath.Join(mnt, rel), v1: fstype == "cgroup"})
	}
	return hs, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of a
// mountinfo path field.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// makeCgroups creates the cgroup comps (a path of components) below the
// test's own cgroup in every hierarchy and returns the leaf directories.
// Another test's cleanup may remove a shared parent (kubepods.slice) between
// two mkdirs: the path is then made again.
func makeCgroups(tb testing.TB, hs []hierarchy, comps []string) []string {
	tb.Helper()
	var leaves []string
	for _, h := range hs {
		var err error
		for range 20 {
			if err = makeCgroupPath(h, comps); !errors.Is(err, fs.ErrNotExist) {
				break
			}
		}
		if err != nil {
			if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EPERM) {
				RequireKernel(tb, "containers (pid namespaces and cgroups)", fmt.Errorf("%w: %v", ErrNoContainers, err), ErrNoContainers)
			}
			tb.Fatalf("make container cgroup: %v", err)
		}
		leaves = append(leaves, filepath.Join(append([]string{h.own}, comps...)...))
	}
	return leaves
}

func makeCgroupPath(h hierarchy, comps []string) error {
	dir := h.own
	for _, c := range comps {
		parent := dir
		dir = filepath.Join(dir, c)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if h.v1 {
			if err := inheritCpuset(parent, dir); err != nil {
				return err
			}
		}
	}
	return nil
}

// inheritCpuset gives a new v1 cpuset cgroup its parent's CPUs and memory
// nodes: it starts with none, and no task can join a cpuset without them.
func inheritCpuset(parent, dir string) error {
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		cur, err := os.ReadFile(filepath.Join(dir, f))
		if errors.Is(err, fs.ErrNotExist) {
			return nil // not the cpuset hierarchy
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(cur)) > 0 {
			continue
		}
		v, err := os.ReadFile(filepath.Join(parent, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(dir, f), err)
		}
	}
	return nil
}

// removeCgroups removes the cgroup comps below the test's own cgroup in
// every hierarchy, leaf first, up to the last n components. A parent still
// in use (another container of a pod, another test's pod) stays.
func removeCgroups(tb testing.TB, hs []hierarchy, comps []string, n int) {
	tb.Helper()
	for _, h := range hs {
		for i := len(comps); i > len(comps)-n && i > 0; i-- {
			dir := filepath.Join(append([]string{h.own}, comps[:i]...)...)
			err := os.Remove(dir)
			if i == len(comps) {
				// A leaf empties as its killed processes are reaped.
				for deadline := time.Now().Add(10 * time.Second); errors.Is(err, syscall.EBUSY) && time.Now().Before(deadline); {
					time.Sleep(10 * time.Millisecond)
					err = os.Remove(dir)
				}
			}
			switch {
			case err == nil, errors.Is(err, fs.ErrNotExist):
			case errors.Is(err, syscall.EBUSY) && i < len(comps):
				// Shared and still in use.
			default:
				tb.Logf("remove container cgroup: %v", err)
			}
			if err != nil && i == len(comps) {
				break
			}
		}
	}
}

// killCgroups kills every process in the cgroups dirs: through the v2
// leaf's cgroup.kill, which misses none, or else by the pids each lists.
func killCgroups(tb testing.TB, dirs []string) {
	tb.Helper()
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0o644); err == nil {
			return
		}
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// waitEmpty waits up to 10 s for the cgroups dirs to hold no process.
func waitEmpty(tb testing.TB, dirs []string) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, d := range dirs {
		for {
			b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if err != nil || len(bytes.TrimSpace(b)) == 0 {
				break
			}
			if time.Now().After(deadline) {
				tb.Logf("container cgroup %s still holds pids %s", d, strings.Fields(string(b)))
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// placeScript moves the shell into each cgroup directory given before "--"
// and then execs the arguments after it, so the program never runs outside
// its cgroups. "$$" is the shell's pid in its own pid namespace, the one
// the kernel reads a pid written to cgroup.procs in.
const placeScript = `while [ "$1" != -- ]; do echo $$ > "$1/cgroup.procs" || exit 125; shift; done; shift; exec "$@"`

// placeFailed is the exit status of placeScript when a move fails.
const placeFailed = 125

// nsProc is a program started through unshare or nsenter: cmd is the tool,
// child the program, which runs as the tool's child.
type nsProc struct {
	cmd   *exec.Cmd
	child *Child
	// pidfd refers to the program, so that a kill cannot reach another
	// process that reuses its pid.
	pidfd   int
	exited  chan struct{} // closed when cmd has been waited for
	waitErr error
	stdin   *os.File
}

// startInNamespaces runs launcher (unshare or nsenter and their options)
// with placeScript, the cgroup directories and name with args, and returns
// once the program runs.
func startInNamespaces(tb testing.TB, launcher []string, dirs []string, name string, args []string) *nsProc {
	tb.Helper()
	argv := append(append(append(append(slices.Clone(launcher), "sh", "-c", placeScript, "sh"), dirs...), "--", name), args...)
	inR, inW, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	// Pipes, not StdoutPipe: Wait, called as soon as the launcher exits,
	// must not close the program's stdout before its last lines are read.
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		tb.Fatalf("start %s: %v", argv[0], err)
	}
	p := &nsProc{cmd: cmd, pidfd: -1, exited: make(chan struct{}), stdin: inW}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	p.child = &Child{Cmd: cmd, lines: make(chan string, 64), stdin: inW, name: filepath.Base(name)}
	go func() {
		readLines(outR, p.child.lines)
		outR.Close()
	}()

	fail := func(format string, a ...any) {
		tb.Helper()
		p.kill(tb)
		_ = cmd.Process.Kill()
		<-p.exited
		inW.Close()
		tb.Fatalf("%s %s: "+format, append([]any{argv[0], name}, a...)...)
	}
	pid, err := p.findChild()
	if err != nil {
		fail("%v", err)
	}
	p.child.Pid = pid
	if p.pidfd, err = unix.PidfdOpen(pid, 0); err != nil {
		fail("pidfd_open: %v", err)
	}
	if ppid, err := parentPid(pid); err != nil || ppid != cmd.Process.Pid {
		fail("pid %d is no longer %s's child (parent %d, %v)", pid, argv[0], ppid, err)
	}
	if err := p.awaitExec(argv, slices.Index(argv, "--")+1); err != nil {
		fail("%v", err)
	}
	return p
}

// findChild waits up to 10 s for the launcher's child, the program.
func (p *nsProc) findChild() (int, error) {
	pid := p.cmd.Process.Pid
	path := fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		select {
		case <-p.exited:
			return 0, fmt.Errorf("exited before its child ran: %v", p.waitErr)
		default:
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			return strconv.Atoi(f[0])
		}
	}
	return 0, errors.New("no child in 10 s")
}

// awaitExec waits up to 10 s until the program runs: its command line is no
// longer one that argv passes through on the way (the launchers', the
// shell's), which are suffixes of argv; argv[start:] is the program's.
func (p *nsProc) awaitExec(argv []string, start int) error {
	pid := p.child.Pid
	var before [][]byte
	for i, a := range argv[:start] {
		if i == 0 || a == "unshare" || a == "sh" {
			before = append(before, []byte(strings.Join(argv[i:], "\x00")+"\x00"))
		}
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(b) == 0 {
			// Gone, or a zombie: the program ended, or the shell did.
			select {
			case <-p.exited:
				var ee *exec.ExitError
				if errors.As(p.waitErr, &ee) && ee.ExitCode() == placeFailed {
					return fmt.Errorf("could not enter the container's cgroups (see stderr)")
				}
				return nil
			default:
				continue
			}
		}
		if !slices.ContainsFunc(before, func(c []byte) bool { return bytes.Equal(b, c) }) {
			return nil
		}
	}
	return errors.New("did not start in 10 s")
}

// kill kills the program: through its launcher when that is unshare
// --kill-child (killed, it kills its child; unshare complains on stderr when
// its child is killed under it), else directly (nsenter then exits with it).
func (p *nsProc) kill(tb testing.TB) {
	tb.Helper()
	if filepath.Base(p.cmd.Args[0]) == "unshare" { // with --kill-child
		_ = p.cmd.Process.Kill()
		return
	}
	if p.pidfd >= 0 {
		if err := unix.PidfdSendSignal(p.pidfd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, syscall.ESRCH) {
			tb.Logf("kill pid %d: %v", p.child.Pid, err)
		}
	}
}

// wait waits up to 10 s for the launcher to exit, killing it if it has
// not, and releases the process's resources.
func (p *nsProc) wait(tb testing.TB) {
	tb.Helper()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		tb.Errorf("%s did not exit in 10 s after its program was killed", p.cmd.Path)
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.stdin.Close()
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
}

// parentPid reads a process's parent's pid from /proc/PID/stat.
func parentPid(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no comm", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	return strconv.Atoi(f[1])
}
