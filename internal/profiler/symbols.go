package profiler

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/symbolize"
	"github.com/perfprof/perfprof/internal/unwind"
)

// symbols resolves the raw stacks of batches. It owns the symbolize cache,
// which is used by one goroutine at a time: under mu, which the read loop
// never takes. A binary's first parse (libc with its debug file: ~250 ms)
// holds mu, delaying reports and map reads, not ring reading. When both
// are held, mu is taken before engine.mu (readTables).
type symbols struct {
	log         *zap.Logger
	symbolize   bool
	recoverLeaf bool
	unwind      bool // build each process's Unwinder
	procs       Procs

	mu       sync.Mutex
	cache    *symbolize.Cache
	kernel   *symbolize.Kernel
	chainBuf []uint64
	leafBuf  [8]byte

	wake chan struct{} // kicks the worker: a memory map changed
}

// procSymbols is the symbol side of a process image, guarded by symbols.mu.
type procSymbols struct {
	proc   *symbolize.Process // nil until read, or when its map is unreadable
	failed bool               // the map could not be read: do not retry per stack
	// addrs caches resolved addresses of code in files across the batches
	// of the process; the binary-level cache in symbolize keeps the
	// expensive part. JIT code is not cached: the same address holds other
	// code after a garbage collection, and a miss is named a moment later.
	addrs map[uint64]*Location
}

// JITStats count the frames of JIT code in the samples reported, by how
// the perf map named them.
type JITStats struct {
	Frames int64 // frames in anonymous memory, or in no mapping of a process with a perf map
	// Older were named by a line replaced before the report: naming them
	// by the map as it stands at the report would have named other code.
	Older int64
	// Later were named by a line read after the sample: the code was
	// compiled just before it.
	Later   int64
	Unnamed int64 // no line of the perf map names them
}

// jitKey is a JIT address at a generation of the perf map.
type jitKey struct {
	addr uint64
	gen  symbolize.Gen
}

// maxAddrCache bounds a process's address cache; it is cleared when full.
const maxAddrCache = 1 << 17

func newSymbols(opts Options, procs Procs) *symbols {
	return &symbols{
		log:         opts.Logger,
		symbolize:   opts.Symbolize,
		recoverLeaf: opts.RecoverLeafCaller,
		unwind:      opts.Unwind != UnwindFramePointer,
		procs:       procs,
		cache: symbolize.NewCache(symbolize.Options{
			UnwindTables: opts.RecoverLeafCaller || opts.Unwind != UnwindFramePointer,
			MaxBytes:     opts.MaxSymbolBytes,
			Limits:       opts.Limits,
		}),
		wake: make(chan struct{}, 1),
	}
}

// loadKernel reads the kernel's symbols for kernel frames.
func (s *symbols) loadKernel() {
	k, err := symbolize.LoadKernel()
	switch {
	case errors.Is(err, symbolize.ErrKernelAddressesHidden):
		// At kptr_restrict 0, /proc/kallsyms shows the addresses to
		// everyone when perf_event_paranoid is at most 1, else only to
		// CAP_SYSLOG; at 1 only to CAP_SYSLOG; at 2 to no one.
		s.log.Warn("Kernel symbol addresses are hidden from this process (kernel.kptr_restrict); kernel frames stay unnamed. " +
			"Grant the collector CAP_SYSLOG (in Kubernetes securityContext.capabilities.add: [SYSLOG]), or set kernel.kptr_restrict=0 and kernel.perf_event_paranoid=1.")
	case err != nil:
		s.log.Warn("Cannot read kernel symbols; kernel frames stay unnamed", zap.Error(err))
	}
	s.mu.Lock()
	s.kernel = k
	s.mu.Unlock()
}

