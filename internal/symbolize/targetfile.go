package symbolize

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// errNotRegular refuses a file a target named that is not a regular file:
// a FIFO would make the reader wait for a writer, a device (/dev/zero)
// would never end.
var errNotRegular = errors.New("not a regular file")

// openTargetFile opens for reading a file that a target names (its perf
// map, the debug file its binary links to), so that the target cannot make
// the collector wait or read what it should not:
//
//   - with O_NONBLOCK, so that opening a FIFO does not wait for a writer;
//   - refused (errNotRegular) unless it is a regular file, by fstat of
//     what was opened;
//   - under /proc/PID/root/, resolved inside that root (openat2
//     RESOLVE_IN_ROOT, from Linux 5.6), where an absolute symbolic link
//     would otherwise resolve in the collector's root;
//   - unless follow, never through a symbolic link as its last component.
func openTargetFile(name string, follow bool) (*os.File, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	f, err := openInRoot(name, flags)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (%v)", errNotRegular, fi.Mode().Type())}
	}
	return f, nil
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
				return os.NewFile(uintptr(fd), name), nil
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
	return os.NewFile(uintptr(fd), name), nil
}
