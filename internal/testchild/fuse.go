package testchild

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// StalledFile mounts a FUSE file system (served by the test process
// through /dev/fuse) holding one regular file, of size bytes, whose reads
// and polls do not return until the test ends: a target's file on a file system
// that stops answering, as a FUSE or network one can. It returns the
// file's path and a channel that receives once each read arrives. It
// ends the test through Unavailable where FUSE cannot be mounted.
func StalledFile(tb testing.TB, size int64) (path string, reads <-chan struct{}) {
	tb.Helper()
	// Blocking, and read by a goroutine of its own: a server in the Go
	// poller would wait on the poller, which may itself be polling a
	// file of this file system.
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		Unavailable(tb, "no FUSE: %v", err)
	}
	dir := tb.TempDir()
	opts := "fd=" + strconv.Itoa(fd) + ",rootmode=40000,user_id=" + strconv.Itoa(unix.Getuid()) + ",group_id=" + strconv.Itoa(unix.Getgid())
	if err := unix.Mount("perfprof-stalled", dir, "fuse", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		Unavailable(tb, "cannot mount FUSE: %v", err)
	}
	ch := make(chan struct{}, 16)
	done := make(chan struct{})
	go serveStalled(fd, size, ch, done)
	tb.Cleanup(func() {
		// A forced unmount aborts the connection: the stalled requests
		// fail (ENOTCONN), and the server's read of the device ends.
		unix.Unmount(dir, unix.MNT_FORCE)
		<-done
		unix.Close(fd)
		unix.Unmount(dir, unix.MNT_DETACH)
	})
	return filepath.Join(dir, "file"), ch
}

// FUSE protocol 7 opcodes and sizes (include/uapi/linux/fuse.h).
const (
	fuseLookup      = 1
	fuseForget      = 2
	fuseGetattr     = 3
	fuseOpen        = 14
	fuseRead        = 15
	fuseRelease     = 18
	fuseFlush       = 25
	fuseInit        = 26
	fuseInterrupt   = 36
	fusePoll        = 40
	fuseBatchForget = 42

	fuseInHeader    = 40
	fuseAttrSize    = 88
	fuseDirectIO    = 1 // FOPEN_DIRECT_IO: every read reaches the server
	fuseRootID      = 1
	fuseFileID      = 2
	fuseMaxWrite    = 128 << 10
	fuseReadBufSize = fuseMaxWrite + 4096
)

func serveStalled(fd int, size int64, reads chan<- struct{}, done chan<- struct{}) {
	defer close(done)
	le := binary.LittleEndian
	buf := make([]byte, fuseReadBufSize)
	attr := func(id uint64) []byte {
		a := make([]byte, fuseAttrSize)
		le.PutUint64(a[0:], id) // ino
		mode, n := uint32(unix.S_IFDIR|0o755), uint64(0)
		if id == fuseFileID {
			mode, n = unix.S_IFREG|0o644, uint64(size)
		}
		le.PutUint64(a[8:], n)     // size
		le.PutUint32(a[60:], mode) // mode
		le.PutUint32(a[64:], 1)    // nlink
		le.PutUint32(a[72:], uint32(unix.Getgid()))
		le.PutUint32(a[68:], uint32(unix.Getuid()))
		le.PutUint32(a[80:], 4096) // blksize
		return a
	}
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOENT) {
			continue // an interrupted request
		}
		if err != nil || n < fuseInHeader {
			return // the device was closed
		}
		opcode, unique, node := le.Uint32(buf[4:]), le.Uint64(buf[8:]), le.Uint64(buf[16:])
		body := buf[fuseInHeader:n]
		var out []byte
		errno := int32(0)
		switch opcode {
		case fuseInit:
			out = make([]byte, 64)
			le.PutUint32(out[0:], 7)                   // major
			le.PutUint32(out[4:], 31)                  // minor
			le.PutUint32(out[8:], le.Uint32(body[8:])) // max_readahead
			le.PutUint16(out[16:], 16)                 // max_background
			le.PutUint16(out[18:], 12)                 // congestion_threshold
			le.PutUint32(out[20:], fuseMaxWrite)       // max_write
			le.PutUint32(out[24:], 1)                  // time_gran
		case fuseLookup:
			if node != fuseRootID || string(bytes.TrimRight(body, "\x00")) != "file" {
				errno = -int32(unix.ENOENT)
				break
			}
			out = make([]byte, 40, 40+fuseAttrSize)
			le.PutUint64(out[0:], fuseFileID) // nodeid
			out = append(out, attr(fuseFileID)...)
		case fuseGetattr:
			out = append(make([]byte, 16), attr(node)...)
		case fuseOpen:
			out = make([]byte, 16)
			le.PutUint32(out[8:], fuseDirectIO)
		case fusePoll:
			continue // never answered
		case fuseRead:
			select {
			case reads <- struct{}{}:
			default:
			}
			continue // never answered
		case fuseRelease, fuseFlush:
		case fuseForget, fuseBatchForget, fuseInterrupt:
			continue // no reply
		default:
			errno = -int32(unix.ENOSYS)
		}
		hdr := make([]byte, 16, 16+len(out))
		le.PutUint32(hdr[0:], uint32(16+len(out)))
		le.PutUint32(hdr[4:], uint32(errno))
		le.PutUint64(hdr[8:], unique)
		if _, err := unix.Write(fd, append(hdr, out...)); err != nil && !errors.Is(err, unix.ENOENT) {
			return
		}
	}
}
