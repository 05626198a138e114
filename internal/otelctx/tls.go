package otelctx

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/perfprof/perfprof/internal/targetfile"
)

// SymbolName is the thread-local variable OTEP 4947 publishes: a pointer to
// the thread's active record, exported in .dynsym.
const SymbolName = "otel_thread_ctx_v1"

// Model is how the TLS variable is reached, read from the relocations that
// reference it. The OTEP lets writers use TLSDESC or General Dynamic in a
// shared library; in an executable, linkers relax accesses to initial-exec
// or local-exec.
type Model int

const (
	// LocalExec: the main executable, no relocation; the offset from the
	// thread pointer follows from PT_TLS.
	LocalExec Model = iota + 1
	// InitialExec: an R_X86_64_TPOFF64 GOT slot holds the thread-pointer
	// offset.
	InitialExec
	// TLSDesc: an R_X86_64_TLSDESC GOT pair {entry, arg}: arg is the
	// thread-pointer offset when the block is in static TLS, else it points
	// to {module id, offset}.
	TLSDesc
	// GeneralDynamic: an R_X86_64_DTPMOD64/DTPOFF64 GOT pair holds
	// {module id, offset}, for __tls_get_addr.
	GeneralDynamic
)

func (m Model) String() string {
	switch m {
	case LocalExec:
		return "local-exec"
	case InitialExec:
		return "initial-exec"
	case TLSDesc:
		return "tlsdesc"
	case GeneralDynamic:
		return "general-dynamic"
	}
	return fmt.Sprintf("Model(%d)", int(m))
}

// glibc's x86-64 layout of the dynamic thread vector (DTV), as its
// libthread_db descriptors say (_thread_db_pthread_dtvp,
// _thread_db_dtv_dtv): the TCB at the thread pointer holds the DTV pointer
// at +8; entries are 16 bytes {void *val; void *to_free}, indexed by module
// id; entry -1 holds the number of entries, entry 0 the generation.
const (
	DTVPointerOffset = 8
	DTVEntrySize     = 16
)

// dtvUnallocated is glibc's TLS_DTV_UNALLOCATED: the thread has not
// allocated this module's block yet.
const dtvUnallocated = ^uint64(0)

// TLSVar says where every thread of a process keeps otel_thread_ctx_v1,
// relative to the thread's pointer (fs_base on x86-64). It is what the eBPF
// reader needs per process; it does not change while the defining object
// stays loaded.
type TLSVar struct {
	Object string // path of the ELF object that defines the variable
	Bias   uint64 // its load bias
	Model  Model

	// Static: the variable is in the static TLS area at a fixed offset from
	// the thread pointer, the same in every thread: address = tp + TPOffset
	// (negative on x86-64, where the TLS blocks sit below the TCB).
	Static   bool
	TPOffset int64

	// Dynamic TLS (Static false): the variable is at Offset in the TLS block
	// of module Module, which each thread allocates on first use and finds
	// through its DTV: address = dtv[Module].val + Offset.
	Module uint64
	Offset uint64
}

// Address returns the address of the variable in the thread whose thread
// pointer is tp; it is the walk the eBPF reader performs. It returns
// ErrNoContext when the thread never allocated its block (it has not
// touched the variable, so it has published nothing).
func (v TLSVar) Address(mem io.ReaderAt, tp uint64) (uint64, error) {
	if v.Static {
		return tp + uint64(v.TPOffset), nil
	}
	dtv, err := readU64(mem, tp+DTVPointerOffset)
	if err != nil {
		return 0, fmt.Errorf("read DTV pointer: %w", err)
	}
	if dtv == 0 {
		return 0, fmt.Errorf("%w: thread has no DTV", ErrNoContext)
	}
	n, err := readU64(mem, dtv-DTVEntrySize)
	if err != nil {
		return 0, fmt.Errorf("read DTV length: %w", err)
	}
	if v.Module > n {
		// The thread's DTV predates the module and the thread has not
		// touched the variable since (that would have grown the DTV).
		return 0, fmt.Errorf("%w: module %d beyond the thread's DTV of %d", ErrNoContext, v.Module, n)
	}
	block, err := readU64(mem, dtv+v.Module*DTVEntrySize)
	if err != nil {
		return 0, fmt.Errorf("read DTV entry %d: %w", v.Module, err)
	}
	if block == 0 || block == dtvUnallocated {
		return 0, fmt.Errorf("%w: TLS block of module %d not allocated in this thread", ErrNoContext, v.Module)
	}
	return block + v.Offset, nil
}

