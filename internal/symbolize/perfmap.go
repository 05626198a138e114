package symbolize

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/targetfile"
)

// Gen is a generation of a perf map: it grows by one each time a line is
// read that changes the name of addresses named before (a JIT reused the
// memory of freed code). A sample taken while the map was at generation g
// is named by the map as it stood at g, even when it is named later.
type Gen uint32

// Latest names addresses by the newest lines read.
const Latest Gen = math.MaxUint32

// perfMapMissInterval rate-limits the search for a perf map that does not
// exist: most processes have none.
const perfMapMissInterval = time.Second

// maxJITLine bounds one line of a perf map; longer lines are skipped.
const maxJITLine = 64 << 10

// maxPerfMapBytes bounds the bytes of a perf map read from its start (a
// map written anew is read anew), and maxPerfMapLines the lines taken from
// it and the symbols a PerfMap keeps. The file is the target's to write:
// it could be a sparse TiB, or millions of one-byte names. A JIT appends a
// line for each piece of code it compiles and never removes one: the maps
// of large Node and JVM services reach a few hundred thousand lines of
// ~100 bytes, some 50 MB; the bounds leave ten times that. A symbol takes
// 48 bytes and its name, so a map at the bounds holds ~450 MB. Past them,
// the lines read so far keep naming their code, later code stays unnamed,
// and Update reads no further until the file is written anew; Limits
// counts FileTooLarge or PerfMapSymbols once for the process.
const (
	maxPerfMapBytes = 256 << 20
	maxPerfMapLines = 4 << 20
)

// maxJITHistory bounds the replaced names a PerfMap keeps for samples taken
// before their address was reused; the oldest go first.
const maxJITHistory = 1 << 16

// tailBytes of a perf map before the read offset are kept to tell an append
// from a rewrite of the whole file.
const tailBytes = 64

// A PerfMap is the perf map of a process, /tmp/perf-PID.map: lines "START
// SIZE name", START and SIZE in hex (with or without 0x), as written by JIT
// compilers for perf (Node's --perf-basic-prof, the JVM's Compiler.perfmap,
// CPython's -X perf). A JIT appends a line for each piece of code it
// compiles; a JVM asked for a map writes the whole file anew. Code freed by
// a garbage collector is not removed from the file: its memory is reused for
// new code, whose line comes later and overlaps the old one. So the newest
// line for an address names it from then on, and an address is named as
// the map stood when it was sampled (see [Gen]).
//
// Update reads what was written since it last ran; Lookup names an
// address. Its methods may be called from any goroutine: the owner keeps
// it current while stacks are named elsewhere.
type PerfMap struct {
	mu       sync.RWMutex
	pid      int
	names    []string // candidate paths, most specific first; see candidates
	path     string   // the file found, "" before
	read     int64    // bytes of path parsed (up to the last full line)
	ino      uint64   // identity of path when it was last read
	modTime  time.Time
	tail     []byte    // the bytes of path just before read
	lastMiss time.Time // when no candidate path existed
	gen      Gen
	syms     []jitSym // newest names, sorted by start, not overlapping
	// hist holds names replaced by newer lines, sorted by start, for
	// samples taken before the replacement. Pieces of it overlap.
	hist       []jitSym
	histSorted int // hist[:histSorted] is sorted
	histMaxLen uint64

	// lines counts the lines taken from the file since it was last read
	// from its start. maxBytes and maxLines are the bounds, 0 for
	// maxPerfMapBytes and maxPerfMapLines (tests lower them); limits
	// counts a bound reached, once for each kind (reached). lines and
	// reached change with updating held.
	lines    int
	maxBytes int64
	maxLines int
	limits   *limits.Recorder
	reached  [limits.NumKinds]bool

	counts PerfMapStats

	// updating serializes Update, which reads the file without mu held:
	// a read of a target's file can take long (a FUSE or network file
	// system), and lookups, which need mu, must not wait on it. path,
	// read and ino change under both.
	updating sync.Mutex
	rereads  uint64 // calls of Reread: a read that raced one is not taken as current
}

type jitSym struct {
	start, end uint64
	name       string
	// from is the generation the name holds from; until the one it was
	// replaced at (Latest while it is current).
	from, until Gen
}

// PerfMapStats are counters of a PerfMap.
type PerfMapStats struct {
	Lines    int64 // lines read
	Skipped  int64 // malformed or overlong lines
	Replaced int64 // lines that renamed addresses named before (generations)
	Rewrites int64 // times the file was found written anew, and read again from its start
	// HistoryDropped counts replaced names forgotten past maxJITHistory:
	// a sample older than them takes the name that followed.
	HistoryDropped int64
}

