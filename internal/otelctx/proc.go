package otelctx

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/targetfile"
)

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end uint64
	perms      string
	offset     uint64
	inode      uint64
	name       string // path or pseudo-name, " (deleted)" kept
}

// readMaps parses /proc/PID/maps. A process with more of it than
// targetfile.MaxMapsBytes is not read: the error wraps a *limits.Error
// (FileTooLarge) for the caller to count.
func readMaps(pid int) ([]mapping, error) {
	data, err := targetfile.ReadProc(fmt.Sprintf("/proc/%d/maps", pid), targetfile.MaxMapsBytes)
	if errors.Is(err, targetfile.ErrTooLarge) {
		err = fmt.Errorf("%w: %w", limits.Errorf(limits.FileTooLarge, "maps of more than %d bytes", targetfile.MaxMapsBytes), err)
	}
	if err != nil {
		return nil, fmt.Errorf("read maps of pid %d: %w", pid, err)
	}
	return parseMaps(data)
}

// parseMaps parses the text of /proc/PID/maps. The name is the rest of the
// line after the inode, so paths with spaces survive.
func parseMaps(data []byte) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		var m mapping
		fields := strings.Fields(line)
		if len(fields) < 5 {
			return nil, fmt.Errorf("maps line %d: %d fields in %q", n, len(fields), line)
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("maps line %d: bad range %q", n, fields[0])
		}
		var err1, err2, err3, err4 error
		m.start, err1 = strconv.ParseUint(lo, 16, 64)
		m.end, err2 = strconv.ParseUint(hi, 16, 64)
		m.offset, err3 = strconv.ParseUint(fields[2], 16, 64)
		m.inode, err4 = strconv.ParseUint(fields[4], 10, 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("maps line %d: %w", n, err)
		}
		m.perms = fields[1]
		if len(fields) > 5 {
			// The name starts after the inode and its padding.
			i := strings.Index(line, fields[4]) + len(fields[4])
			m.name = strings.TrimLeft(line[i:], " \t")
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scan maps: %w", err)
	}
	return out, nil
}

// memory reads another process's memory through /proc/PID/mem. Reads of
// unmapped addresses fail (EIO) rather than crash, which is what a reader of
// racy, foreign memory needs.
type memory struct {
	f *os.File
}

func openMemory(pid int) (*memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, fmt.Errorf("open memory of pid %d: %w", pid, err)
	}
	return &memory{f: f}, nil
}

func (m *memory) Close() error { return m.f.Close() }

// ReadAt reads len(p) bytes at address addr; a short read is an error.
func (m *memory) ReadAt(p []byte, addr int64) (int, error) {
	n, err := m.f.ReadAt(p, addr)
	if n == len(p) {
		return n, nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, fmt.Errorf("read %d bytes at %#x: %w", len(p), uint64(addr), err)
}

// readU64 reads a native-endian (little, on x86-64) 64-bit word.
func readU64(r io.ReaderAt, addr uint64) (uint64, error) {
	var b [8]byte
	if _, err := r.ReadAt(b[:], int64(addr)); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}