// LocateTLS finds otel_thread_ctx_v1 in process pid: the first object (the
// executable, then the libraries in address order) whose .dynsym defines it
// as a TLS symbol. It returns ErrNotPublished when none does.
func LocateTLS(pid int) (TLSVar, error) { return LocateTLSSymbol(pid, SymbolName) }

// LocateTLSSymbol is LocateTLS for another thread-local variable: a
// schema's own (NodeTLSSymbol).
func LocateTLSSymbol(pid int, symbol string) (TLSVar, error) {
	maps, err := readMaps(pid)
	if err != nil {
		return TLSVar{}, err
	}
	// Files known not to define the symbol are not opened again: a
	// collector attaching to a process every second read libc's
	// dynamic symbols for each, a third of the cost of attaching.
	keys := map[string]fileKey{}
	kept := maps[:0:0]
	for _, m := range maps {
		path := strings.TrimSuffix(m.name, " (deleted)")
		k, ok := keys[path]
		if !ok && strings.HasPrefix(path, "/") {
			k, _ = statKey(fmt.Sprintf("/proc/%d/root%s", pid, path))
			keys[path] = k
		}
		if k != (fileKey{}) && lacksTLS.known(k, symbol) {
			continue
		}
		kept = append(kept, m)
	}
	objs, err := loadObjects(pid, kept)
	if err != nil {
		return TLSVar{}, err
	}
	defer closeObjects(objs)
	mem, err := openMemory(pid)
	if err != nil {
		return TLSVar{}, err
	}
	defer mem.Close()
	v, err := locateTLS(objs, mem, symbol)
	if err != nil {
		// An object whose symbols were too large to read may have been
		// the one: its bound is the reason, for the caller to count.
		err = errors.Join(err, symbolErrs(objs))
	}
	for _, o := range objs {
		if k := keys[o.path]; k != (fileKey{}) && !definesTLS(o, symbol) {
			lacksTLS.add(k, symbol)
		}
	}
	return v, err
}

// definesTLS reports whether o defines symbol as a TLS variable.
func definesTLS(o *object, symbol string) bool {
	if tlsSegment(o.f) == nil {
		return false
	}
	sym, _, ok := o.lookup(symbol)
	return ok && elf.ST_TYPE(sym.Info) == elf.STT_TLS
}

// fileKey names a file's contents as far as stat can: a file replaced or
// rewritten in place gets another key.
type fileKey struct {
	dev, ino, size uint64
	mtime          int64
}

// statKey returns the key of a target's file, resolved as loadObjects
// opens it: a link out of the target's root must not give it the key of
// one of our files.
func statKey(path string) (fileKey, error) {
	f, err := targetfile.Open(path, true)
	if err != nil {
		return fileKey{}, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileKey{}, err
	}
	return fileKey{dev: st.Dev, ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim.Nano()}, nil
}

// keySet is a bounded set of files (by key) and the symbols they were
// found not to define, safe for concurrent use: when full it is emptied,
// and files are read again.
type keySet struct {
	mu sync.Mutex
	m  map[symbolKey]struct{}
}

type symbolKey struct {
	file   fileKey
	symbol string
}

