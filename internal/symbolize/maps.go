package symbolize

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Mapping is one executable mapping of a process (from /proc/PID/maps).
type Mapping struct {
	Start, Limit, Offset uint64 // [Start, Limit) in the process, file offset of Start
	Path                 string // as shown in /proc/PID/maps ("[vdso]"), without the " (deleted)" suffix: see Deleted
	Deleted              bool
	BuildID              string // hex GNU build id from .note.gnu.build-id, else Go build id (from .note.go.buildid), "" if none
	Dev, Inode           uint64 // Dev encoded like st_dev of stat(2)
}

// String returns the mapping as /proc/PID/maps shows it (without permissions).
func (m *Mapping) String() string {
	s := fmt.Sprintf("%x-%x %x %s", m.Start, m.Limit, m.Offset, m.Path)
	if m.Deleted {
		s += deletedSuffix
	}
	return s
}

const deletedSuffix = " (deleted)"

// parseMaps parses the text of /proc/PID/maps and returns its executable
// mappings, sorted by Start. A line looks like
//
//	7f1c3c600000-7f1c3c628000 r-xp 00028000 fe:01 1049122    /usr/lib/x86_64-linux-gnu/libc.so.6
//
// as written by show_map_vma() in fs/proc/task_mmu.c.
func parseMaps(data []byte) ([]*Mapping, error) {
	var maps []*Mapping
	for lineNo := 1; len(data) > 0; lineNo++ {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		if len(line) == 0 {
			continue
		}
		m, exec, err := parseMapsLine(string(line))
		if err != nil {
			return nil, fmt.Errorf("maps line %d %q: %w", lineNo, line, err)
		}
		if exec {
			maps = append(maps, m)
		}
	}
	slices.SortFunc(maps, func(a, b *Mapping) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	return maps, nil
}

// parseMapsLine parses one line of /proc/PID/maps; exec reports whether the
// mapping is executable.
func parseMapsLine(line string) (m *Mapping, exec bool, err error) {
	// Five space-separated fields, then the path padded with spaces. The path
	// itself may contain spaces.
	var f [5]string
	rest := line
	for i := range f {
		rest = strings.TrimLeft(rest, " ")
		var ok bool
		f[i], rest, ok = strings.Cut(rest, " ")
		if !ok && i < len(f)-1 {
			return nil, false, fmt.Errorf("want at least 5 fields")
		}
	}
	path := strings.TrimLeft(rest, " ")

	startS, limitS, ok := strings.Cut(f[0], "-")
	if !ok {
		return nil, false, fmt.Errorf("bad address range %q", f[0])
	}
	m = new(Mapping)
	if m.Start, err = strconv.ParseUint(startS, 16, 64); err != nil {
		return nil, false, fmt.Errorf("bad start address: %w", err)
	}
	if m.Limit, err = strconv.ParseUint(limitS, 16, 64); err != nil {
		return nil, false, fmt.Errorf("bad end address: %w", err)
	}
	if m.Limit < m.Start {
		return nil, false, fmt.Errorf("end address before start")
	}
	if len(f[1]) != 4 {
		return nil, false, fmt.Errorf("bad permissions %q", f[1])
	}
	exec = f[1][2] == 'x'
	if m.Offset, err = strconv.ParseUint(f[2], 16, 64); err != nil {
		return nil, false, fmt.Errorf("bad offset: %w", err)
	}
	majorS, minorS, ok := strings.Cut(f[3], ":")
	if !ok {
		return nil, false, fmt.Errorf("bad device %q", f[3])
	}
	major, err1 := strconv.ParseUint(majorS, 16, 32)
	minor, err2 := strconv.ParseUint(minorS, 16, 32)
	if err1 != nil || err2 != nil {
		return nil, false, fmt.Errorf("bad device %q", f[3])
	}
	m.Dev = mkdev(major, minor)
	if m.Inode, err = strconv.ParseUint(f[4], 10, 64); err != nil {
		return nil, false, fmt.Errorf("bad inode: %w", err)
	}
	if p, ok := strings.CutSuffix(path, deletedSuffix); ok {
		path, m.Deleted = p, true
	}
	m.Path = path
	return m, exec, nil
}

// mkdev encodes a device number the way glibc's makedev does, so that it
// compares equal to st_dev from stat(2).
func mkdev(major, minor uint64) uint64 {
	return (minor & 0xff) | (major&0xfff)<<8 | (minor&^0xff)<<12 | (major&^0xfff)<<32
}
