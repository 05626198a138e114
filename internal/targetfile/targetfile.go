// Package targetfile opens the files a target process names (its perf
// map, the debug file its binary links to, the files it maps, its
// /proc entries) so that the target cannot make the collector wait,
// read without end, or read outside the target's own root.
//
// A target controls what these paths are: it can put a FIFO where its
// perf map is expected (opening it waits for a writer), link its debug
// file to /dev/zero (reading never ends), or make an absolute symbolic
// link that, resolved in the collector's root, names a collector file.
// Open and ReadFile refuse all three; they are not for the collector's
// own files.
package targetfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotRegular refuses a file a target named that is not a regular
// file: a FIFO would make the reader wait for a writer, a device
// (/dev/zero) would never end.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is returned by ReadFile for a file longer than its bound.
var ErrTooLarge = errors.New("file larger than its bound")

// Refused reports whether err is Open's refusal of a file that a target
// may have put there to trap the collector: not a regular file, or a
// symbolic link where none is followed (ELOOP under O_NOFOLLOW).
func Refused(err error) bool {
	return errors.Is(err, ErrNotRegular) || errors.Is(err, unix.ELOOP)
}

// MaxMapsBytes bounds a read of /proc/PID/maps. A process has at most
// vm.max_map_count mappings (65530 by default; 262144 where Elasticsearch
// or a JVM with many mapped files asked for more), and its lines are
// some 80 bytes plus the mapped path: 256 bytes a line for 262144
// mappings is 64 MiB, a hundred times a large real process. Past it the
// paths are the target's making (a path is up to 4 KiB, each newline in
// it shown as 4 bytes), and the process is left unread.
const MaxMapsBytes = 64 << 20

// Open opens for reading a file that a target names:
//
//   - with O_NONBLOCK, so that opening a FIFO does not wait for a writer;
//   - refused (ErrNotRegular) unless it is a regular file, by fstat of
//     what was opened;
//   - under /proc/PID/root/, resolved inside that root (openat2
//     RESOLVE_IN_ROOT, from Linux 5.6), where an absolute symbolic link
//     would otherwise resolve in the collector's root;
//   - unless follow, never through a symbolic link as its last component.
func Open(name string, follow bool) (*os.File, error) {
	return open(name, follow, true)
}

func open(name string, follow, regular bool) (*os.File, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	f, err := openInRoot(name, flags)
	if err != nil {
		return nil, err
	}
	if !regular {
		return f, nil
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (%v)", ErrNotRegular, fi.Mode().Type())}
	}
	return f, nil
}

// ReadFile reads a file a target names, opened as by Open, up to max
// bytes: a longer one is an error that wraps ErrTooLarge, and nothing
// of it is returned.
func ReadFile(name string, follow bool, max int64) ([]byte, error) {
	f, err := Open(name, follow)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBounded(f, name, max)
}

// ReadProc reads a /proc file of a target (/proc/PID/maps, status,
// cgroup), up to max bytes. These are not regular files to fstat (their
// size reads 0), and their length is the target's to choose: a process
// can map a million regions, each line of maps as long as a path.
func ReadProc(name string, max int64) ([]byte, error) {
	f, err := open(name, false, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBounded(f, name, max)
}

func readBounded(f *os.File, name string, max int64) ([]byte, error) {
	// A regular file states its size: a sparse one is refused before a
	// byte is read.
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > max {
		return nil, &os.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: %d bytes, bound %d", ErrTooLarge, fi.Size(), max)}
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: name, Err: err}
	}
	if int64(len(b)) > max {
		return nil, &os.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max)}
	}
	return b, nil
}

func openInRoot(name string, flags int) (*os.File, error) {
	if rest, ok := strings.CutPrefix(name, "/proc/"); ok {
		if pid, rel, ok := strings.Cut(rest, "/root/"); ok {
			root, err := unix.Open("/proc/"+pid+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, &os.PathError{Op: "open", Path: name, Err: err}
			}
			defer unix.Close(root)
			fd, err := unix.Openat2(root, rel, &unix.OpenHow{
				Flags:   uint64(flags),
				Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
			})
			if err == nil {
				return newFile(fd, name)
			}
			if err != unix.ENOSYS {
				return nil, &os.PathError{Op: "open", Path: name, Err: err}
			}
			// Before Linux 5.6: as any other path.
		}
	}
	fd, err := unix.Open(name, flags, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return newFile(fd, name)
}

// newFile makes a file of fd, blocking again: os.NewFile hands a
// non-blocking one to the Go poller, and epoll polls a FUSE file by asking
// its server, which a target's server may never answer; the thread that
// polls (the poller's own among them) would wait with it. O_NONBLOCK was
// for the open: a FIFO is refused before it is read.
func newFile(fd int, name string) (*os.File, error) {
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}
