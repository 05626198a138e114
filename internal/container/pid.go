package container

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"syscall"
)

// maxProcFile bounds every read of a /proc file: a status or cgroup file is
// a few KiB, and a read must not grow with whatever a target makes of its
// cgroup paths.
const maxProcFile = 64 << 10

// ReadNSpid returns the ids of process pid in each pid namespace, from that
// of the /proc mount down to the process's own: the "NSpid:" line of
// /proc/PID/status, or, on kernels without it (< 4.1), the one id. The error
// wraps fs.ErrNotExist when the process is gone.
func ReadNSpid(pid int) ([]int, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("read NSpid: invalid pid %d", pid)
	}
	_, ids, err := readStatus(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("read NSpid of pid %d: %w", pid, err)
	}
	return ids, nil
}

// ReadThread reads /proc/PID/task/TID/status once for the thread's name
// and its ids in each pid namespace, as ReadNSpid. The name is the thread's
// comm, unescaped. The error wraps fs.ErrNotExist when the thread is gone.
func ReadThread(pid, tid int) (name string, nspid []int, err error) {
	if pid <= 0 || tid <= 0 {
		return "", nil, fmt.Errorf("read thread: invalid pid %d or tid %d", pid, tid)
	}
	name, nspid, err = readStatus(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	if err != nil {
		return "", nil, fmt.Errorf("read thread %d of pid %d: %w", tid, pid, err)
	}
	return name, nspid, nil
}

// ThreadIDs maps the tids of process pid as the process sees them (the
// innermost of each thread's NSpid) to its tids in /proc (the outermost),
// for the caller to find the thread a span's thread.id names. It reads at
// most max entries of /proc/PID/task (max must be positive); threads that
// end during the scan are left out. The error wraps fs.ErrNotExist when the
// process is gone.
func ThreadIDs(pid int, max int) (map[int]int, error) {
	if pid <= 0 || max <= 0 {
		return nil, fmt.Errorf("list threads: invalid pid %d or limit %d", pid, max)
	}
	dir := fmt.Sprintf("/proc/%d/task", pid)
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("list threads of pid %d: %w", pid, err)
	}
	names, err := f.Readdirnames(max)
	f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("list threads of pid %d: %w", pid, err)
	}
	m := make(map[int]int, len(names))
	for _, n := range names {
		tid, err := strconv.Atoi(n)
		if err != nil || tid <= 0 {
			continue
		}
		_, ids, err := ReadThread(pid, tid)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if inner := ids[len(ids)-1]; m[inner] == 0 {
			m[inner] = tid
		}
	}
	return m, nil
}

// readStatus reads a /proc status file for its Name and NSpid (or Pid)
// lines.
func readStatus(path string) (name string, nspid []int, err error) {
	b, err := readProcFile(path)
	if err != nil {
		return "", nil, err
	}
	var pidLine []byte
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		key, val, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		switch string(key) {
		case "Name":
			name = unescapeComm(bytes.TrimLeft(val, " \t"))
		case "Pid":
			pidLine = val
		case "NSpid":
			for _, f := range bytes.Fields(val) {
				id, err := strconv.Atoi(string(f))
				if err != nil || id <= 0 {
					return "", nil, fmt.Errorf("%s: bad NSpid %q", path, val)
				}
				nspid = append(nspid, id)
			}
		}
	}
	if len(nspid) == 0 {
		// No NSpid line before Linux 4.1: the one id there is.
		id, err := strconv.Atoi(string(bytes.TrimSpace(pidLine)))
		if err != nil || id <= 0 {
			return "", nil, fmt.Errorf("%s: no NSpid or Pid line", path)
		}
		nspid = []int{id}
	}
	return name, nspid, nil
}

// unescapeComm undoes the kernel's escaping of a task's comm in a status
// file's Name line, where a newline reads as `\n` and a backslash as `\\`
// (fs/proc/array.c, proc_task_name).
func unescapeComm(b []byte) string {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b)
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+1 < len(b) {
			switch b[i+1] {
			case 'n':
				out = append(out, '\n')
				i++
				continue
			case '\\':
				out = append(out, '\\')
				i++
				continue
			}
		}
		out = append(out, b[i])
	}
	return string(out)
}

// readProcFile reads at most maxProcFile bytes of a /proc file. A process
// that ends between the open and the read makes the read fail with ESRCH;
// that error, like the open's ENOENT, wraps fs.ErrNotExist.
func readProcFile(path string) ([]byte, error) {
	// O_NOFOLLOW: /proc/PID/status and cgroup are never symlinks, so a
	// symlink there is not the file meant.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxProcFile))
	if errors.Is(err, syscall.ESRCH) {
		return nil, fmt.Errorf("%w: %w", fs.ErrNotExist, err)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}
