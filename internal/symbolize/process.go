package symbolize

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/targetfile"
)

// Frame is one source-level frame at an address. Inlined frames come
// innermost first, the function they were inlined into last.
type Frame struct {
	Function   string // display name (demangled where applicable; Go full name like main.burnA)
	SystemName string // linkage/mangled name as in the symbol table (same as Function when not mangled)
	File       string // "" when unknown
	Line       int    // 0 when unknown
	StartLine  int    // line where the function starts, 0 when unknown
}

// Location is the result of resolving one address.
type Location struct {
	// Mapping is nil when the address is in no known mapping. The pointer is
	// stable for the life of the Process's current map (and kept across a
	// Refresh for mappings that did not change), so callers can intern by it.
	Mapping *Mapping
	Address uint64 // the address as given
	// Frames is empty when the address could not be resolved (then callers
	// keep the raw address). It is shared with the cache: do not modify it.
	Frames []Frame
	// JIT says how an address of JIT code was named; NotJIT for code in
	// a file.
	JIT JITNaming
}

// refreshInterval rate-limits the re-reading of /proc/PID/maps on lookups
// that miss every mapping.
const refreshInterval = time.Second

// Process is the symbolization view of one pid. It must be used by one
// goroutine at a time, together with its Cache.
type Process struct {
	c           *Cache
	pid         int
	maps        []*mapState // sorted by Start
	lastRefresh time.Time
	// same, for a process its owner manages (ManagedProcess), says
	// whether pid is still the process the map was first read of.
	same func() bool
	// jit names JIT code: the process's perf map, made on the first
	// address in anonymous memory unless the owner set one with
	// SetPerfMap (and then keeps it current).
	jit       *PerfMap
	jitShared bool
	jitRead   time.Time // when Lookup last updated a map of its own
}

// mapState is a mapping and the binary it maps.
type mapState struct {
	m     *Mapping
	bin   *objfile // nil when the binary could not be opened
	delta uint64   // runtime address + delta = ELF virtual address
	ok    bool     // bin is set and delta is valid
}

// mapKey identifies a mapping across re-reads of /proc/PID/maps.
type mapKey struct {
	start, limit, offset uint64
	path                 string
	deleted              bool
	dev, inode           uint64
}

func keyOf(m *Mapping) mapKey {
	return mapKey{m.Start, m.Limit, m.Offset, m.Path, m.Deleted, m.Dev, m.Inode}
}

// Process reads /proc/PID/maps and opens the binaries mapped executable by
// pid. The error wraps os.ErrNotExist when the process is gone.
func (c *Cache) Process(pid int) (*Process, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("read maps of pid %d: %w", pid, os.ErrNotExist)
	}
	p := &Process{c: c, pid: pid}
	if err := p.Refresh(); err != nil {
		return nil, err
	}
	return p, nil
}

// ManagedProcess is Process for an owner that keeps the map current
// itself (it calls Refresh when code is mapped) and knows that pid may
// pass to another process: same, asked after each read of the map and
// before any binary of it is opened, reports whether pid is still the
// process p is of. A read taken after the pid passed on is dropped, so
// that another process's binaries are neither opened nor cached for it,
// and lookups that miss every mapping do not read the map again (a gone
// process keeps its last one).
func (c *Cache) ManagedProcess(pid int, same func() bool) (*Process, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("read maps of pid %d: %w", pid, os.ErrNotExist)
	}
	p := &Process{c: c, pid: pid, same: same}
	if err := p.Refresh(); err != nil {
		return nil, err
	}
	return p, nil
}

// Pid returns the process id of p.
func (p *Process) Pid() int { return p.pid }

// Refresh re-reads /proc/PID/maps, for libraries loaded since. Mappings that
// did not change keep their *Mapping. On error the previous map stays.
func (p *Process) Refresh() error {
	p.lastRefresh = time.Now()
	data, err := targetfile.ReadProc(fmt.Sprintf("/proc/%d/maps", p.pid), targetfile.MaxMapsBytes)
	if err != nil {
		if errors.Is(err, targetfile.ErrTooLarge) {
			p.c.limits.Add(limits.FileTooLarge, fmt.Sprintf("pid %d", p.pid), 1, err)
		}
		if errors.Is(err, syscall.ESRCH) { // exited while being read
			return fmt.Errorf("read maps of pid %d: %w: %w", p.pid, os.ErrNotExist, err)
		}
		return fmt.Errorf("read maps of pid %d: %w", p.pid, err)
	}
	maps, err := parseMaps(data)
	if err != nil {
		return fmt.Errorf("read maps of pid %d: %w", p.pid, err)
	}
	if p.same != nil && !p.same() {
		return fmt.Errorf("read maps of pid %d: the pid is another process's now: %w", p.pid, os.ErrNotExist)
	}
	if len(maps) == 0 {
		// A process that has exited but is not yet reaped (a zombie,
		// or one tearing down its memory) reads as an empty map. A
		// live process always maps its own code: taking the empty
		// read would leave its last samples unresolved.
		return fmt.Errorf("read maps of pid %d: no executable mappings, the process has exited: %w", p.pid, os.ErrNotExist)
	}

	old := make(map[mapKey]*mapState, len(p.maps))
	for _, ms := range p.maps {
		old[keyOf(ms.m)] = ms
	}
	states := make([]*mapState, len(maps))
	for i, m := range maps {
		if ms := old[keyOf(m)]; ms != nil {
			states[i] = ms
			continue
		}
		ms := &mapState{m: m}
		p.bind(ms)
		states[i] = ms
	}
	p.maps = states
	return nil
}