// JITNaming says how Lookup named an address of JIT code.
type JITNaming uint8

const (
	NotJIT     JITNaming = iota // code in a file
	JITUnnamed                  // no line of the perf map covers it
	JITNewest                   // by the newest line
	// JITOlder: by a line replaced since the sample; the newest line
	// would have named it wrongly.
	JITOlder
	// JITLater: by a line read after the sample (the code was compiled
	// just before it).
	JITLater
)

// NewPerfMap returns the perf map of pid, not read yet. The file is looked
// for in the process's mount namespace first, under its pid in its own pid
// namespace (a containerized JIT names the file after the pid it sees),
// then in ours. rec (which may be nil) counts the bounds the map reaches.
func NewPerfMap(pid int, rec *limits.Recorder) *PerfMap { return &PerfMap{pid: pid, limits: rec} }

// candidates returns the paths the map of m.pid may have, most specific
// first.
func (m *PerfMap) candidates() []string {
	if m.names == nil {
		if nspid := innermostPid(m.pid); nspid != 0 && nspid != m.pid {
			m.names = append(m.names, fmt.Sprintf("/proc/%d/root/tmp/perf-%d.map", m.pid, nspid))
		}
		m.names = append(m.names,
			fmt.Sprintf("/proc/%d/root/tmp/perf-%d.map", m.pid, m.pid),
			fmt.Sprintf("/tmp/perf-%d.map", m.pid))
	}
	return m.names
}

// newPerfMapAt returns a perf map read from path, for tests.
func newPerfMapAt(path string) *PerfMap { return &PerfMap{names: []string{path}} }

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

// Gen returns the generation of what was read.
func (m *PerfMap) Gen() Gen {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.gen
}

// Found reports whether the file was found.
func (m *PerfMap) Found() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.path != ""
}

// Stats returns the counters.
func (m *PerfMap) Stats() PerfMapStats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.counts
}

// Reread makes the next Update read the file from its start: the caller
// had it written anew (a JVM's Compiler.perfmap). A map looked for in
// vain just before is looked for again at once: the caller knows it is
// there now.
func (m *PerfMap) Reread() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tail = nil
	m.modTime = time.Time{}
	m.lastMiss = time.Time{}
	m.rereads++
}

// Update reads what was written to the map since the last Update and
// returns the generation reached. A file that shrank, was replaced, or
// whose bytes before the read offset changed was written anew: it is read
// again from its start, its lines taken as newer than what was read. A map
// that is gone keeps what was read, for the samples still to be named. The
// error wraps os.ErrNotExist while there is no map (looked for at most once
// a second).
func (m *PerfMap) Update() (Gen, error) {
	m.updating.Lock()
	defer m.updating.Unlock()
	err := m.update()
	return m.Gen(), err
}

// TryUpdate is Update, unless another Update is under way: then it
// returns false at once rather than wait for a read that may be slow
// (the other Update brings the map current).
func (m *PerfMap) TryUpdate() bool {
	if !m.updating.TryLock() {
		return false
	}
	defer m.updating.Unlock()
	_ = m.update()
	return true
}

// perfMapChunk is what Update reads of a map before it parses it, with
// mu held.
const perfMapChunk = 1 << 20

