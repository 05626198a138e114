package symbolize

import (
	"bytes"
	"container/list"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"syscall"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/targetfile"
)

// DefaultMaxBinaries is the default of Options.MaxBinaries.
const DefaultMaxBinaries = 64

// Options configure a Cache.
type Options struct {
	// MaxBinaries bounds the binaries held, parsed or not; beyond it the least
	// recently used one is dropped (and parsed again if needed again). 0 means
	// DefaultMaxBinaries.
	MaxBinaries int
	// MaxBytes bounds Stats.BytesHeld: after a binary is parsed, and on
	// Trim, the DWARF sections of the least recently used binaries, then
	// the least recently used parsed binaries, are dropped until the rest
	// fit (the most recently used one always stays). 0: no bound.
	MaxBytes int64
	// UnwindTables reads, with each binary's symbols, what
	// Process.ReturnAddressAtSP needs: the CFA rules of .eh_frame (Go
	// binaries answer from their pcln tables without it).
	UnwindTables bool
	// Limits counts the bounds a target's files reach (see package
	// limits) and logs each once per binary or process. nil: counted
	// nowhere.
	Limits *limits.Recorder
}

// Stats counts the work of a Cache.
type Stats struct {
	Binaries        int // binaries held now
	FilesOpened     int // binary files (or vDSO images) opened to identify them
	BinariesParsed  int // symbol tables read, DWARF indexed: once per binary while it stays cached
	BinariesEvicted int // binaries dropped to stay within Options.MaxBinaries or MaxBytes
	LookupsCached   int // addresses answered from a per-binary cache
	LookupsResolved int // addresses resolved from the tables

	// DWARF is decoded one compilation unit at a time, on the first lookup
	// of an address in it, from sections held while units are being
	// decoded (see Cache.Trim).
	DWARFUnitsDecoded int // compilation units whose lines and functions were decoded
	DWARFLoads        int // DWARF sections read: at the parse, and again after a drop
	DWARFDrops        int // DWARF sections dropped by Trim, unused or over MaxBytes
	DWARFTooDeep      int // DIE subtrees skipped for nesting deeper than the walk goes (256)
	// DWARFUnprepared counts the units decoded by a lookup, one at a
	// time, rather than by Process.Prepare or by the parse: each cost a
	// read of .debug_info up to it when the section is compressed.
	DWARFUnprepared int
	// DWARFUnitsTooLarge counts the units left out of the index for being
	// larger than a unit read into memory may be (64 MiB): their
	// addresses are named by the ELF symbols.
	DWARFUnitsTooLarge int
	// DWARFInfoRead is the bytes of .debug_info read (decompressed): by
	// the parses, which read it all, and to decode units.
	DWARFInfoRead int64
	// DWARFPeakBytes is the most bytes of DWARF held at once for decoding:
	// the loaded sections of all binaries and the bytes of the unit being
	// read. .debug_info is read one unit at a time, unless units refer to
	// each other.
	DWARFPeakBytes int64

	// BytesHeld estimates the memory held by the binaries in the cache: for
	// each parsed binary, what its symbol, Go and unwind tables reach
	// (slice backing arrays by capacity, each counted once, strings by
	// length, maps by entries times key and value size plus a bucket
	// overhead), measured once after the parse; its DWARF index, the
	// tables of each decoded unit, measured once when it is decoded, and
	// the DWARF sections while they are loaded; plus 64 bytes per entry of
	// its address cache and the frames stored there. Unparsed binaries
	// count 0: they hold an open file and ELF headers only.
	BytesHeld int64
}

// Cache holds parsed binaries shared across processes, keyed by build id,
// else by (dev, inode, path, size, mtime). A binary is parsed once, not once
// per process, on the first lookup of an address in it. The cache is bounded
// by Options.MaxBinaries with least-recently-used eviction.
//
// A Cache and its Processes must be used by one goroutine at a time.
type Cache struct {
	max       int
	maxBytes  int64
	unwind    bool // Options.UnwindTables
	limits    *limits.Recorder
	byBuildID map[string]*objfile
	byFile    map[fileKey]*objfile
	lru       list.List // of *objfile, most recently used first
	stats     Stats
	closed    bool
	tableSize map[*objfile]int64 // bytes held by a parsed binary's tables, see Stats.BytesHeld
	trims     int                // calls of Trim: the clock of dwarfTables.lastUse
	// holdInfo reads .debug_info whole with the other DWARF sections, as
	// before it was read as a stream: for benchmarks to compare.
	holdInfo bool
}

