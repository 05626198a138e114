package unwind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// A Table is the CFI of one binary compiled for unwinding x86-64
// stacks without frame pointers: for every address its .eh_frame covers,
// how to find the caller's stack pointer (the CFA), return address and rbp
// from the callee's registers and stack. It keeps only what an unwinder of
// compiled code follows (rsp- or rbp-based CFAs, the PLT expression, rbp
// saved on the stack, the return address at CFA-8), as the OTel eBPF
// profiler's stack deltas and samply's framehop do, in sorted 12-byte rows
// searched by binary search: no interpreter runs per sample.
type Table struct {
	base uint64     // address the row offsets are from
	rows []tableRow // by off; a row holds until the next
	// buckets[k] is the index of the row that holds at offset
	// k<<bucketShift: a lookup searches only the rows of its bucket.
	// A binary search of all of libc's rows touched ~15 cache lines a
	// frame, most of them cold by the next sample.
	buckets []uint32
}

// bucketShift: 512 bytes of code a bucket, ~10 rows of libc; the index
// costs 4 bytes a bucket (libc: 11 KB, beside 340 KB of rows).
const bucketShift = 9

// Kinds of tableRow.cfa.
const (
	cfaUnknown uint8 = iota // no FDE, or a rule the unwinder does not follow
	cfaRSP                  // CFA = rsp + cfaOff
	cfaRBP                  // CFA = rbp + cfaOff
	cfaPLT                  // a PLT entry: rsp + 8, + 8 once rip&15 >= cfaOff (after its push)
	cfaEnd                  // the return address is undefined: the outermost frame
	cfaSignal               // a signal trampoline: the interrupted registers are in the ucontext at rsp
)

// Kinds of tableRow.rbp.
const (
	rbpSame    uint8 = iota // the caller's rbp is the callee's
	rbpAt                   // saved at CFA + rbpOff
	rbpUnknown              // elsewhere: the caller's rbp is lost
)

// tableRow is the rule from one address to the next row's.
type tableRow struct {
	off    uint32
	cfaOff int32
	rbpOff int16
	cfa    uint8
	rbp    uint8
}

// Section is a binary's .eh_frame, loaded at Addr, or its .debug_frame
// (DebugFrame), as its ELF file holds it: reading the file is for the
// caller, which owns it.
type Section struct {
	Data       []byte
	Addr       uint64
	DebugFrame bool
}

// compileEHFrame compiles an .eh_frame section loaded at addr. A malformed
// section gives the rows read before the damage, with the error.
func compileEHFrame(data []byte, addr uint64, bo binary.ByteOrder) (*Table, error) {
	return Compile([]Section{{Data: data, Addr: addr}}, bo)
}