// update is Update with updating held: the file is opened and read
// without mu, each chunk parsed with it.
func (m *PerfMap) update() error {
	m.mu.RLock()
	lastMiss, modTime, tail, rereads := m.lastMiss, m.modTime, m.tail, m.rereads
	m.mu.RUnlock()
	var names []string
	if m.path != "" {
		names = []string{m.path}
	} else if time.Since(lastMiss) < perfMapMissInterval {
		return os.ErrNotExist
	} else {
		names = m.candidates()
	}
	for _, name := range names {
		// The file is the target's to make: not a link (absolute ones
		// resolve in our root through /proc/PID/root, and would have us
		// name its code after a file of ours), not a FIFO.
		f, err := targetfile.Open(name, false)
		if err != nil {
			if targetfile.Refused(err) {
				m.reach(limits.FileRefused, "perf map %s: %v", name, err)
			}
			continue
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		if name == m.path && fi.Size() == m.read && fi.ModTime().Equal(modTime) && ino == m.ino {
			return nil
		}
		anew := name != m.path || ino != m.ino || fi.Size() < m.read || !sameTail(f, m.read, tail)
		size := fi.Size()
		if maxBytes := cmp.Or(m.maxBytes, maxPerfMapBytes); size > maxBytes {
			size = maxBytes
			m.reach(limits.FileTooLarge, "perf map %s: %d bytes, read up to %d", name, fi.Size(), maxBytes)
		}
		err = m.readChunks(f, name, ino, anew, size)
		tail = readTail(f, m.read)
		m.mu.Lock()
		if m.rereads == rereads {
			m.modTime, m.tail = fi.ModTime(), tail
		}
		m.mu.Unlock()
		if err != nil {
			return fmt.Errorf("read perf map %s: %w", name, err)
		}
		return nil
	}
	if m.path != "" {
		return nil // gone: the process exited, or its map was removed
	}
	m.mu.Lock()
	if m.rereads == rereads {
		m.lastMiss = time.Now()
	}
	m.mu.Unlock()
	return os.ErrNotExist
}

// readChunks parses f, from its start when anew, else from the read
// offset, up to size: it reads a chunk without mu, then parses it with
// mu held; the incomplete line a chunk ends with starts the next.
func (m *PerfMap) readChunks(f *os.File, name string, ino uint64, anew bool, size int64) error {
	m.mu.Lock()
	if anew {
		if m.path != "" {
			m.counts.Rewrites++
		}
		m.path, m.read, m.ino, m.lines = name, 0, ino, 0
	}
	m.mu.Unlock()
	buf := make([]byte, min(size-m.read, perfMapChunk))
	for m.read < size && m.lines < cmp.Or(m.maxLines, maxPerfMapLines) {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-m.read)], m.read)
		if n == 0 {
			if err == io.EOF {
				err = nil // shrunk since the stat: read again next time
			}
			return err
		}
		m.mu.Lock()
		used, err := m.parse(bytes.NewReader(buf[:n]))
		m.read += used
		m.sortHistory()
		m.mu.Unlock()
		if err != nil || used == 0 {
			return err // a line not ended yet waits for the next Update
		}
	}
	return nil
}

// sameTail reports whether f still holds, before offset read, the bytes
// tail read there last time.
func sameTail(f *os.File, read int64, tail []byte) bool {
	if tail == nil {
		return read == 0
	}
	buf := make([]byte, len(tail))
	if _, err := f.ReadAt(buf, read-int64(len(buf))); err != nil {
		return false
	}
	return bytes.Equal(buf, tail)
}

// readTail returns the tailBytes of f before offset read, or nil.
func readTail(f *os.File, read int64) []byte {
	n := min(read, tailBytes)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, read-n); err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	return buf
}

// reach counts, the first time, that the map reached a bound of kind k.
func (m *PerfMap) reach(k limits.Kind, format string, args ...any) {
	if !m.reached[k] {
		m.reached[k] = true
		m.limits.Add(k, fmt.Sprintf("pid %d", m.pid), 1, limits.Errorf(k, format, args...))
	}
}