// NewCache returns an empty cache.
func NewCache(opts Options) *Cache {
	if opts.MaxBinaries <= 0 {
		opts.MaxBinaries = DefaultMaxBinaries
	}
	return &Cache{
		max:       opts.MaxBinaries,
		maxBytes:  opts.MaxBytes,
		unwind:    opts.UnwindTables,
		limits:    opts.Limits,
		byBuildID: make(map[string]*objfile),
		byFile:    make(map[fileKey]*objfile),
		tableSize: make(map[*objfile]int64),
	}
}

// Stats returns the counters of c.
func (c *Cache) Stats() Stats {
	s := c.stats
	s.Binaries = c.lru.Len()
	for e := c.lru.Front(); e != nil; e = e.Next() {
		s.BytesHeld += c.bytesHeld(e.Value.(*objfile))
	}
	return s
}

// Close releases the open files and the parsed tables. Processes of c resolve
// nothing after it. Close is idempotent.
func (c *Cache) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for e := c.lru.Front(); e != nil; e = e.Next() {
		if err := e.Value.(*objfile).release(); err != nil {
			errs = append(errs, err)
		}
	}
	c.lru.Init()
	clear(c.byBuildID)
	clear(c.byFile)
	clear(c.tableSize)
	return errors.Join(errs...)
}

var errClosed = errors.New("symbolize: cache closed")

// acquire returns the binary mapped by m in process pid, opening it if it is
// not in the cache. It does not parse it.
func (c *Cache) acquire(pid int, m *Mapping) (*objfile, error) {
	if c.closed {
		return nil, errClosed
	}
	switch {
	case m.Path == "[vdso]":
		return c.acquireVDSO(pid, m)
	case m.Path == "" || strings.HasPrefix(m.Path, "["):
		// Anonymous memory (JIT code) and [vsyscall]: no file.
		return nil, errNoBinary
	}

	// map_files reaches the mapped file itself: deleted, replaced, or in
	// another mount namespace. It needs CAP_SYS_ADMIN; the paths are the
	// fallback, and for a deleted file name another file.
	names := []string{fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.Limit)}
	if !m.Deleted && strings.HasPrefix(m.Path, "/") {
		names = append(names, fmt.Sprintf("/proc/%d/root%s", pid, m.Path), m.Path)
	}
	var errs []error
	for _, name := range names {
		b, err := c.acquireFile(name, m.Path)
		if err == nil {
			return b, nil
		}
		errs = append(errs, err)
	}
	err := fmt.Errorf("open binary %s of pid %d: %w", m.Path, pid, errors.Join(errs...))
	if errors.Is(err, targetfile.ErrNotRegular) {
		c.limits.Add(limits.FileRefused, fmt.Sprintf("pid %d", pid), 1, err)
	}
	return nil, err
}

