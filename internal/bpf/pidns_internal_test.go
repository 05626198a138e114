//go:build amd64

package bpf

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/perfprof/perfprof/internal/testchild"
)

// TestVerifyPidNamespace: the check refuses any difference between what
// the programs read of the collector's thread and what the kernel says.
func TestVerifyPidNamespace(t *testing.T) {
	ok := pidnsCheck{Level: 1, Inum: 4026532181, Pid: 7, Tid: 9}
	for _, tc := range []struct {
		name string
		got  pidnsCheck
		fail bool
	}{
		{"same", ok, false},
		{"other namespace", pidnsCheck{Level: 1, Inum: 4026531836, Pid: 7, Tid: 9}, true},
		{"global pid", pidnsCheck{Level: 1, Inum: 4026532181, Pid: 20321, Tid: 9}, true},
		{"global tid", pidnsCheck{Level: 1, Inum: 4026532181, Pid: 7, Tid: 20330}, true},
		{"nothing read", pidnsCheck{}, true},
	} {
		err := verifyPidNamespace(tc.got, 4026532181, 7, 9)
		if (err != nil) != tc.fail || (err != nil && !errors.Is(err, ErrPidNamespace)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// TestCheckPidNamespace runs the check in this process: the programs read
// its ids as getpid and gettid give them.
func TestCheckPidNamespace(t *testing.T) {
	spec, err := loadSpanctx()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := checkPidNamespace(spec)
	testchild.RequireKernel(t, "BPF", err, ErrPermission, ErrNotSupported)
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		t.Fatal(err)
	}
	if ns.Inode != st.Ino {
		t.Errorf("namespace %+v, want inode %d", ns, st.Ino)
	}
	t.Logf("pid %d: %+v", os.Getpid(), ns)
}