// parse adds the symbols of the complete lines of r and returns the bytes
// they take; a last line without its newline is left for the next read.
// It stops at the bound on lines (see maxPerfMapLines).
func (m *PerfMap) parse(r io.Reader) (int64, error) {
	br := bufio.NewReaderSize(r, maxJITLine)
	var n int64
	var lines []jitSym
	defer func() {
		m.lines += len(lines)
		m.addAll(lines)
	}()
	// Lines of this read of the file, and symbols kept from all reads (a
	// map written anew repeats the lines that name code still there).
	maxLines := cmp.Or(m.maxLines, maxPerfMapLines)
	for {
		if m.lines+len(lines) >= maxLines || len(m.syms) >= maxLines {
			m.reach(limits.PerfMapSymbols, "perf map of pid %d: more than %d lines", m.pid, maxLines)
			return n, nil
		}
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// Skip the overlong line, through its newline.
			m.counts.Skipped++
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
			m.counts.Lines++
			lines = append(lines, s)
		} else {
			m.counts.Skipped++
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
	return jitSym{start: start, end: start + size, name: string(name), until: Latest}, true
}

// addAll adds the lines read at once, in file order. Lines that overlap
// no other line are merged in one pass (a JIT writes its lines in the order
// it allocates code, not in address order); the others are added one by
// one, in file order, since the later wins.
func (m *PerfMap) addAll(lines []jitSym) {
	if len(lines) == 0 {
		return
	}
	// The lines by start (then file order), with their index in lines.
	type ref struct {
		start uint64
		i     int
	}
	order := make([]ref, len(lines))
	for i, l := range lines {
		order[i] = ref{l.start, i}
	}
	cmp := func(a, b ref) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return a.i - b.i
	}
	if !slices.IsSortedFunc(order, cmp) {
		slices.SortFunc(order, cmp)
	}
	// Lines that overlap are in one cluster of the sorted lines: a line
	// starts a new cluster when it starts past the ends of all before it.
	overlaps := make([]bool, len(lines))
	for k := 0; k < len(order); {
		end, n := lines[order[k].i].end, 1
		for k+n < len(order) && order[k+n].start < end {
			end = max(end, lines[order[k+n].i].end)
			n++
		}
		if n > 1 {
			for _, r := range order[k : k+n] {
				overlaps[r.i] = true
			}
		}
		k += n
	}
	// One pass over the current symbols, in step with the sorted lines,
	// finds the lines that overlap none (clean) and those that repeat one
	// (a map written anew): neither needs add.
	done := make([]bool, len(lines))
	var merge []jitSym
	j := 0
	for _, r := range order {
		if overlaps[r.i] {
			continue
		}
		s := lines[r.i]
		for j < len(m.syms) && m.syms[j].end <= s.start {
			j++
		}
		switch {
		case j == len(m.syms) || m.syms[j].start >= s.end:
			s.from = m.gen
			done[r.i] = true
			merge = append(merge, s)
		case m.syms[j].start == s.start && m.syms[j].end == s.end && m.syms[j].name == s.name:
			done[r.i] = true
		}
	}
	switch {
	case len(merge) == 0:
	case len(m.syms) == 0 || m.syms[len(m.syms)-1].end <= merge[0].start:
		m.syms = append(m.syms, merge...) // past all: the common case
	case len(merge) > 8:
		m.syms = mergeByStart(m.syms, merge)
	default:
		for _, s := range merge {
			i, _ := slices.BinarySearchFunc(m.syms, s.start, func(e jitSym, t uint64) int {
				if e.start < t {
					return -1
				}
				return 1
			})
			m.syms = slices.Insert(m.syms, i, s)
		}
	}
	for i, s := range lines {
		if !done[i] {
			m.add(s)
		}
	}
}

