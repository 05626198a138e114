package hotspot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// PerfMapPath returns where JVM pid writes its perf map: /tmp/perf-<pid>.map
// with the JVM's own /tmp and pid, which for a JVM in a container we reach
// as /proc/PID/root/tmp/perf-<nspid>.map. Absolute symbolic links along
// that path, the process's to make, resolve in our root, not in the
// container's: open it with openat2(2) RESOLVE_IN_ROOT from
// /proc/PID/root, or at least with O_NOFOLLOW.
func PerfMapPath(pid int) (string, error) {
	st, err := readStatus(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", fmt.Errorf("perf map of jvm %d: %w", pid, err)
	}
	return fmt.Sprintf("/proc/%d/root/tmp/perf-%d.map", pid, st.nspid), nil
}

// PerfMap asks JVM pid to write its perf map, the symbols of the code it
// has compiled so far, at [PerfMapPath] (jcmd Compiler.perfmap, JDK 17 and
// later). Code compiled afterwards is missing until the next call.
//
// HotSpot (JDK 17 and 25) rewrites the file in place: it opens it with
// O_TRUNC and refills the same inode in 4 KiB writes. A reader racing with
// PerfMap may see it empty or cut in the middle of a line; a reader that
// holds it open sees the new content.
//
// The command succeeds silently. JDK 25 reports a failure to create the
// file in its output, with status 0; JDK 17 only in its own log, which is
// why PerfMap also checks that the file has changed.
func PerfMap(ctx context.Context, pid int) error {
	path, err := PerfMapPath(pid)
	if err != nil {
		return err
	}
	before, err := os.Lstat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("perf map of jvm %d: %w", pid, err)
	}
	// The output is a message or nothing: what more there is, is read
	// (up to maxReply) and not kept.
	var out []byte
	err = execute(ctx, pid, "jcmd", []string{"Compiler.perfmap"}, func(r io.Reader) error {
		var err error
		if out, err = io.ReadAll(io.LimitReader(r, maxMessage)); err == nil {
			_, err = io.Copy(io.Discard, r)
		}
		return err
	})
	if err != nil {
		return err
	}
	if msg := strings.TrimSpace(string(out)); msg != "" {
		return fmt.Errorf("perf map of jvm %d: %s", pid, message(msg))
	}
	after, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("perf map of jvm %d: the jvm reported success, but: %w", pid, err)
	}
	if before != nil && sameVersion(before, after) {
		return fmt.Errorf("perf map of jvm %d: the jvm reported success, but %s is unchanged", pid, path)
	}
	return nil
}

// sameVersion reports whether two stats of a file show the same content:
// same inode, size and modification time.
func sameVersion(a, b os.FileInfo) bool {
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	if !ok1 || !ok2 {
		return false
	}
	return sa.Ino == sb.Ino && sa.Size == sb.Size && sa.Mtim == sb.Mtim && sa.Ctim == sb.Ctim
}
