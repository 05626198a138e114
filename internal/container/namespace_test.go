package container_test

// Real processes in pid namespaces and container cgroups, made by
// testchild's container harness (and, for the plainest case, by unshare
// directly).

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/container"
	"github.com/perfprof/perfprof/internal/testchild"
)

// TestReadNSpidNewNamespace reads the ids of sleep run as pid 1 of a new
// pid namespace: its pid here, then 1.
func TestReadNSpidNewNamespace(t *testing.T) {
	testchild.NeedRoot(t, "a new pid namespace")
	testchild.LookTool(t, "unshare")
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "sleep", "60")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // --kill-child: the sleep dies with it
		_ = cmd.Wait()
	})
	// unshare forks the sleep: its only child.
	var child int
	for deadline := time.Now().Add(10 * time.Second); child == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			testchild.RequireKernel(t, "pid namespaces", fmt.Errorf("%w: unshare made no child in 10 s", errors.ErrUnsupported), errors.ErrUnsupported)
		}
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", cmd.Process.Pid))
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", cmd.Process.Pid, task.Name()))
			if f := strings.Fields(string(b)); len(f) > 0 {
				child, _ = strconv.Atoi(f[0])
			}
		}
	}
	// Until the fork's child has exec'd sleep, it is unshare.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child)); string(b) == "sleep\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d did not become sleep in 10 s", child)
		}
	}
	ids, err := container.ReadNSpid(child)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []int{child, 1}) {
		t.Fatalf("ReadNSpid(%d) = %v, want [%d 1]", child, ids, child)
	}
	name, tids, err := container.ReadThread(child, child)
	if err != nil || name != "sleep" || !slices.Equal(tids, ids) {
		t.Fatalf("ReadThread(%d, %d) = %q, %v, %v", child, child, name, tids, err)
	}
}

// contained starts the contained program in a container and reads its
// ready and container.id lines.
func contained(t *testing.T, start func(bin string, args ...string) *testchild.Container, args ...string) (*testchild.Container, string) {
	t.Helper()
	c := start(testchild.Build(t, "contained"), args...)
	c.AwaitReady(t)
	line := c.Line(t, 10*time.Second)
	sdkID, ok := strings.CutPrefix(line, "container.id")
	if !ok {
		t.Fatalf("expected a container.id line, got %q", line)
	}
	return c, strings.TrimSpace(sdkID)
}