// kick asks the worker to read changed memory maps; it never blocks.
func (s *symbols) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// open reads the memory map of a process image the first time it is
// needed. Called with mu held.
func (s *symbols) open(st *procState) *symbolize.Process {
	ps := st.sym
	if ps.proc == nil && !ps.failed {
		// Once it exited, its pid may be another's, whose map is not
		// its: it must be there before and after the read.
		var p *symbolize.Process
		err := fmt.Errorf("read memory map of pid %d: %w", st.info.Pid, perf.ErrNoProcess)
		if s.same(st) {
			p, err = s.cache.ManagedProcess(st.info.Pid, func() bool { return s.same(st) })
		}
		if err != nil {
			ps.failed = true
			s.log.Debug("Cannot read memory map; stacks stay unsymbolized", zap.Int("pid", st.info.Pid), zap.Error(err))
		} else {
			p.SetPerfMap(st.jit)
			ps.proc = p
		}
	}
	return ps.proc
}

// refresh re-reads the memory maps of processes whose code changed, so
// that their new code resolves, and with unwind gives their read loop
// unwinding the tables of the binaries mapped now (which may parse a Go
// binary: not for the attaching goroutine to wait on). A process that
// exits before its samples are symbolized keeps the map read here.
func (s *symbols) refresh(sts []*procState, unwind bool) {
	if len(sts) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked(sts, unwind)
}

// refreshLocked is refresh with mu held.
func (s *symbols) refreshLocked(sts []*procState, unwind bool) {
	for _, st := range sts {
		// A process that is gone keeps its last map; its pid may be
		// another's now, whose binaries are not to be opened for it.
		if !s.same(st) {
			continue
		}
		if st.sym.proc == nil {
			s.open(st)
		} else {
			_ = st.sym.proc.Refresh()
		}
		if unwind && s.unwind && st.sym.proc != nil {
			st.unwinder.Store(st.sym.proc.Unwinder())
		}
	}
}

// same reports whether the process of st still has its pid.
func (s *symbols) same(st *procState) bool {
	p, err := s.procs.Read(st.info.Pid)
	return err == nil && p.StartTime == st.info.StartTime
}

// resolve returns the locations of the stacks of b that its samples use
// (the others stay nil), for the process image st, and counts the JIT
// frames of its samples; the caller adds the counts of the resolution it
// keeps with addJIT. It names them with the memory map and perf map as
// the symbol worker and the JIT poller last read them: a process whose
// map was never read keeps raw addresses.
func (s *symbols) resolve(st *procState, b *batch) ([][]*Location, JITStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	proc := st.sym.proc
	ps := st.sym
	if ps.addrs == nil {
		ps.addrs = map[uint64]*Location{}
	}
	r := resolver{s: s, proc: proc, ps: ps}
	chains := s.chains(b, proc)
	if proc != nil && s.symbolize {
		// The binaries' DWARF units that the lookups need are decoded
		// together: one pass over each compressed .debug_info.
		proc.Prepare(r.pcs(chains))
	}
	var jit JITStats
	out := make([][]*Location, len(b.stacks))
	var jitFrames []int32 // per stack: the JIT frames counted for its first sample
	for _, smp := range b.samples {
		i := smp.stack
		if i < 0 {
			continue
		}
		if out[i] != nil {
			if jitFrames[i] != 0 {
				for _, l := range out[i] {
					jit.count(l.JIT)
				}
			}
			continue
		}
		if jitFrames == nil {
			jitFrames = make([]int32, len(b.stacks))
		}
		out[i] = r.locations(chains[i], b.stacks[i].gen)
		for _, l := range out[i] {
			if l.JIT != symbolize.NotJIT {
				jit.count(l.JIT)
				jitFrames[i]++
			}
		}
	}
	return out, jit
}

// chains returns the chains of the stacks of b that its samples use (the
// others stay nil), each with the caller of its leaf restored where the
// frame-pointer walk dropped it.
func (s *symbols) chains(b *batch, proc *symbolize.Process) [][]uint64 {
	chains := make([][]uint64, len(b.stacks))
	done := make([]bool, len(b.stacks))
	type span struct{ stack, off, n int }
	var (
		restored []span
		arena    []uint64 // the restored chains, one after another
	)
	for _, smp := range b.samples {
		i := smp.stack
		if i < 0 || done[i] {
			continue
		}
		done[i] = true
		rs := &b.stacks[i]
		chains[i] = rs.chain
		if rs.leafCall == 0 || proc == nil {
			continue
		}
		ne.PutUint64(s.leafBuf[:], rs.leafCall)
		chain := unwind.InsertLeafCaller(s.chainBuf, rs.chain, s.leafBuf[:], func(pc uint64) bool {
			return proc.LeafCallerAtSP(pc, rs.leafCall, rs.gen)
		})
		if len(chain) > len(rs.chain) {
			s.chainBuf = chain[:0]
			restored = append(restored, span{int(i), len(arena), len(chain)})
			arena = append(arena, chain...)
		}
	}
	for _, r := range restored {
		chains[r.stack] = arena[r.off : r.off+r.n]
	}
	return chains
}

