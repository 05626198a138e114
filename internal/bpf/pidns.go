//go:build amd64

package bpf

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ErrPidNamespace is wrapped when the programs would not name processes
// as this collector does: the check of Load read other ids for its own
// thread than getpid and gettid return.
var ErrPidNamespace = errors.New("the eBPF programs and the collector disagree on process ids")

// PidNamespace is the pid namespace the programs name processes in: the
// collector's own, where perf reports the pids and tids of its samples and
// where /proc shows its targets. A collector in a container or pod has one
// of its own, whose ids are not the kernel's global ones: the programs
// translate every task's ids into it, and a task that has none there (one
// of the host, or of another pod) is no target.
type PidNamespace struct {
	Inode uint64 // of /proc/self/ns/pid
	// Level is its depth below the initial namespace: 0 for the host's,
	// 1 for a container's.
	Level uint32
}

// pidnsCheck is struct pidns_check: what pidns_self read of the thread
// that ran it.
type pidnsCheck = spanctxPidnsCheck

// checkPidNamespace loads pidns_self alone, runs it on this goroutine's
// thread and compares what it read with what the kernel tells this
// process of itself: the programs compute every id from the task as it
// does, so that they and perf agree on which process a sample is of.
func checkPidNamespace(spec *ebpf.CollectionSpec) (PidNamespace, error) {
	var ns PidNamespace
	fi, err := os.Stat("/proc/self/ns/pid")
	if err != nil {
		return ns, fmt.Errorf("load BPF program spanctx: read this collector's pid namespace: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ns, fmt.Errorf("load BPF program spanctx: read this collector's pid namespace: no inode in %T", fi.Sys())
	}
	ns.Inode = st.Ino
	var objs struct {
		Self *ebpf.Program `ebpf:"pidns_self"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		// Without CAP_PERFMON the kernel refuses this program its
		// helpers (EINVAL, with the verifier's log) before it would
		// refuse the others their loading (EPERM): say what is missing,
		// as they would.
		if eff, ok := effectiveCaps(); ok && eff&(1<<capSysAdmin) == 0 && (eff&(1<<capPerfmon) == 0 || eff&(1<<capBPF) == 0) {
			return ns, fmt.Errorf("load BPF program spanctx: %w", deniedError(err, eff, ok))
		}
		return ns, explainLoadError(err)
	}
	defer objs.Self.Close()
	// The ids are the thread's: it must not change threads between
	// gettid and the run.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var got pidnsCheck
	if _, err := objs.Self.Run(&ebpf.RunOptions{Context: pidnsCheck{}, ContextOut: &got}); err != nil {
		return ns, fmt.Errorf("load BPF program spanctx: run the pid namespace check: %w", err)
	}
	if err := verifyPidNamespace(got, ns.Inode, os.Getpid(), unix.Gettid()); err != nil {
		return ns, fmt.Errorf("load BPF program spanctx: %w", err)
	}
	ns.Level = got.Level
	return ns, nil
}

// verifyPidNamespace compares what pidns_self read with the collector's
// own namespace inode, pid and tid.
func verifyPidNamespace(got pidnsCheck, ino uint64, pid, tid int) error {
	if uint64(got.Inum) != ino || int(got.Pid) != pid || int(got.Tid) != tid {
		return fmt.Errorf("%w: for its own thread they read pid %d, tid %d in the pid namespace of inode %d (level %d), "+
			"where it is pid %d, tid %d in the namespace of inode %d; this kernel keeps pids in a way the programs do not read",
			ErrPidNamespace, got.Pid, got.Tid, got.Inum, got.Level, pid, tid, ino)
	}
	return nil
}

// setPidNamespace makes the programs name processes in ns.
func setPidNamespace(spec *ebpf.CollectionSpec, ns PidNamespace) error {
	ino := uint32(ns.Inode)
	if ns.Level == 0 {
		// The initial namespace: the ids are the task's own fields,
		// without a walk of its pid.
		ino = 0
	}
	if err := spec.Variables[spanctxVarPidnsIno].Set(ino); err != nil {
		return fmt.Errorf("set pidns_ino: %w", err)
	}
	if err := spec.Variables[spanctxVarPidnsLevel].Set(ns.Level); err != nil {
		return fmt.Errorf("set pidns_level: %w", err)
	}
	return nil
}
