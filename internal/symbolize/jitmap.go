package symbolize

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// jitRecheckInterval rate-limits the stat of a perf-PID.map to see whether
// it grew.
const jitRecheckInterval = time.Second

// maxJITLine bounds one line of a perf map; longer lines are skipped.
const maxJITLine = 64 << 10

// jitMap holds the symbols of a process's perf map, /tmp/perf-PID.map: lines
// "START SIZE name", START and SIZE in hex (with or without 0x), as written
// by JIT compilers for perf (Node's --perf-basic-prof, perf-map-agent for
// the JVM, CPython's -X perf). The file only grows while the process runs:
// it is read incrementally, from where the previous read stopped.
type jitMap struct {
	names     []string // candidate paths, most specific first
	path      string   // the file found, "" before
	read      int64    // bytes of path parsed (up to the last full line)
	lastCheck time.Time
	syms      []jitSym // sorted by start, not overlapping
}

type jitSym struct {
	start, end uint64
	name       string
}

// newJITMap returns the perf map of pid, not read yet. The file is looked for
// in the process's mount namespace first, under its pid in its own pid
// namespace (a containerized JIT names the file after the pid it sees), then
// in ours.
func newJITMap(pid int) *jitMap {
	j := &jitMap{}
	if nspid := innermostPid(pid); nspid != 0 && nspid != pid {
		j.names = append(j.names, fmt.Sprintf("/proc/%d/root/tmp/perf-%d.map", pid, nspid))
	}
	j.names = append(j.names,
		fmt.Sprintf("/proc/%d/root/tmp/perf-%d.map", pid, pid),
		fmt.Sprintf("/tmp/perf-%d.map", pid))
	return j
}

// innermostPid returns the pid of pid in its own pid namespace, the last
// NSpid field of /proc/PID/status, or 0.
func innermostPid(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0
			}
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	return 0
}

// lookup returns the JIT symbol holding pc, re-reading the file first if it
// grew, at most once per jitRecheckInterval.
func (j *jitMap) lookup(pc uint64) (Frame, bool) {
	if now := time.Now(); now.Sub(j.lastCheck) >= jitRecheckInterval {
		j.lastCheck = now
		j.update() // best effort: an unreadable map keeps what was read
	}
	i, ok := slices.BinarySearchFunc(j.syms, pc, func(s jitSym, pc uint64) int {
		switch {
		case s.end <= pc:
			return -1
		case s.start > pc:
			return 1
		}
		return 0
	})
	if !ok {
		return Frame{}, false
	}
	return Frame{Function: j.syms[i].name, SystemName: j.syms[i].name}, true
}

// update reads what was appended to the map since the last read. A file that
// shrank was rewritten (a new process with the same pid): it is read again
// from the start.
func (j *jitMap) update() error {
	names := j.names
	if j.path != "" {
		names = []string{j.path}
	}
	for _, name := range names {
		fi, err := os.Stat(name)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if name != j.path || fi.Size() < j.read {
			j.path, j.read, j.syms = name, 0, nil
		}
		if fi.Size() == j.read {
			return nil
		}
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := j.parse(io.NewSectionReader(f, j.read, fi.Size()-j.read))
		j.read += n
		return err
	}
	if j.path != "" {
		// Gone: the process exited, or its map was removed. Keep the
		// symbols for the samples still to be resolved.
		return nil
	}
	return os.ErrNotExist
}

// parse adds the symbols of the complete lines of r and returns the bytes
// they take; a last line without its newline is left for the next read.
func (j *jitMap) parse(r io.Reader) (int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var n int64
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// Skip the overlong line, through its newline.
			n += int64(len(line))
			for err == bufio.ErrBufferFull {
				line, err = br.ReadSlice('\n')
				n += int64(len(line))
			}
			if err != nil {
				return n - int64(len(line)), nil
			}
			continue
		}
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return n, err // an incomplete last line waits
		}
		n += int64(len(line))
		if s, ok := parseJITLine(line); ok {
			j.add(s)
		}
	}
}

// parseJITLine parses "START SIZE name\n". Malformed lines are skipped: the
// file is written by another program while we read it.
func parseJITLine(line []byte) (jitSym, bool) {
	line = bytes.TrimRight(line, "\r\n")
	startB, rest, ok1 := bytes.Cut(line, []byte{' '})
	sizeB, name, ok2 := bytes.Cut(rest, []byte{' '})
	if !ok1 || !ok2 || len(name) == 0 {
		return jitSym{}, false
	}
	start, err1 := strconv.ParseUint(strings.TrimPrefix(string(startB), "0x"), 16, 64)
	size, err2 := strconv.ParseUint(strings.TrimPrefix(string(sizeB), "0x"), 16, 64)
	if err1 != nil || err2 != nil || size == 0 || start+size < start {
		return jitSym{}, false
	}
	return jitSym{start: start, end: start + size, name: string(name)}, true
}

// add inserts s; where it overlaps symbols added before, s wins: a JIT that
// reuses memory for new code writes the new code's line later.
func (j *jitMap) add(s jitSym) {
	// Appending in address order is the common case.
	if n := len(j.syms); n == 0 || j.syms[n-1].end <= s.start {
		j.syms = append(j.syms, s)
		return
	}
	// i: the first symbol that ends after s starts; k: the first that starts
	// at or after s ends.
	i, _ := slices.BinarySearchFunc(j.syms, s.start, func(e jitSym, t uint64) int {
		if e.end <= t {
			return -1
		}
		return 1
	})
	k, _ := slices.BinarySearchFunc(j.syms[i:], s.end, func(e jitSym, t uint64) int {
		if e.start < t {
			return -1
		}
		return 1
	})
	k += i
	repl := make([]jitSym, 0, 3)
	if i < k && j.syms[i].start < s.start {
		repl = append(repl, jitSym{j.syms[i].start, s.start, j.syms[i].name})
	}
	repl = append(repl, s)
	if i < k && j.syms[k-1].end > s.end {
		repl = append(repl, jitSym{s.end, j.syms[k-1].end, j.syms[k-1].name})
	}
	j.syms = slices.Replace(j.syms, i, k, repl...)
}

// isAnonymous reports whether m maps no file: anonymous memory, where JIT
// compilers put their code, named or not ("[anon:…]").
func isAnonymous(m *Mapping) bool {
	return m.Path == "" || strings.HasPrefix(m.Path, "[anon:")
}