// resolver names the stacks of one batch.
type resolver struct {
	s    *symbols
	proc *symbolize.Process
	ps   *procSymbols
	jit  map[jitKey]*Location // JIT addresses, for this batch only
}

func (j *JITStats) count(how symbolize.JITNaming) {
	switch how {
	case symbolize.NotJIT:
		return
	case symbolize.JITOlder:
		j.Older++
	case symbolize.JITLater:
		j.Later++
	case symbolize.JITUnnamed:
		j.Unnamed++
	}
	j.Frames++
}

func (j *JITStats) add(o JITStats) {
	j.Frames += o.Frames
	j.Older += o.Older
	j.Later += o.Later
	j.Unnamed += o.Unnamed
}

// locations resolves one raw chain, its JIT code as the perf map stood at
// gen. Every address but the leaf is a return address: it is looked up one
// byte earlier, inside the call instruction, so that the caller's line is
// the line of the call.
func (r *resolver) locations(chain []uint64, gen symbolize.Gen) []*Location {
	s, proc, ps := r.s, r.proc, r.ps
	locs := make([]*Location, 0, len(chain))
	first := true
	perf.Frames(chain, func(addr uint64, kernel bool) {
		if l, ok := ps.addrs[addr]; ok {
			locs = append(locs, l)
			first = false
			return
		}
		if l, ok := r.jit[jitKey{addr, gen}]; ok {
			locs = append(locs, l)
			first = false
			return
		}
		pc := addr
		if !first {
			pc--
		}
		first = false
		l := &Location{Addr: addr, Kernel: kernel}
		switch {
		case kernel:
			if s.kernel != nil {
				if f, ok := s.kernel.Lookup(pc); ok {
					l.Frames = []symbolize.Frame{f}
				}
			}
			if len(l.Frames) == 0 {
				l.Frames = []symbolize.Frame{{Function: "[kernel]", SystemName: "[kernel]"}}
			}
		case proc != nil && !s.symbolize:
			l.Mapping = proc.MappingOf(pc)
		case proc != nil:
			res := proc.LookupAt(pc, gen)
			l.Mapping, l.Frames, l.JIT = res.Mapping, res.Frames, res.JIT
		}
		if l.JIT != symbolize.NotJIT {
			if r.jit == nil {
				r.jit = map[jitKey]*Location{}
			}
			r.jit[jitKey{addr, gen}] = l
		} else {
			if len(ps.addrs) >= maxAddrCache {
				clear(ps.addrs)
			}
			ps.addrs[addr] = l
		}
		locs = append(locs, l)
	})
	return locs
}

// pcs returns the addresses that locations looks up in chains, sorted and
// each once: of the frames in user code not yet resolved, the first of a
// chain, and each return address after it one byte earlier.
func (r *resolver) pcs(chains [][]uint64) []uint64 {
	var pcs []uint64
	for _, chain := range chains {
		first := true
		perf.Frames(chain, func(addr uint64, kernel bool) {
			pc := addr
			if !first {
				pc--
			}
			first = false
			if _, ok := r.ps.addrs[addr]; ok || kernel {
				return
			}
			pcs = append(pcs, pc)
		})
	}
	slices.Sort(pcs)
	return slices.Compact(pcs)
}

// stats returns the counters of the symbol cache.
func (s *symbols) stats() symbolize.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cache.Stats()
}

func (s *symbols) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cache.Close()
}

// trim drops parsed binaries beyond the memory bound: address caches grow
// between parses.
func (s *symbols) trim() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache.Trim()
}