// maxLacksTLS bounds lacksTLS: a host's distinct libraries number in the
// thousands at most; targets that create files to grow it only cost
// themselves the reads again.
const maxLacksTLS = 16384

// lacksTLS holds the files read and found not to define a symbol.
var lacksTLS keySet

func (s *keySet) known(k fileKey, symbol string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[symbolKey{k, symbol}]
	return ok
}

func (s *keySet) add(k fileKey, symbol string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxLacksTLS {
		s.m = map[symbolKey]struct{}{}
	}
	s.m[symbolKey{k, symbol}] = struct{}{}
}

func locateTLS(objs []*object, mem io.ReaderAt, symbol string) (TLSVar, error) {
	for _, o := range objs {
		if tlsSegment(o.f) == nil {
			continue
		}
		sym, idx, ok := o.lookup(symbol)
		if !ok || elf.ST_TYPE(sym.Info) != elf.STT_TLS {
			continue
		}
		v, err := resolveTLS(o, sym, idx, mem)
		if err != nil {
			return TLSVar{}, fmt.Errorf("%s in %s: %w", symbol, o.path, err)
		}
		return v, nil
	}
	return TLSVar{}, fmt.Errorf("%w: no object defines %s", ErrNotPublished, symbol)
}

func tlsSegment(f *elf.File) *elf.Prog {
	for _, p := range f.Progs {
		if p.Type == elf.PT_TLS {
			return p
		}
	}
	return nil
}

// rela is one x86-64 dynamic relocation.
type rela struct {
	off    uint64 // r_offset: ELF address of the GOT slot
	typ    elf.R_X86_64
	addend int64
}

// relocsFor returns the dynamic relocations (.rela.dyn, .rela.plt: every
// SHT_RELA section linked to .dynsym) against .dynsym entry idx.
func relocsFor(f *elf.File, idx int) ([]rela, error) {
	dynsym := f.Section(".dynsym")
	var out []rela
	for i, s := range f.Sections {
		if s.Type != elf.SHT_RELA || dynsym == nil || s.Link != uint32(sectionIndex(f, dynsym)) {
			continue
		}
		data, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("read section %d %s: %w", i, s.Name, err)
		}
		for off := 0; off+24 <= len(data); off += 24 {
			info := binary.LittleEndian.Uint64(data[off+8:])
			if int(info>>32) != idx {
				continue
			}
			out = append(out, rela{
				off:    binary.LittleEndian.Uint64(data[off:]),
				typ:    elf.R_X86_64(uint32(info)),
				addend: int64(binary.LittleEndian.Uint64(data[off+16:])),
			})
		}
	}
	return out, nil
}

func sectionIndex(f *elf.File, s *elf.Section) int {
	for i, t := range f.Sections {
		if t == s {
			return i
		}
	}
	return -1
}

