package testchild

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readContainerID reads the "container.id" line of the contained program.
func readContainerID(t *testing.T, c *Child) string {
	t.Helper()
	line := c.Line(t, 10*time.Second)
	id, ok := strings.CutPrefix(line, "container.id")
	if !ok {
		t.Fatalf("expected a container.id line, got %q", line)
	}
	return strings.TrimSpace(id)
}

// nsOf returns the pid namespace of pid, as its /proc link names it.
func nsOf(t *testing.T, pid int) string {
	t.Helper()
	return nsLink(t, pid, "pid")
}

// nsLink returns the namespace of kind of pid, as its /proc link names it.
func nsLink(t *testing.T, pid int, kind string) string {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestContainer checks that a container is what a runtime makes: its
// program is pid 1 of a pid namespace of its own, every line of its
// /proc/self/cgroup ends in its container's scope, so that the
// OpenTelemetry Go SDK's detector, run inside, reports exactly its id; and
// that its cgroups are gone after the test.
func TestContainer(t *testing.T) {
	RequireContainers(t)
	bin := Build(t, "contained")
	var cgroups []string
	t.Run("run", func(t *testing.T) {
		spec := ContainerSpec{ID: strings.Repeat("0123456789abcdef", 4), PodUID: "4415fd05-2c0f-4533-909b-f2180dca8d7c", QoS: "burstable"}
		c := StartContainer(t, spec, bin)
		cgroups = c.Cgroups
		c.AwaitReady(t)
		if len(c.Ready) != 1 || c.Ready[0] != 1 {
			t.Errorf("ready %v: want pid 1 of its namespace", c.Ready)
		}
		if c.HostPid == 1 || c.HostPid != c.Pid {
			t.Errorf("HostPid %d, Pid %d", c.HostPid, c.Pid)
		}
		if nsOf(t, c.HostPid) == nsOf(t, os.Getpid()) {
			t.Errorf("the container shares the test's pid namespace")
		}
		if got := readContainerID(t, c.Child); got != spec.ID {
			t.Errorf("the OpenTelemetry Go SDK in the container reports container.id %q, want %q", got, spec.ID)
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", c.HostPid))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != len(c.Cgroups) {
			t.Errorf("%d cgroup lines, %d container cgroups", len(lines), len(c.Cgroups))
		}
		scope := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice/cri-containerd-" + spec.ID + ".scope"
		for _, l := range lines {
			if !strings.HasSuffix(l, scope) {
				t.Errorf("cgroup line %q is not in the container's scope", l)
			}
		}
		for _, d := range c.Cgroups {
			if _, err := os.Stat(d); err != nil {
				t.Errorf("container cgroup: %v", err)
			}
		}
	})
	if len(cgroups) == 0 {
		return // skipped
	}
	for _, d := range cgroups {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("container cgroup %s not removed: %v", d, err)
		}
		// The pod's slice too: no other test uses this pod.
		if _, err := os.Stat(filepath.Dir(d)); !os.IsNotExist(err) {
			t.Errorf("pod cgroup %s not removed: %v", filepath.Dir(d), err)
		}
	}
}

// TestContainerExec checks that a process exec'd into a container shares
// its namespace and cgroups, and dies with it.
func TestContainerExec(t *testing.T) {
	RequireContainers(t)
	bin := Build(t, "contained")
	c := StartContainer(t, ContainerSpec{QoS: "guaranteed"}, bin)
	c.AwaitReady(t)
	e := c.Exec(t, bin)
	e.AwaitReady(t)
	if len(e.Ready) != 1 || e.Ready[0] == 1 || e.Ready[0] == e.Pid {
		t.Errorf("exec'd process: ready %v, host pid %d; want a pid of the container's namespace", e.Ready, e.Pid)
	}
	if nsOf(t, e.Pid) != nsOf(t, c.HostPid) {
		t.Errorf("the exec'd process is not in the container's pid namespace")
	}
	if got := readContainerID(t, e); got != c.ID {
		t.Errorf("exec'd process: container.id %q, want %q", got, c.ID)
	}
	for _, d := range c.Cgroups {
		if !strings.Contains(string(must(os.ReadFile(filepath.Join(d, "cgroup.procs")))), fmt.Sprint(e.Pid)) {
			t.Errorf("exec'd process %d is not in %s", e.Pid, d)
		}
	}
	if !strings.Contains(c.Cgroups[0], "/kubepods.slice/kubepods-pod") {
		t.Errorf("guaranteed pod's cgroup %s: want kubepods.slice/kubepods-pod<uid>.slice", c.Cgroups[0])
	}
	c.Stop(t)
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", e.Pid)); !os.IsNotExist(err) {
		t.Errorf("exec'd process %d outlived its container: %v", e.Pid, err)
	}
}