// Compile compiles the CFI sections of a binary into one table: code
// that .eh_frame leaves out (built with -fno-asynchronous-unwind-tables)
// is covered by .debug_frame where the binary has it. Where both describe
// an address, the first section's FDE wins.
func Compile(secs []Section, bo binary.ByteOrder) (*Table, error) {
	type span struct {
		lo, hi uint64
		row    tableRow
	}
	var spans []span
	var errs []error
	for _, sec := range secs {
		err := walkEHFrame(sec.Data, sec.Addr, bo, sec.DebugFrame, func(lo, hi uint64, st *frameState) {
			spans = append(spans, span{lo, hi, compileRow(st)})
		})
		if err != nil {
			name := ".eh_frame"
			if sec.DebugFrame {
				name = ".debug_frame"
			}
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	err := errors.Join(errs...)
	if len(spans) == 0 {
		return nil, err
	}
	// FDEs come in any order; one FDE's ranges ascend, so a stable sort
	// keeps them in order.
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	t := &Table{base: spans[0].lo}
	var end uint64 // of the last span added
	add := func(at uint64, r tableRow) {
		r.off = uint32(at - t.base)
		if k := len(t.rows); k > 0 {
			last := &t.rows[k-1]
			if last.off == r.off {
				*last = r // an empty range before: replaced
				return
			}
			if r.cfa == last.cfa && r.cfaOff == last.cfaOff && r.rbp == last.rbp && r.rbpOff == last.rbpOff {
				return // same rule: the row goes on
			}
		}
		t.rows = append(t.rows, r)
	}
	for _, s := range spans {
		if s.hi <= s.lo || s.hi-t.base > 1<<32-1 || s.lo < end {
			continue // not representable, or overlapping an earlier FDE
		}
		if len(t.rows) > 0 && s.lo > end {
			add(end, tableRow{}) // a gap no FDE covers
		}
		add(s.lo, s.row)
		end = s.hi
	}
	add(end, tableRow{})
	t.rows = t.rows[:len(t.rows):len(t.rows)]
	t.index()
	return t, err
}

// index fills buckets from rows.
func (t *Table) index() {
	n := int(t.rows[len(t.rows)-1].off>>bucketShift) + 1
	t.buckets = make([]uint32, n)
	i := 0
	for k := range t.buckets {
		at := uint32(k) << bucketShift
		for i+1 < len(t.rows) && t.rows[i+1].off <= at {
			i++
		}
		t.buckets[k] = uint32(i)
	}
}

// compileRow turns a CFI row into the rule the unwinder follows.
func compileRow(st *frameState) tableRow {
	var r tableRow
	switch {
	case st.signal:
		return tableRow{cfa: cfaSignal}
	case st.ra.kind == regUndefined:
		return tableRow{cfa: cfaEnd}
	case st.ra.kind != regOffset || st.ra.off != -8:
		return tableRow{} // the return address elsewhere: not followed
	case st.cfa.plt > 0:
		r.cfa, r.cfaOff = cfaPLT, int32(st.cfa.plt)
	case !st.cfa.simple || st.cfa.off != int64(int32(st.cfa.off)):
		return tableRow{}
	case st.cfa.reg == dwarfRSP:
		r.cfa, r.cfaOff = cfaRSP, int32(st.cfa.off)
	case st.cfa.reg == dwarfRBP:
		r.cfa, r.cfaOff = cfaRBP, int32(st.cfa.off)
	default:
		return tableRow{}
	}
	switch {
	case st.rbp.kind == regSame:
		r.rbp = rbpSame
	case st.rbp.kind == regOffset && st.rbp.off == int64(int16(st.rbp.off)):
		r.rbp, r.rbpOff = rbpAt, int16(st.rbp.off)
	default:
		r.rbp = rbpUnknown
	}
	return r
}

// find returns the row of vaddr; a row of kind cfaUnknown when the table
// does not cover it.
func (t *Table) find(vaddr uint64) tableRow {
	if t == nil || vaddr < t.base || vaddr-t.base > 1<<32-1 {
		return tableRow{}
	}
	off := uint32(vaddr - t.base)
	k := int(off >> bucketShift)
	if k >= len(t.buckets) {
		return t.rows[len(t.rows)-1] // past the last row: the end of the table
	}
	// The row at off is in [buckets[k], buckets[k+1]]: the last one
	// with an offset not above off.
	lo, hi := int(t.buckets[k]), len(t.rows)-1
	if k+1 < len(t.buckets) {
		hi = int(t.buckets[k+1])
	}
	for lo < hi {
		m := int(uint(lo+hi+1) >> 1)
		if t.rows[m].off <= off {
			lo = m
		} else {
			hi = m - 1
		}
	}
	if t.rows[lo].off > off {
		return tableRow{}
	}
	return t.rows[lo]
}

// AtSP reports whether the return address is the word at [rsp] at vaddr
// (CFA = rsp+8: the function has not pushed anything, or popped it all),
// and whether the table has a rule there.
func (t *Table) AtSP(vaddr uint64) (yes, known bool) {
	r := t.find(vaddr)
	return r.cfa == cfaRSP && r.cfaOff == 8, r.cfa != cfaUnknown
}

// Regs are the registers an unwinder follows, at one frame.
type Regs struct{ IP, SP, BP uint64 }

// StackCopy is the top of a thread's stack, copied at a sample
// (PERF_SAMPLE_STACK_USER): Data holds the bytes from address SP up.
type StackCopy struct {
	SP   uint64
	Data []byte
}

// read returns the word at addr, or false when the copy does not hold it.
func (s *StackCopy) read(addr uint64) (uint64, bool) {
	if addr < s.SP || addr-s.SP > uint64(len(s.Data)) || uint64(len(s.Data))-(addr-s.SP) < 8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(s.Data[addr-s.SP:]), true
}

// step returns the caller's registers by row r, from the callee's in regs,
// reading the stack copy. It reports false when r says nothing
// (cfaUnknown), the frame is the outermost (cfaEnd), or a read falls
// outside the copy.
func (r tableRow) step(regs Regs, stack *StackCopy) (Regs, bool) {
	var cfa uint64
	switch r.cfa {
	case cfaSignal:
		return signalStep(regs, stack)
	case cfaRSP:
		cfa = regs.SP + uint64(int64(r.cfaOff))
	case cfaRBP:
		cfa = regs.BP + uint64(int64(r.cfaOff))
	case cfaPLT:
		cfa = regs.SP + 8
		if regs.IP&15 >= uint64(r.cfaOff) {
			cfa += 8
		}
	default:
		return Regs{}, false
	}
	ra, ok := stack.read(cfa - 8)
	if !ok {
		return Regs{}, false
	}
	next := Regs{IP: ra, SP: cfa, BP: regs.BP}
	switch r.rbp {
	case rbpAt:
		// In an epilogue gcc leaves the rule of a register it popped
		// as it was: a slot below the stack pointer has been popped,
		// and the register holds the caller's value again.
		if at := cfa + uint64(int64(r.rbpOff)); at >= regs.SP {
			if next.BP, ok = stack.read(at); !ok {
				return Regs{}, false
			}
		}
	case rbpUnknown:
		next.BP = 0
	}
	return next, true
}

// Where the kernel's x86-64 signal frame keeps the interrupted registers:
// at a signal trampoline (__restore_rt) rsp points at the ucontext (the
// handler's return popped pretcode), whose uc_mcontext is at 40, and in
// its gregs rbp is the 10th, rsp the 15th, rip the 16th
// (<sys/ucontext.h>: REG_RBP, REG_RSP, REG_RIP).
const (
	sigMcontext = 40
	sigRBP      = sigMcontext + 8*10
	sigRSP      = sigMcontext + 8*15
	sigRIP      = sigMcontext + 8*16
)

// signalStep returns the registers a signal interrupted, from the signal
// frame at regs.SP.
func signalStep(regs Regs, stack *StackCopy) (Regs, bool) {
	bp, ok1 := stack.read(regs.SP + sigRBP)
	sp, ok2 := stack.read(regs.SP + sigRSP)
	ip, ok3 := stack.read(regs.SP + sigRIP)
	if !ok1 || !ok2 || !ok3 {
		return Regs{}, false
	}
	return Regs{IP: ip, SP: sp, BP: bp}, true
}