// resolveTLS turns the symbol into a TLSVar, preferring the relocation that
// gives the cheapest access: a thread-pointer offset (initial-exec, static
// TLSDESC), then a module id and offset. The GOT slots are read from the
// process, where ld.so has filled them in.
func resolveTLS(o *object, sym elf.Symbol, idx int, mem io.ReaderAt) (TLSVar, error) {
	if o.f.Machine != elf.EM_X86_64 {
		return TLSVar{}, fmt.Errorf("machine %v not supported", o.f.Machine)
	}
	relocs, err := relocsFor(o.f, idx)
	if err != nil {
		return TLSVar{}, err
	}
	v := TLSVar{Object: o.path, Bias: o.bias}
	find := func(t elf.R_X86_64) (rela, bool) {
		for _, r := range relocs {
			if r.typ == t {
				return r, true
			}
		}
		return rela{}, false
	}

	if r, ok := find(elf.R_X86_64_TPOFF64); ok {
		off, err := readU64(mem, o.bias+r.off)
		if err != nil {
			return TLSVar{}, fmt.Errorf("read TPOFF64 GOT slot: %w", err)
		}
		v.Model, v.Static, v.TPOffset = InitialExec, true, int64(off)
		return v, nil
	}

	if r, ok := find(elf.R_X86_64_TLSDESC); ok {
		var b [16]byte
		if _, err := mem.ReadAt(b[:], int64(o.bias+r.off)); err != nil {
			return TLSVar{}, fmt.Errorf("read TLSDESC GOT pair: %w", err)
		}
		arg := binary.LittleEndian.Uint64(b[8:])
		v.Model = TLSDesc
		// On x86-64 static TLS lies below the thread pointer, so a static
		// descriptor's argument is negative, while a dynamic one's is a
		// (positive, user-space) pointer to glibc's tlsdesc_dynamic_arg,
		// which starts with {module id, offset}.
		if int64(arg) < 0 {
			v.Static, v.TPOffset = true, int64(arg)
			return v, nil
		}
		if _, err := mem.ReadAt(b[:], int64(arg)); err != nil {
			return TLSVar{}, fmt.Errorf("read TLSDESC argument at %#x: %w", arg, err)
		}
		v.Module = binary.LittleEndian.Uint64(b[:])
		v.Offset = binary.LittleEndian.Uint64(b[8:])
		// A descriptor not yet resolved (lazy binding) points at its
		// relocation instead: the offset would not match the symbol's.
		if want := sym.Value + uint64(r.addend); v.Offset != want || v.Module == 0 {
			return TLSVar{}, fmt.Errorf("TLSDESC not resolved: argument {module %d, offset %#x}, symbol offset %#x", v.Module, v.Offset, want)
		}
		return v, nil
	}

	if r, ok := find(elf.R_X86_64_DTPMOD64); ok {
		mod, err := readU64(mem, o.bias+r.off)
		if err != nil {
			return TLSVar{}, fmt.Errorf("read DTPMOD64 GOT slot: %w", err)
		}
		if mod == 0 {
			return TLSVar{}, fmt.Errorf("DTPMOD64 GOT slot not relocated")
		}
		// The GOT pair is a tls_index {module, offset}; the offset slot is
		// relocated (R_X86_64_DTPOFF64) or, for a symbol the linker
		// resolved, written at link time: read it either way.
		off, err := readU64(mem, o.bias+r.off+8)
		if err != nil {
			return TLSVar{}, fmt.Errorf("read DTPOFF64 GOT slot: %w", err)
		}
		v.Model, v.Module, v.Offset = GeneralDynamic, mod, off
		return v, nil
	}

	if o.exe {
		off, err := localExecOffset(o.f, sym)
		if err != nil {
			return TLSVar{}, err
		}
		v.Model, v.Static, v.TPOffset = LocalExec, true, off
		return v, nil
	}
	return TLSVar{}, fmt.Errorf("no TLS relocation references the symbol in a shared library (unused?)")
}

// localExecOffset computes the thread-pointer offset of a TLS symbol of the
// main executable, whose block (module 1) glibc places first, right below
// the TCB (x86-64 is TLS variant II): the block ends at the thread pointer
// rounded to the segment's alignment, with the first byte aligned like
// PT_TLS's address (glibc's _dl_determine_tlsoffset; the static linker's
// local-exec offsets agree, or the program would not run).
func localExecOffset(f *elf.File, sym elf.Symbol) (int64, error) {
	p := tlsSegment(f)
	if p == nil {
		return 0, fmt.Errorf("no PT_TLS segment")
	}
	align := max(p.Align, 1)
	if align&(align-1) != 0 {
		return 0, fmt.Errorf("PT_TLS alignment %d is not a power of two", align)
	}
	firstbyte := -p.Vaddr & (align - 1)
	blockOff := (p.Memsz-firstbyte+align-1)&^(align-1) + firstbyte
	// A TLS symbol's value is its offset in the TLS template (in
	// executables and shared objects).
	return int64(sym.Value) - int64(blockOff), nil
}
