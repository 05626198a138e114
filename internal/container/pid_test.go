package container

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestReadNSpidSelf(t *testing.T) {
	ids, err := ReadNSpid(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The test's /proc is of its own pid namespace: its id there is its pid.
	if len(ids) == 0 || ids[0] != os.Getpid() {
		t.Fatalf("ReadNSpid(%d) = %v", os.Getpid(), ids)
	}
}

func TestReadThreadSelf(t *testing.T) {
	// Never unlocked: the thread, renamed, ends with the test's goroutine.
	runtime.LockOSThread()
	tid := unix.Gettid()
	// A name with a newline and a backslash, which the status file escapes.
	p, err := unix.BytePtrFromString("a\\b\nc")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(p)), 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	name, ids, err := ReadThread(os.Getpid(), tid)
	if err != nil {
		t.Fatal(err)
	}
	if name != "a\\b\nc" || len(ids) == 0 || ids[0] != tid {
		t.Fatalf("ReadThread = %q, %v; want %q, [%d …]", name, ids, "a\\b\nc", tid)
	}
	m, err := ThreadIDs(os.Getpid(), 10000)
	if err != nil {
		t.Fatal(err)
	}
	// In the test's own namespace every thread's id maps to itself.
	if m[ids[len(ids)-1]] != tid {
		t.Fatalf("ThreadIDs maps %d to %d, want %d", ids[len(ids)-1], m[ids[len(ids)-1]], tid)
	}
	for in, out := range m {
		if len(ids) == 1 && in != out {
			t.Errorf("ThreadIDs maps %d to %d in one namespace", in, out)
		}
	}
	if small, err := ThreadIDs(os.Getpid(), 1); err != nil || len(small) != 1 {
		t.Errorf("ThreadIDs(max 1) = %v, %v; want one thread", small, err)
	}
}

func TestGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid // reaped: gone, unless reused this instant
	if _, err := ReadNSpid(pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadNSpid of a reaped process: %v, want fs.ErrNotExist", err)
	}
	if _, _, err := ReadThread(pid, pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadThread of a reaped process: %v, want fs.ErrNotExist", err)
	}
	if _, err := ThreadIDs(pid, 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ThreadIDs of a reaped process: %v, want fs.ErrNotExist", err)
	}
	if _, err := ReadCgroup(pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadCgroup of a reaped process: %v, want fs.ErrNotExist", err)
	}
	for _, bad := range []int{0, -1} {
		if _, err := ReadNSpid(bad); err == nil {
			t.Errorf("ReadNSpid(%d) succeeded", bad)
		}
		if _, err := ReadCgroup(bad); err == nil {
			t.Errorf("ReadCgroup(%d) succeeded", bad)
		}
	}
	if _, err := ThreadIDs(os.Getpid(), 0); err == nil {
		t.Errorf("ThreadIDs with max 0 succeeded")
	}
}

func TestReadCgroupSelf(t *testing.T) {
	c, err := ReadCgroup(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	want := ParseCgroup(raw)
	if c.ContainerID != want.ContainerID || !slices.Equal(c.Paths, want.Paths) || len(c.Paths) == 0 {
		t.Fatalf("ReadCgroup = %+v, want %+v", c, want)
	}
}

func TestReadStatus(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		text string
		name string
		ids  []int
		ok   bool
	}{
		{"Name:\tsleep\nTgid:\t7\nPid:\t7\nNSpid:\t4242\t7\t1\n", "sleep", []int{4242, 7, 1}, true},
		{"Name:\told\nPid:\t99\n", "old", []int{99}, true}, // Linux < 4.1
		{"Name:\tx\nNSpid:\t12\tx\n", "", nil, false},
		{"Name:\tx\n", "", nil, false},
		{"Name:\tx\nNSpid:\t0\n", "", nil, false},
	} {
		p := dir + "/status"
		if err := os.WriteFile(p, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		name, ids, err := readStatus(p)
		if (err == nil) != tc.ok || name != tc.name || !slices.Equal(ids, tc.ids) {
			t.Errorf("readStatus(%q) = %q, %v, %v; want %q, %v, ok %v", tc.text, name, ids, err, tc.name, tc.ids, tc.ok)
		}
	}
}