// TestPod checks a pod: its containers share the sandbox's pid namespace,
// in cgroups of their own under the pod's, and each reports its own id.
func TestPod(t *testing.T) {
	RequireContainers(t)
	bin := Build(t, "contained")
	pod := StartPod(t, ContainerSpec{})
	a := pod.Exec(t, ContainerSpec{}, bin)
	b := pod.Exec(t, ContainerSpec{PodUID: pod.UID}, bin)
	a.AwaitReady(t)
	b.AwaitReady(t)
	if a.ID == b.ID || a.PodUID != pod.UID || b.PodUID != pod.UID {
		t.Fatalf("containers %s and %s of pod %s: %s, %s", a.ID, b.ID, pod.UID, a.PodUID, b.PodUID)
	}
	ns := nsOf(t, pod.Sandbox.HostPid)
	for _, c := range []*Container{a, b} {
		if nsOf(t, c.HostPid) != ns {
			t.Errorf("container %s is not in the pod's pid namespace", c.ID)
		}
		if c.Ready[0] <= 1 {
			t.Errorf("container %s: ready %v, want a pid after the sandbox's", c.ID, c.Ready)
		}
		if got := readContainerID(t, c.Child); got != c.ID {
			t.Errorf("container.id %q, want %q", got, c.ID)
		}
		if filepath.Dir(c.Cgroups[0]) != filepath.Dir(pod.Sandbox.Cgroups[0]) {
			t.Errorf("container cgroup %s is not beside the sandbox's %s", c.Cgroups[0], pod.Sandbox.Cgroups[0])
		}
		// A mount namespace of its own, with the pod's /proc.
		mnt, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", c.HostPid))
		if err != nil {
			t.Fatal(err)
		}
		if sb, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pod.Sandbox.HostPid)); mnt == sb {
			t.Errorf("container %s shares the sandbox's mount namespace", c.ID)
		}
	}
	// Each sees the other: one /proc for the pod.
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/proc/%d", a.HostPid, b.Ready[0])); err != nil {
		t.Errorf("container a does not see b in its /proc: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestCgroupNamespace checks containers in cgroup namespaces of their own,
// as containerd makes them on cgroup v2: the workload sees its cgroup as
// "/", so the OpenTelemetry Go SDK finds no container id in it, while the
// test sees its container's cgroups; and a host container (hostPID) shares
// the test's pid namespace but not its cgroup namespace, and sees the
// other container's cgroup relative to its own.
func TestCgroupNamespace(t *testing.T) {
	RequireContainers(t)
	bin := Build(t, "contained")
	c := StartContainer(t, ContainerSpec{CgroupNS: true}, bin)
	c.AwaitReady(t)
	if got := readContainerID(t, c.Child); got != "" {
		t.Errorf("in a cgroup namespace of its own, the SDK reports container.id %q, want none", got)
	}
	if nsLink(t, c.HostPid, "cgroup") == nsLink(t, os.Getpid(), "cgroup") {
		t.Errorf("the container shares the test's cgroup namespace")
	}
	if b := must(os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", c.HostPid))); !strings.Contains(string(b), "cri-containerd-"+c.ID+".scope") {
		t.Errorf("the test reads the container's cgroups as %q", b)
	}

	h := StartHostContainer(t, ContainerSpec{QoS: "guaranteed", CgroupNS: true}, "sh", "-c", `echo ready $$; cat /proc/$0/cgroup; exec sleep 60`, fmt.Sprint(c.HostPid))
	h.AwaitReady(t)
	if len(h.Ready) != 1 || h.Ready[0] != h.HostPid || nsOf(t, h.HostPid) != nsOf(t, os.Getpid()) {
		t.Errorf("host container: ready %v, host pid %d; want the test's pid namespace", h.Ready, h.HostPid)
	}
	if nsLink(t, h.HostPid, "cgroup") == nsLink(t, os.Getpid(), "cgroup") {
		t.Errorf("the host container shares the test's cgroup namespace")
	}
	// The guaranteed pod's container is two levels below kubepods.slice,
	// the other's three: its path is relative, up to kubepods.slice.
	line := h.Line(t, 10*time.Second)
	if want := "/../../kubepods-besteffort.slice/kubepods-besteffort-pod"; !strings.Contains(line, want) || !strings.HasSuffix(line, "cri-containerd-"+c.ID+".scope") {
		t.Errorf("the host container reads the other's cgroup as %q, want it relative (%s…)", line, want)
	}
}