// mergeByStart merges two slices sorted by start that do not overlap.
func mergeByStart(a, b []jitSym) []jitSym {
	out := make([]jitSym, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].start < b[0].start {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	out = append(out, a...)
	return append(out, b...)
}

// add inserts s; where it overlaps symbols added before, s wins from a new
// generation on, and what it replaced goes to the history. A line that
// repeats what is there already (a map written anew) changes nothing.
func (m *PerfMap) add(s jitSym) {
	// Appending in address order is the common case.
	if n := len(m.syms); n == 0 || m.syms[n-1].end <= s.start {
		s.from = m.gen
		m.syms = append(m.syms, s)
		return
	}
	// i: the first symbol that ends after s starts; k: the first that starts
	// at or after s ends.
	i, _ := slices.BinarySearchFunc(m.syms, s.start, func(e jitSym, t uint64) int {
		if e.end <= t {
			return -1
		}
		return 1
	})
	k, _ := slices.BinarySearchFunc(m.syms[i:], s.end, func(e jitSym, t uint64) int {
		if e.start < t {
			return -1
		}
		return 1
	})
	k += i
	if i == k {
		s.from = m.gen
		m.syms = slices.Insert(m.syms, i, s)
		return
	}
	if k == i+1 && m.syms[i].start == s.start && m.syms[i].end == s.end && m.syms[i].name == s.name {
		return
	}
	m.gen++
	m.counts.Replaced++
	s.from = m.gen
	repl := make([]jitSym, 0, 3)
	if first := m.syms[i]; first.start < s.start {
		repl = append(repl, jitSym{start: first.start, end: s.start, name: first.name, from: first.from, until: Latest})
	}
	repl = append(repl, s)
	if last := m.syms[k-1]; last.end > s.end {
		repl = append(repl, jitSym{start: s.end, end: last.end, name: last.name, from: last.from, until: Latest})
	}
	for _, old := range m.syms[i:k] {
		old.start, old.end = max(old.start, s.start), min(old.end, s.end)
		old.until = m.gen
		m.remember(old)
	}
	if len(repl) == k-i {
		copy(m.syms[i:k], repl) // a range renamed whole: no move
		return
	}
	m.syms = slices.Replace(m.syms, i, k, repl...)
}

// remember keeps a replaced name; sortHistory orders them after a read.
func (m *PerfMap) remember(s jitSym) {
	if len(m.hist) >= maxJITHistory {
		// Forget the oldest half: the samples that need them are long
		// named.
		slices.SortFunc(m.hist, func(a, b jitSym) int { return int(a.until) - int(b.until) })
		drop := len(m.hist) / 2
		m.counts.HistoryDropped += int64(drop)
		m.hist = slices.Delete(m.hist, 0, drop)
		m.histSorted = 0
		m.histMaxLen = 0
		for _, h := range m.hist {
			m.histMaxLen = max(m.histMaxLen, h.end-h.start)
		}
	}
	m.hist = append(m.hist, s)
	m.histMaxLen = max(m.histMaxLen, s.end-s.start)
}

func (m *PerfMap) sortHistory() {
	if m.histSorted == len(m.hist) {
		return
	}
	added := m.hist[m.histSorted:]
	slices.SortFunc(added, cmpStart)
	if m.histSorted > 0 {
		old := m.hist[:m.histSorted]
		merged := make([]jitSym, 0, len(m.hist))
		for len(old) > 0 && len(added) > 0 {
			if cmpStart(old[0], added[0]) <= 0 {
				merged, old = append(merged, old[0]), old[1:]
			} else {
				merged, added = append(merged, added[0]), added[1:]
			}
		}
		merged = append(append(merged, old...), added...)
		m.hist = merged
	}
	m.histSorted = len(m.hist)
}

func cmpStart(a, b jitSym) int {
	switch {
	case a.start < b.start:
		return -1
	case a.start > b.start:
		return 1
	}
	return int(a.from) - int(b.from)
}

// Lookup names pc as the map stood at generation at: by the newest line
// read by then, else (the code was compiled just before the sample, its
// line read after) by the oldest line read since. With Latest it takes the
// newest line.
func (m *PerfMap) Lookup(pc uint64, at Gen) (Frame, JITNaming) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, how := m.lookup(pc, at)
	if how == JITUnnamed {
		return Frame{}, how
	}
	return Frame{Function: displayName(s.name), SystemName: s.name}, how
}

// displayName shortens the names HotSpot writes for compiled methods,
// "<return type> <class>.<method>(<parameter types>)", to
// "<class>.<method>", as Java profilers show them; the whole line stays
// the system name. Other names are kept.
func displayName(name string) string {
	ret, rest, ok := strings.Cut(name, " ")
	if !ok || ret == "" || !strings.HasSuffix(rest, ")") {
		return name
	}
	method, _, ok := strings.Cut(rest, "(")
	if !ok || !strings.Contains(method, ".") || strings.ContainsAny(method, " :*~") || strings.ContainsAny(ret, ":*~()") {
		return name
	}
	return method
}

func (m *PerfMap) lookup(pc uint64, at Gen) (jitSym, JITNaming) {
	i, found := slices.BinarySearchFunc(m.syms, pc, func(s jitSym, pc uint64) int {
		switch {
		case s.end <= pc:
			return -1
		case s.start > pc:
			return 1
		}
		return 0
	})
	if found && m.syms[i].from <= at {
		return m.syms[i], JITNewest
	}
	// The address was named otherwise at the sample, or not yet named.
	var later jitSym
	haveLater := false
	if found {
		later, haveLater = m.syms[i], true
	}
	end, _ := slices.BinarySearchFunc(m.hist, pc, func(s jitSym, pc uint64) int {
		if s.start <= pc {
			return -1
		}
		return 1
	})
	for k := end - 1; k >= 0 && pc-m.hist[k].start < m.histMaxLen; k-- {
		h := m.hist[k]
		if pc >= h.end {
			continue
		}
		if h.from <= at && at < h.until {
			return h, JITOlder
		}
		if h.from > at && (!haveLater || h.from < later.from) {
			later, haveLater = h, true
		}
	}
	if haveLater {
		return later, JITLater
	}
	return jitSym{}, JITUnnamed
}

// isAnonymous reports whether m maps no file: anonymous memory, where JIT
// compilers put their code, named or not ("[anon:…]").
func isAnonymous(m *Mapping) bool {
	return m.Path == "" || strings.HasPrefix(m.Path, "[anon:")
}
