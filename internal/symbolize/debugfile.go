package symbolize

import (
	"bytes"
	"debug/elf"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/targetfile"
)

// debugDir is where distributions install separate debug files. A variable
// so that tests can point it at a tree of their own.
var debugDir = "/usr/lib/debug"

// needsDebugFile reports whether ef lacks what a separate debug file would
// provide: the symbol table or the DWARF lines and functions.
func needsDebugFile(ef *elf.File) bool {
	return ef.Section(".symtab") == nil || !hasDWARF(ef)
}

func hasDWARF(ef *elf.File) bool {
	return (ef.Section(".debug_info") != nil || ef.Section(".zdebug_info") != nil) && hasDWARFLines(ef)
}

// openDebugFile finds the separate debug file of ef, a binary with build id
// buildID mapped at path by process pid (0 if unknown), the way gdb and perf
// do:
//
//  1. DEBUGDIR/.build-id/xx/yyyy.debug, by build id;
//  2. by the name in .gnu_debuglink, next to the binary, in its .debug/
//     subdirectory, then under DEBUGDIR/DIR/, accepted only if its CRC32
//     matches the one in .gnu_debuglink.
//
// Each name is tried under /proc/PID/root (the process's mount namespace)
// first, then as is. A debug file found by build id must have that build id.
// Candidates that are not regular files, or larger than a debug file is
// read, are counted in rec under the binary's path. The caller closes the
// file.
func openDebugFile(ef *elf.File, buildID string, pid int, path string, rec *limits.Recorder) (*elf.File, *os.File) {
	refused := func(name string, err error) {
		if targetfile.Refused(err) {
			rec.Add(limits.FileRefused, path, 1, fmt.Errorf("debug file of %s: %w", path, err))
		}
	}
	var roots []string
	if pid > 0 {
		roots = append(roots, fmt.Sprintf("/proc/%d/root", pid))
	}
	roots = append(roots, "")

	if len(buildID) > 2 && isHex(buildID) {
		rel := filepath.Join(debugDir, ".build-id", buildID[:2], buildID[2:]+".debug")
		for _, root := range roots {
			df, f, err := openELFFile(root + rel)
			if df == nil {
				refused(root+rel, err)
				continue
			}
			if buildIDOf(df) == buildID {
				return df, f
			}
			f.Close()
		}
	}

	name, crc, ok := debugLink(ef)
	if !ok || !strings.HasPrefix(path, "/") {
		return nil, nil
	}
	dir := filepath.Dir(path)
	for _, cand := range []string{
		filepath.Join(dir, name),
		filepath.Join(dir, ".debug", name),
		filepath.Join(debugDir, dir, name),
	} {
		if cand == path {
			continue // the binary itself, named in its own debuglink
		}
		for _, root := range roots {
			f, err := targetfile.Open(root+cand, true)
			if err != nil {
				refused(root+cand, err)
				continue
			}
			h := crc32.NewIEEE()
			if fi, err := f.Stat(); err != nil || fi.Size() > maxDebugFileBytes {
				if err == nil {
					rec.Add(limits.FileTooLarge, path, 1, limits.Errorf(limits.FileTooLarge, "debug file %s of %s: %d bytes, more than %d", cand, path, fi.Size(), int64(maxDebugFileBytes)))
				}
				f.Close()
				continue
			}
			if _, err := io.Copy(h, io.LimitReader(f, maxDebugFileBytes)); err != nil || h.Sum32() != crc {
				f.Close()
				continue
			}
			df, err := elf.NewFile(f)
			if err != nil {
				f.Close()
				continue
			}
			return df, f
		}
	}
	return nil, nil
}

// maxDebugFileBytes bounds the debug file whose CRC is checked, all of
// which is read: the largest of Debian's (LLVM's) are under 2 GiB.
const maxDebugFileBytes = 4 << 30

func openELFFile(name string) (*elf.File, *os.File, error) {
	f, err := targetfile.Open(name, true)
	if err != nil {
		return nil, nil, err
	}
	df, err := elf.NewFile(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return df, f, nil
}

// buildIDOf is buildID, safe on malformed files.
func buildIDOf(ef *elf.File) (id string) {
	defer func() {
		if recover() != nil {
			id = ""
		}
	}()
	return buildID(ef)
}

// debugLink returns the file name and CRC32 in the .gnu_debuglink section of
// ef: a NUL-terminated name, padded to 4 bytes, then the CRC32 of the debug
// file in the byte order of ef.
func debugLink(ef *elf.File) (name string, crc uint32, ok bool) {
	s := ef.Section(".gnu_debuglink")
	if s == nil {
		return "", 0, false
	}
	d, err := sectionData(s, maxNoteBytes)
	if err != nil {
		return "", 0, false
	}
	n := bytes.IndexByte(d, 0)
	if n <= 0 {
		return "", 0, false
	}
	off := (n + 1 + 3) &^ 3
	if off+4 > len(d) {
		return "", 0, false
	}
	name = string(d[:n])
	if strings.Contains(name, "/") {
		return "", 0, false
	}
	return name, ef.ByteOrder.Uint32(d[off:]), true
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