// acquireFile returns the binary in file name, mapped as path. The
// target can swap the path for a FIFO (opening it would wait for a
// writer), a link to /dev/zero, or an absolute link that through
// /proc/PID/root resolves in our root: it is opened as a target's file
// (see package targetfile), and identified by what was opened.
func (c *Cache) acquireFile(name, path string) (*objfile, error) {
	f, err := targetfile.Open(name, true)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	// (dev, inode, size, mtime) names a file whatever path reaches it; the
	// path only stands in when stat has no inode.
	key := fileKey{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		key.dev, key.inode = st.Dev, st.Ino
	} else {
		key.path = path
	}
	if b := c.byFile[key]; b != nil {
		f.Close()
		c.touch(b)
		return b, nil
	}

	c.stats.FilesOpened++
	b, err := openELF(name, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	if old := c.byBuildID[b.buildID]; old != nil && b.buildID != "" {
		f.Close()
		old.keys = append(old.keys, key)
		c.byFile[key] = old
		c.touch(old)
		return old, nil
	}
	b.closer = f
	b.keys = []fileKey{key}
	c.insert(b)
	return b, nil
}

// acquireVDSO returns the vDSO image mapped by m, read from the memory of
// process pid: it has no file.
func (c *Cache) acquireVDSO(pid int, m *Mapping) (*objfile, error) {
	size := m.Limit - m.Start
	if size == 0 || size > 1<<20 {
		return nil, fmt.Errorf("vdso of pid %d: odd size %d", pid, size)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, fmt.Errorf("read vdso of pid %d: %w", pid, err)
	}
	defer f.Close()
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, int64(m.Start)); err != nil {
		return nil, fmt.Errorf("read vdso of pid %d: %w", pid, err)
	}
	c.stats.FilesOpened++
	b, err := openELF("[vdso]", bytes.NewReader(buf))
	if err != nil {
		return nil, err
	}
	// Every process of a kernel (and ABI) has the same vDSO; the build id
	// tells them apart. Without one, key it by size.
	key := fileKey{path: m.Path, size: int64(size)}
	if b.buildID != "" {
		if old := c.byBuildID[b.buildID]; old != nil {
			c.touch(old)
			return old, nil
		}
	} else if old := c.byFile[key]; old != nil {
		c.touch(old)
		return old, nil
	} else {
		b.keys = []fileKey{key}
	}
	c.insert(b)
	return b, nil
}

// insert adds b as the most recently used binary, evicting the least
// recently used ones beyond the bound.
func (c *Cache) insert(b *objfile) {
	if b.buildID != "" {
		c.byBuildID[b.buildID] = b
	}
	for _, k := range b.keys {
		c.byFile[k] = b
	}
	b.elem = c.lru.PushFront(b)
	for c.lru.Len() > c.max {
		c.evict(c.lru.Back().Value.(*objfile))
	}
}

func (c *Cache) evict(b *objfile) {
	if b.buildID != "" && c.byBuildID[b.buildID] == b {
		delete(c.byBuildID, b.buildID)
	}
	for _, k := range b.keys {
		if c.byFile[k] == b {
			delete(c.byFile, k)
		}
	}
	c.lru.Remove(b.elem)
	delete(c.tableSize, b)
	b.release() // read-only file: nothing to report
	c.stats.BinariesEvicted++
}

// Trim is called between reports (the engine calls it after every one). It
// drops the DWARF sections of binaries that decoded no compilation unit in
// the last dwarfIdleTrims (3) calls: they are read again from the open file
// if a new unit is needed. Then, while the cache holds more than
// Options.MaxBytes, it drops the DWARF sections of the least recently used
// binaries, then those binaries; the most recently used one stays, however
// large. Address caches grow between parses, so callers trim now and then.
func (c *Cache) Trim() {
	c.trims++
	for e := c.lru.Front(); e != nil; e = e.Next() {
		t := e.Value.(*objfile).dwarf
		if t != nil && c.trims-t.lastUse >= dwarfIdleTrims && t.drop() {
			c.stats.DWARFDrops++
		}
	}
	c.trimBytes()
}

// trimBytes is the part of Trim that bounds Options.MaxBytes. The cache
// calls it after a parse; only Trim counts as a report's end.
func (c *Cache) trimBytes() {
	if c.maxBytes <= 0 || c.lru.Len() < 2 {
		return
	}
	var total int64
	for e := c.lru.Front(); e != nil; e = e.Next() {
		total += c.bytesHeld(e.Value.(*objfile))
	}
	// Sections first: dropping them costs a read if needed again, dropping
	// a binary a parse.
	for e := c.lru.Back(); total > c.maxBytes && e != nil && e != c.lru.Front(); e = e.Prev() {
		if t := e.Value.(*objfile).dwarf; t != nil {
			held := t.held()
			if t.drop() {
				total -= held
				c.stats.DWARFDrops++
			}
		}
	}
	for e := c.lru.Back(); total > c.maxBytes && e != nil && e != c.lru.Front(); {
		prev := e.Prev()
		b := e.Value.(*objfile)
		if n := c.bytesHeld(b); n > 0 {
			total -= n
			c.evict(b)
		}
		e = prev
	}
}