// TestThreadIDsInContainer maps the tids a multi-threaded process in a
// container sees to the test's.
func TestThreadIDsInContainer(t *testing.T) {
	testchild.RequireContainers(t)
	const threads = 4
	c, _ := contained(t, func(bin string, args ...string) *testchild.Container {
		return testchild.StartContainer(t, testchild.ContainerSpec{}, bin, args...)
	}, "-threads", strconv.Itoa(threads))
	f := strings.Fields(c.Line(t, 10*time.Second))
	if len(f) != threads+1 || f[0] != "tids" {
		t.Fatalf("expected a tids line, got %q", f)
	}

	ids, err := container.ReadNSpid(c.HostPid)
	if err != nil || !slices.Equal(ids, []int{c.HostPid, 1}) {
		t.Fatalf("ReadNSpid(%d) = %v, %v; want [%d 1]", c.HostPid, ids, err, c.HostPid)
	}
	m, err := container.ThreadIDs(c.HostPid, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if m[1] != c.HostPid {
		t.Errorf("ThreadIDs maps 1 to %d, want the main thread %d", m[1], c.HostPid)
	}
	if name, _, err := container.ReadThread(c.HostPid, c.HostPid); err != nil || !strings.HasPrefix(name, "contained") {
		t.Errorf("main thread: %q, %v; want the program's name", name, err)
	}
	for i, s := range f[1:] {
		inner, _ := strconv.Atoi(s)
		host, ok := m[inner]
		if !ok {
			t.Errorf("ThreadIDs has no thread %d: %v", inner, m)
			continue
		}
		name, nspid, err := container.ReadThread(c.HostPid, host)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("worker-%d", i); name != want || !slices.Equal(nspid, []int{host, inner}) {
			t.Errorf("thread %d (%d inside): %q %v; want %q [%d %d]", host, inner, name, nspid, want, host, inner)
		}
	}
	if small, err := container.ThreadIDs(c.HostPid, 2); err != nil || len(small) > 2 {
		t.Errorf("ThreadIDs with max 2: %v, %v", small, err)
	}
}

// TestReadCgroupContainer reads the container and pod of a process in a
// container, and of one exec'd into it, and selects them by path and id.
func TestReadCgroupContainer(t *testing.T) {
	testchild.RequireContainers(t)
	spec := testchild.ContainerSpec{ID: strings.Repeat("fedcba9876543210", 4), PodUID: "6eab3b7b-f0a6-4bb5-a5c1-fa32b6d2e7a3", QoS: "burstable"}
	c, sdkID := contained(t, func(bin string, args ...string) *testchild.Container {
		return testchild.StartContainer(t, spec, bin, args...)
	})
	cg, err := container.ReadCgroup(c.HostPid)
	if err != nil {
		t.Fatal(err)
	}
	if cg.ContainerID != spec.ID || cg.PodUID != spec.PodUID {
		t.Errorf("ReadCgroup: container %q pod %q; want %q %q", cg.ContainerID, cg.PodUID, spec.ID, spec.PodUID)
	}
	self, err := container.ReadCgroup(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	pod := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6eab3b7b_f0a6_4bb5_a5c1_fa32b6d2e7a3.slice"
	if want := path.Join(self.Paths[0], pod, "cri-containerd-"+spec.ID+".scope"); cg.Paths[0] != want {
		t.Errorf("Paths[0] = %q, want the v2 path %q", cg.Paths[0], want)
	}
	for _, p := range cg.Paths {
		if !strings.HasSuffix(p, "/cri-containerd-"+spec.ID+".scope") {
			t.Errorf("path %q is not the container's", p)
		}
	}
	if !container.MatchID(sdkID, cg) || !container.MatchID(spec.ID[:12], cg) {
		t.Errorf("MatchID refuses %q (the Go SDK's) or %q in %q", sdkID, spec.ID[:12], cg.IDs)
	}
	for pattern, want := range map[string]bool{
		path.Join(self.Paths[0], "kubepods.slice/*/*pod6eab3b7b_f0a6_4bb5_a5c1_fa32b6d2e7a3.slice"): true,
		path.Join(self.Paths[0], pod, "cri-containerd-*.scope"):                                     true,
		path.Join(self.Paths[0], "kubepods.slice/kubepods-besteffort.slice"):                        false,
	} {
		if err := container.ValidatePattern(pattern); err != nil {
			t.Fatal(err)
		}
		if got := container.MatchPath(pattern, cg.Paths); got != want {
			t.Errorf("MatchPath(%q) = %v, want %v", pattern, got, want)
		}
	}
	if container.MatchPath(path.Join(self.Paths[0], pod), self.Paths) {
		t.Errorf("the pod's pattern selects the test process")
	}

	e := c.Exec(t, testchild.Build(t, "contained"))
	e.AwaitReady(t)
	ids, err := container.ReadNSpid(e.Pid)
	if err != nil || len(ids) != 2 || ids[0] != e.Pid || ids[1] != e.Ready[0] {
		t.Errorf("ReadNSpid of the exec'd process = %v, %v; want [%d %d]", ids, err, e.Pid, e.Ready[0])
	}
	if ecg, err := container.ReadCgroup(e.Pid); err != nil || ecg.ContainerID != spec.ID || !slices.Equal(ecg.Paths, cg.Paths) {
		t.Errorf("ReadCgroup of the exec'd process = %+v, %v", ecg, err)
	}
}

// TestPodContainers reads the containers of a pod that share its pid
// namespace, and selects the pod's and one container's processes.
func TestPodContainers(t *testing.T) {
	testchild.RequireContainers(t)
	p := testchild.StartPod(t, testchild.ContainerSpec{QoS: "guaranteed"})
	var cs []*testchild.Container
	for range 2 {
		c, _ := contained(t, func(bin string, args ...string) *testchild.Container {
			return p.Exec(t, testchild.ContainerSpec{}, bin, args...)
		})
		cs = append(cs, c)
	}
	ids, err := container.ReadNSpid(p.Sandbox.HostPid)
	if err != nil || !slices.Equal(ids, []int{p.Sandbox.HostPid, 1}) {
		t.Errorf("sandbox: ReadNSpid = %v, %v", ids, err)
	}
	sandbox, err := container.ReadCgroup(p.Sandbox.HostPid)
	if err != nil {
		t.Fatal(err)
	}
	podPattern := path.Dir(sandbox.Paths[0])
	if !strings.HasSuffix(podPattern, "/kubepods-pod"+strings.ReplaceAll(p.UID, "-", "_")+".slice") {
		t.Fatalf("sandbox path %q is not in the guaranteed pod's slice", sandbox.Paths[0])
	}
	var cgs []container.Cgroup
	for _, c := range cs {
		ids, err := container.ReadNSpid(c.HostPid)
		if err != nil || len(ids) != 2 || ids[0] != c.HostPid || ids[1] != c.Ready[0] || ids[1] == 1 {
			t.Errorf("container %s: ReadNSpid = %v, %v; want [%d %d]", c.ID, ids, err, c.HostPid, c.Ready[0])
		}
		cg, err := container.ReadCgroup(c.HostPid)
		if err != nil {
			t.Fatal(err)
		}
		if cg.ContainerID != c.ID || cg.PodUID != p.UID {
			t.Errorf("container %s: ReadCgroup: %q, pod %q", c.ID, cg.ContainerID, cg.PodUID)
		}
		if !container.MatchPath(podPattern, cg.Paths) {
			t.Errorf("the pod's cgroup %q does not select container %s", podPattern, c.ID)
		}
		cgs = append(cgs, cg)
	}
	if container.MatchID(cs[0].ID, cgs[1]) || container.MatchID(cs[1].ID, cgs[0]) || container.MatchID(cs[0].ID, sandbox) {
		t.Errorf("one container's id matches another's process")
	}
	one := path.Join(podPattern, "cri-containerd-"+cs[0].ID+".scope")
	if !container.MatchPath(one, cgs[0].Paths) || container.MatchPath(one, cgs[1].Paths) || container.MatchPath(one, sandbox.Paths) {
		t.Errorf("pattern %q selects the wrong containers", one)
	}
}

// TestReadIdentity: a container's workload is pid 1 of a namespace below
// the test's, in its container; the test itself is where it is.
func TestReadIdentity(t *testing.T) {
	testchild.RequireContainers(t)
	spec := testchild.ContainerSpec{ID: strings.Repeat("0123456789abcdef", 4)}
	c := testchild.StartContainer(t, spec, testchild.Build(t, "contained"))
	id, err := container.ReadIdentity(c.HostPid)
	if err != nil {
		t.Fatal(err)
	}
	if !id.Nested || id.LocalPid != 1 || id.Cgroup.ContainerID != spec.ID {
		t.Errorf("identity of the container's workload: %+v; want pid 1 of a nested namespace in container %s", id, spec.ID)
	}
	self, err := container.ReadIdentity(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.Nested || self.LocalPid != os.Getpid() {
		t.Errorf("identity of the test: %+v", self)
	}
	sel := container.Selector{IDs: []string{spec.ID[:12]}}
	if !sel.Match(id.Cgroup) || sel.Match(self.Cgroup) {
		t.Errorf("selector %+v: container %v, test %v", sel, sel.Match(id.Cgroup), sel.Match(self.Cgroup))
	}
}

// TestSelector: each list given must match; an empty selector matches all.
func TestSelector(t *testing.T) {
	cg := container.Cgroup{ContainerID: strings.Repeat("ab", 32), IDs: []string{strings.Repeat("ab", 32)},
		Paths: []string{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice/cri-containerd-" + strings.Repeat("ab", 32) + ".scope"}}
	for _, tc := range []struct {
		sel  container.Selector
		want bool
	}{
		{container.Selector{}, true},
		{container.Selector{Paths: []string{"/kubepods.slice/*/*-pod1_2.slice"}}, true},
		{container.Selector{Paths: []string{"/kubepods.slice/kubepods-besteffort.slice"}}, false},
		{container.Selector{IDs: []string{"abababababab"}}, true},
		{container.Selector{IDs: []string{"cdcdcdcdcdcd", "abababababab"}}, true},
		{container.Selector{IDs: []string{"cdcdcdcdcdcd"}}, false},
		{container.Selector{Paths: []string{"/kubepods.slice"}, IDs: []string{"cdcdcdcdcdcd"}}, false},
		{container.Selector{Paths: []string{"/kubepods.slice"}, IDs: []string{"abababababab"}}, true},
	} {
		if got := tc.sel.Match(cg); got != tc.want || tc.sel.Empty() != (len(tc.sel.Paths)+len(tc.sel.IDs) == 0) {
			t.Errorf("%+v: %v, want %v", tc.sel, got, tc.want)
		}
	}
}
