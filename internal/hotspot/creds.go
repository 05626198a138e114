package hotspot

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// HotSpot accepts a connection to its attach socket from root or from a
// peer with its own effective uid and gid, as it sees them in its user
// namespace (SO_PEERCRED). Root outside that namespace is nobody inside
// it: a JVM in a rootless container would drop our connection. So in that
// case we connect with the JVM's effective ids, which the kernel records
// at connect(2).

// dialAs connects to the unix socket at path, as the target's effective
// user when that is needed for the JVM to accept us.
func (t *target) dialAs(ctx context.Context, path string) (*net.UnixConn, error) {
	if os.Geteuid() != 0 || (t.st.euid == 0 && t.st.egid == 0) || sameUserNS(t.pid) {
		return dialUnix(ctx, path)
	}
	type result struct {
		conn *net.UnixConn
		err  error
	}
	ch := make(chan result, 1)
	egid := os.Getegid()
	go func() {
		// Credentials are per thread for the kernel. setresuid(2) and
		// setresgid(2) are called raw: the libc and Go wrappers change
		// every thread of the process. The thread is returned to the
		// scheduler only with its credentials restored; otherwise it is
		// locked to this goroutine and ends with it.
		runtime.LockOSThread()
		if err := setEffective(t.st.euid, t.st.egid); err != nil {
			restored := setEffective(0, egid) == nil
			ch <- result{err: fmt.Errorf("take the jvm's credentials %d:%d: %w", t.st.euid, t.st.egid, err)}
			if restored {
				runtime.UnlockOSThread()
			}
			return
		}
		conn, err := dialUnix(ctx, path)
		if setEffective(0, egid) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{conn, err}
	}()
	r := <-ch
	return r.conn, r.err
}

// setEffective sets the calling thread's effective uid and gid; the real
// and saved ids stay root, which lets the thread become root again.
func setEffective(uid, gid int) error {
	// As root the gid can be changed; with another euid it cannot.
	if uid != 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
			return e
		}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
		return e
	}
	if uid == 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
			return e
		}
	}
	return nil
}

func dialUnix(ctx context.Context, path string) (*net.UnixConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// sameUserNS reports whether process pid is in our user namespace; if we
// cannot tell, it says yes, and the connection is made as ourselves.
func sameUserNS(pid int) bool {
	ours, err1 := os.Stat("/proc/self/ns/user")
	theirs, err2 := os.Stat(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err1 != nil || err2 != nil {
		return true
	}
	return os.SameFile(ours, theirs)
}
