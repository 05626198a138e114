package hotspot

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/targetfile"
)

// sigquitBit is SIGQUIT's bit in the signal masks of /proc/PID/status:
// signal n is bit n-1, and SIGQUIT is 3.
const sigquitBit = 1 << (3 - 1)

// status is what the attach mechanism needs from /proc/PID/status.
type status struct {
	// nspid is the process's pid in its own pid namespace: the number
	// HotSpot puts in the names of its socket, trigger and perf map.
	nspid int
	// nested is true when the process lives in a pid namespace below
	// ours, so its thread ids differ from the ones we see.
	nested bool
	// euid and egid are the effective ids as seen from our user
	// namespace: the owner HotSpot gives its socket.
	euid, egid int
	// catchesQuit is true when a handler is installed for SIGQUIT.
	catchesQuit bool
}

// maxStatus bounds a read of /proc/PID/status: the kernel writes some
// 1.5 KiB, the process's name among it escaped to at most 64 bytes.
const maxStatus = 64 << 10

// readStatus parses a /proc/PID/status or /proc/PID/task/TID/status file.
func readStatus(path string) (status, error) {
	b, err := targetfile.ReadProc(path, maxStatus)
	if err != nil {
		return status{}, err
	}
	var st status
	var haveNSpid, haveUid, haveGid, haveSigCgt bool
	for line := range bytes.Lines(b) {
		key, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		fields := strings.Fields(string(val))
		switch string(key) {
		case "NSpid":
			if len(fields) == 0 {
				continue
			}
			st.nspid, err = strconv.Atoi(fields[len(fields)-1])
			st.nested = len(fields) > 1
			haveNSpid = err == nil
		case "Uid", "Gid":
			// real, effective, saved, filesystem
			if len(fields) < 2 {
				continue
			}
			id, err := strconv.Atoi(fields[1])
			if err != nil {
				continue
			}
			if key[0] == 'U' {
				st.euid, haveUid = id, true
			} else {
				st.egid, haveGid = id, true
			}
		case "SigCgt":
			if len(fields) != 1 {
				continue
			}
			mask, err := strconv.ParseUint(fields[0], 16, 64)
			if err != nil {
				continue
			}
			st.catchesQuit = mask&sigquitBit != 0
			haveSigCgt = true
		}
	}
	if !haveNSpid || !haveUid || !haveGid || !haveSigCgt {
		return status{}, fmt.Errorf("%s: no NSpid, Uid, Gid or SigCgt", path)
	}
	return st, nil
}

// IsJVM reports whether process pid is a HotSpot JVM: whether it maps
// libjvm.so. OpenJ9 also ships a libjvm.so, a shim in front of libj9vm;
// it speaks another attach protocol and writes a javacore on SIGQUIT, so
// a process that maps a libj9vm library is not reported as one.
func IsJVM(pid int) (bool, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return false, fmt.Errorf("is %d a jvm: %w", pid, err)
	}
	defer f.Close()
	jvm := false
	// Read as a stream, with the bound of a maps read.
	lr := &io.LimitedReader{R: f, N: targetfile.MaxMapsBytes + 1}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		// address perms offset dev inode path; the path may hold spaces
		// and ends in " (deleted)" when the JDK was replaced on disk.
		line := sc.Text()
		i := strings.IndexByte(line, '/')
		if i < 0 {
			continue
		}
		name := filepath.Base(strings.TrimSuffix(line[i:], " (deleted)"))
		switch {
		case name == "libjvm.so":
			jvm = true
		case strings.HasPrefix(name, "libj9vm"):
			return false, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("is %d a jvm: %w", pid, err)
	}
	if lr.N == 0 {
		return false, fmt.Errorf("is %d a jvm: %w", pid, limits.Errorf(limits.FileTooLarge, "maps of more than %d bytes", targetfile.MaxMapsBytes))
	}
	return jvm, nil
}

// hostTids maps the thread ids that process pid sees in its own pid
// namespace to the ones we see, for the threads alive now; for a process
// that is not nested in a pid namespace below ours, they are the same.
func hostTids(pid int, nested bool) (map[int]int, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	m := make(map[int]int, len(ents))
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if !nested {
			m[tid] = tid
			continue
		}
		st, err := readStatus(filepath.Join(dir, e.Name(), "status"))
		if err != nil {
			continue // the thread has exited
		}
		m[st.nspid] = tid
	}
	return m, nil
}