// notePeak keeps Stats.DWARFPeakBytes: the DWARF sections held now by the
// binaries and by t (which may not be in the cache yet), and extra bytes
// read for t.
func (c *Cache) notePeak(t *dwarfTables, extra int64) {
	n := t.held() + extra
	for e := c.lru.Front(); e != nil; e = e.Next() {
		if d := e.Value.(*objfile).dwarf; d != nil && d != t {
			n += d.held()
		}
	}
	c.stats.DWARFPeakBytes = max(c.stats.DWARFPeakBytes, n)
}

func (c *Cache) touch(b *objfile) {
	if b.elem != nil && c.lru.Front() != b.elem {
		c.lru.MoveToFront(b.elem)
	}
}

// bytesHeld estimates the memory b holds (see Stats.BytesHeld).
func (c *Cache) bytesHeld(b *objfile) int64 {
	if !b.parsed && b.unwindRead {
		n, ok := c.tableSize[b]
		if !ok {
			var sz sizer
			sz.add(reflect.ValueOf(b.unwind))
			n = sz.total()
			c.tableSize[b] = n
		}
		return n
	}
	if !b.parsed || b.parseErr != nil {
		return 0
	}
	n, ok := c.tableSize[b]
	if !ok {
		var sz sizer
		sz.add(reflect.ValueOf(b.syms))
		sz.add(reflect.ValueOf(b.gotab))
		sz.add(reflect.ValueOf(b.unwind))
		n = sz.total()
		c.tableSize[b] = n
	}
	if b.dwarf != nil {
		n += b.dwarf.bytesHeld()
	}
	return n + b.framesBytes
}

// The memory of an entry of a binary's address cache: the key, the slice
// header and the map's overhead, and each frame.
var (
	frameEntryBytes int64 = 64
	frameBytes            = int64(reflect.TypeFor[Frame]().Size())
)

// sizer estimates the memory reachable from values: it walks them with
// reflect, through unexported fields too. Backing arrays are keyed by their
// end address, so that subslices of one array (the pcln table and its parts)
// count once, by the largest of them.
type sizer struct {
	arrays map[uintptr]int64 // end address → bytes
	seen   map[uintptr]bool  // pointers followed
	n      int64
}

func (s *sizer) total() int64 {
	n := s.n
	for _, b := range s.arrays {
		n += b
	}
	return n
}

func (s *sizer) add(v reflect.Value) {
	if s.arrays == nil {
		s.arrays, s.seen = make(map[uintptr]int64), make(map[uintptr]bool)
	}
	s.walk(v)
}

// hasRefs reports whether values of t can reach other memory.
func hasRefs(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.String, reflect.Map, reflect.Interface:
		return true
	case reflect.Array:
		return hasRefs(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasRefs(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// walk adds what v refers to, not v itself (its holder counted it).
func (s *sizer) walk(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() || s.seen[v.Pointer()] {
			return
		}
		s.seen[v.Pointer()] = true
		s.n += int64(v.Type().Elem().Size())
		s.walk(v.Elem())
	case reflect.Interface:
		if !v.IsNil() {
			s.walk(v.Elem())
		}
	case reflect.String:
		s.n += int64(v.Len())
	case reflect.Slice:
		if v.Cap() == 0 {
			return
		}
		size := int64(v.Cap()) * int64(v.Type().Elem().Size())
		end := v.Pointer() + uintptr(size)
		if size <= s.arrays[end] {
			return // this array was counted, from a larger slice of it
		}
		s.arrays[end] = size
		if hasRefs(v.Type().Elem()) {
			for i := range v.Len() {
				s.walk(v.Index(i))
			}
		}
	case reflect.Array:
		if hasRefs(v.Type().Elem()) {
			for i := range v.Len() {
				s.walk(v.Index(i))
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if hasRefs(v.Type().Field(i).Type) {
				s.walk(v.Field(i))
			}
		}
	case reflect.Map:
		if v.IsNil() || s.seen[v.Pointer()] {
			return
		}
		s.seen[v.Pointer()] = true
		const bucketOverhead = 2 // Go maps hold about twice their entries' size
		kt, et := v.Type().Key(), v.Type().Elem()
		s.n += bucketOverhead * int64(v.Len()) * int64(kt.Size()+et.Size())
		if hasRefs(kt) || hasRefs(et) {
			it := v.MapRange()
			for it.Next() {
				s.walk(it.Key())
				s.walk(it.Value())
			}
		}
	}
}
