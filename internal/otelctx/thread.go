package otelctx

import (
	"fmt"
)

// Process reads the contexts of one process and keeps what does not change
// between reads: where otel_thread_ctx_v1 is, glibc's thread lists, thread
// pointers, the key map. It is not safe for concurrent use.
type Process struct {
	pid     int
	mem     *memory
	tls     TLSVar
	threads glibcThreads
	glibc   error // why threads is unusable, if it is
	tps     map[int]uint64
	keyMap  []string // nil: no process context read (yet)
}

// Open prepares to read process pid's thread contexts. It fails with
// ErrNotPublished when no object of the process defines otel_thread_ctx_v1.
// Libraries loaded later are not seen: Open again.
func Open(pid int) (p *Process, err error) {
	maps, err := readMaps(pid)
	if err != nil {
		return nil, err
	}
	objs, err := loadObjects(pid, maps)
	if err != nil {
		return nil, err
	}
	defer closeObjects(objs)
	mem, err := openMemory(pid)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			mem.Close()
		}
	}()
	v, err := locateTLS(objs, mem, SymbolName)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	p = &Process{pid: pid, mem: mem, tls: v, tps: map[int]uint64{}}
	p.threads, p.glibc = findGlibcThreads(objs)
	return p, nil
}

// Close releases the process's memory file.
func (p *Process) Close() error { return p.mem.Close() }

// TLS returns where the process keeps otel_thread_ctx_v1.
func (p *Process) TLS() TLSVar { return p.tls }

// ThreadPointer returns thread tid's thread pointer (fs_base), found on
// glibc's thread lists; it does not change during the thread's life, so it
// is cached.
func (p *Process) ThreadPointer(tid int) (uint64, error) {
	if tp, ok := p.tps[tid]; ok {
		return tp, nil
	}
	if p.glibc != nil {
		return 0, fmt.Errorf("thread pointer of %d/%d: %w", p.pid, tid, p.glibc)
	}
	tp, err := p.threads.threadPointer(p.mem, tid)
	if err != nil {
		return 0, fmt.Errorf("thread pointer of %d/%d: %w", p.pid, tid, err)
	}
	p.tps[tid] = tp
	return tp, nil
}

// ThreadContext reads thread tid's active context. The thread should be
// stopped (see the package doc). It returns ErrNoContext when none is
// attached and ErrNotValid for a record being rewritten.
func (p *Process) ThreadContext(tid int) (ThreadCtx, error) {
	tp, err := p.ThreadPointer(tid)
	if err != nil {
		return ThreadCtx{}, err
	}
	c, err := p.ThreadContextAt(tp)
	if err != nil {
		return ThreadCtx{}, fmt.Errorf("thread %d/%d: %w", p.pid, tid, err)
	}
	return c, nil
}

// ThreadContextAt reads the context of the thread whose thread pointer is
// tp, as the eBPF reader does: the variable's address from tp, the record
// pointer there, the 28-byte header, then attrs-data. Attribute names come
// from the process context's key map, re-read when a record uses an index
// the cached map does not have.
func (p *Process) ThreadContextAt(tp uint64) (ThreadCtx, error) {
	addr, err := p.tls.Address(p.mem, tp)
	if err != nil {
		return ThreadCtx{}, err
	}
	rec, err := readU64(p.mem, addr)
	if err != nil {
		return ThreadCtx{}, fmt.Errorf("read %s at %#x: %w", SymbolName, addr, err)
	}
	if rec == 0 {
		return ThreadCtx{}, ErrNoContext
	}
	if rec%2 != 0 {
		return ThreadCtx{}, fmt.Errorf("%w: record at odd address %#x", ErrInvalid, rec)
	}
	b := make([]byte, RecordHeaderSize, RecordHeaderSize+64)
	if _, err := p.mem.ReadAt(b, int64(rec)); err != nil {
		return ThreadCtx{}, fmt.Errorf("read record header at %#x: %w", rec, err)
	}
	size, err := RecordSize(b)
	if err != nil {
		return ThreadCtx{}, err
	}
	if size > RecordHeaderSize {
		b = append(b, make([]byte, size-RecordHeaderSize)...)
		if _, err := p.mem.ReadAt(b[RecordHeaderSize:], int64(rec+RecordHeaderSize)); err != nil {
			return ThreadCtx{}, fmt.Errorf("read attrs-data at %#x: %w", rec+RecordHeaderSize, err)
		}
		if p.keyMap == nil || maxKey(b[RecordHeaderSize:]) >= len(p.keyMap) {
			p.refreshKeyMap()
		}
	}
	c, err := ParseRecord(b, p.keyMap)
	if err != nil {
		return ThreadCtx{}, err
	}
	c.Record = rec
	return c, nil
}

// refreshKeyMap re-reads threadlocal.attribute_key_map. Without a process
// context the map stays nil and attributes are returned unnamed: better
// than dropping them, for a reader that is also a debugging tool.
func (p *Process) refreshKeyMap() {
	r, err := ProcessContext(p.pid)
	if err != nil {
		return
	}
	if km := r.KeyMap(); len(km) > 0 || p.keyMap == nil {
		p.keyMap = km
	}
}

// ThreadContext reads thread tid of process pid's active context; see
// [Process.ThreadContext]. A caller that reads repeatedly should [Open] the
// process once.
func ThreadContext(pid, tid int) (ThreadCtx, error) {
	p, err := Open(pid)
	if err != nil {
		return ThreadCtx{}, err
	}
	defer p.Close()
	return p.ThreadContext(tid)
}

// ThreadPointer returns the thread pointer (fs_base) of thread tid of
// process pid without stopping it, from glibc's thread lists. It returns
// ErrNoThreadList for a process that is not dynamically linked against
// glibc.
func ThreadPointer(pid, tid int) (uint64, error) {
	maps, err := readMaps(pid)
	if err != nil {
		return 0, err
	}
	objs, err := loadObjects(pid, maps)
	if err != nil {
		return 0, err
	}
	defer closeObjects(objs)
	g, err := findGlibcThreads(objs)
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	mem, err := openMemory(pid)
	if err != nil {
		return 0, err
	}
	defer mem.Close()
	tp, err := g.threadPointer(mem, tid)
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	return tp, nil
}