// bind opens the binary of ms. A mapping whose binary cannot be opened
// resolves nothing: its addresses keep their raw value.
func (p *Process) bind(ms *mapState) {
	ms.bin, ms.ok = nil, false
	b, err := p.c.acquire(p.pid, ms.m)
	if err != nil {
		return
	}
	ms.bin = b
	b.seenAt(p.pid, ms.m.Path)
	ms.m.BuildID = b.buildID
	ms.delta, ms.ok = b.bias(ms.m)
}

// Mappings returns the executable mappings of p, sorted by Start.
func (p *Process) Mappings() []*Mapping {
	ms := make([]*Mapping, len(p.maps))
	for i, s := range p.maps {
		ms[i] = s.m
	}
	return ms
}

// SetPerfMap makes p name JIT code from m, which the caller keeps current
// with m.Update.
func (p *Process) SetPerfMap(m *PerfMap) { p.jit, p.jitShared = m, true }

// Lookup resolves pc, taken as is: callers pass a return address minus 1 for
// caller frames. When pc is in no known mapping, Lookup re-reads the maps (at
// most once a second) and tries again. JIT code is named by the newest
// lines of the perf map, which Lookup reads at most once a second unless it
// was given one with SetPerfMap.
func (p *Process) Lookup(pc uint64) Location { return p.LookupAt(pc, Latest) }

// LookupAt is Lookup with JIT code named as the perf map stood at
// generation gen: when the address was sampled.
func (p *Process) LookupAt(pc uint64, gen Gen) Location {
	ms := p.findOrRefresh(pc)
	if ms == nil {
		// Outside every mapping: JIT code unmapped since, if the process
		// has a perf map; else not code at all (a frame pointer that
		// was not one), which is no JIT frame to name.
		if !p.perfMap().Found() {
			return Location{Address: pc}
		}
		return p.lookupJIT(Location{Address: pc}, gen)
	}
	loc := Location{Mapping: ms.m, Address: pc}
	if ms.bin == nil && isAnonymous(ms.m) {
		return p.lookupJIT(loc, gen)
	}
	if ms.bin != nil && ms.bin.evicted {
		p.bind(ms) // dropped from the cache since: open it again
	}
	if !ms.ok {
		return loc
	}
	p.c.touch(ms.bin)
	loc.Frames = ms.bin.lookup(pc+ms.delta, p.c)
	return loc
}

// Prepare readies the lookups of pcs (taken as Lookup takes them): it
// parses the binaries they are in, and decodes the DWARF compilation units
// their lookups will read, in one pass over each binary's .debug_info.
// Callers that resolve many addresses at once, as a report's stacks, give
// them all to Prepare first: a compressed .debug_info (as Debian ships its
// debug files) can only be read forward from its start, so each unit
// looked up without it costs a read of the section up to it
// (Stats.DWARFUnprepared). Lookups answer the same with or without it.
func (p *Process) Prepare(pcs []uint64) {
	type wanted struct {
		b      *objfile
		vaddrs []uint64
	}
	var bins []wanted
	for _, pc := range pcs {
		ms := p.findOrRefresh(pc)
		if ms == nil || ms.bin == nil {
			continue // JIT code, or no file
		}
		if ms.bin.evicted {
			p.bind(ms)
		}
		if !ms.ok {
			continue
		}
		vaddr := pc + ms.delta
		if _, ok := ms.bin.frames[vaddr]; ok {
			continue
		}
		i := slices.IndexFunc(bins, func(w wanted) bool { return w.b == ms.bin })
		if i < 0 {
			i = len(bins)
			bins = append(bins, wanted{b: ms.bin})
		}
		bins[i].vaddrs = append(bins[i].vaddrs, vaddr)
	}
	for _, w := range bins {
		if !w.b.evicted { // else dropped over MaxBytes by the parse of another: its lookups parse it again
			w.b.prepare(w.vaddrs, p.c)
		}
	}
}

// MappingOf returns the mapping that holds pc (with its build id), or nil,
// without resolving symbols: for callers that leave symbolization to a
// backend. Like Lookup, it re-reads the memory map (at most once a second)
// when pc is in no known mapping.
func (p *Process) MappingOf(pc uint64) *Mapping {
	ms := p.findOrRefresh(pc)
	if ms == nil {
		return nil
	}
	return ms.m
}

// findOrRefresh returns the mapping that holds pc, or nil; when there is
// none, it re-reads the maps (at most once a second) and looks again.
func (p *Process) findOrRefresh(pc uint64) *mapState {
	ms := p.find(pc)
	if ms == nil && p.same == nil && time.Since(p.lastRefresh) >= refreshInterval {
		_ = p.Refresh() // best effort: a process that is gone keeps its last map
		ms = p.find(pc)
	}
	return ms
}

// lookupJIT resolves loc.Address, in no file mapping, from the process's
// perf map (JIT code).
func (p *Process) lookupJIT(loc Location, gen Gen) Location {
	f, how := p.perfMap().Lookup(loc.Address, gen)
	if how != JITUnnamed {
		loc.Frames = []Frame{f}
	}
	loc.JIT = how
	return loc
}

// perfMap returns the perf map of the process, read again at most every
// perfMapMissInterval unless its owner keeps it current.
func (p *Process) perfMap() *PerfMap {
	if p.jit == nil {
		p.jit = NewPerfMap(p.pid, p.c.limits)
	}
	if !p.jitShared && time.Since(p.jitRead) >= perfMapMissInterval {
		p.jitRead = time.Now()
		_, _ = p.jit.Update() // best effort: an unreadable map keeps what was read
	}
	return p.jit
}

// find returns the mapping that holds pc, or nil.
func (p *Process) find(pc uint64) *mapState {
	lo, hi := 0, len(p.maps)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if p.maps[mid].m.Start <= pc {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return nil
	}
	ms := p.maps[lo-1]
	if pc >= ms.m.Limit {
		return nil
	}
	return ms
}
