package unwind

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// DWARF register numbers of x86-64 (System V psABI, figure 3.36).
const (
	dwarfRBP = 6
	dwarfRSP = 7
	dwarfRA  = 16 // the return address column
)

// Call frame instructions (DWARF 5 section 6.4.2; GNU extensions).
const (
	cfaAdvanceLoc        = 0x40 // high 2 bits; delta in the low 6
	cfaOffset            = 0x80
	cfaRestore           = 0xc0
	cfaNop               = 0x00
	cfaSetLoc            = 0x01
	cfaAdvanceLoc1       = 0x02
	cfaAdvanceLoc2       = 0x03
	cfaAdvanceLoc4       = 0x04
	cfaOffsetExtended    = 0x05
	cfaRestoreExtended   = 0x06
	cfaUndefined         = 0x07
	cfaSameValue         = 0x08
	cfaRegister          = 0x09
	cfaRememberState     = 0x0a
	cfaRestoreState      = 0x0b
	cfaDefCFA            = 0x0c
	cfaDefCFARegister    = 0x0d
	cfaDefCFAOffset      = 0x0e
	cfaDefCFAExpression  = 0x0f
	cfaExpression        = 0x10
	cfaOffsetExtendedSF  = 0x11
	cfaDefCFASF          = 0x12
	cfaDefCFAOffsetSF    = 0x13
	cfaValOffset         = 0x14
	cfaValOffsetSF       = 0x15
	cfaValExpression     = 0x16
	cfaGNUArgsSize       = 0x2e
	cfaGNUNegOffsetExtSF = 0x2f
)

// Pointer encodings (DW_EH_PE_*, LSB 5.0 section 10.5.1).
const (
	pePtr     = 0x00 // absptr
	peULEB    = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSLEB    = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c
	pePCRel   = 0x10
	peDataRel = 0x30
	peOmit    = 0xff
)

// maxRememberDepth bounds DW_CFA_remember_state nesting.
const maxRememberDepth = 16

// cfaRule is the CFA rule of one row: register + offset, or not that
// (an expression, or nothing yet). plt is set for the one expression
// x86-64 linkers emit, for PLT entries: rsp+8, plus 8 from the
// instruction at offset plt of each 16-byte entry on (after the push).
type cfaRule struct {
	reg    uint64
	off    int64
	simple bool
	plt    uint8
}

func (r cfaRule) atSP() bool { return r.simple && r.reg == dwarfRSP && r.off == 8 }

// Kinds of regRule.
const (
	regSame      = iota // the caller's value (the initial rule of rbp)
	regOffset           // saved at CFA+off
	regUndefined        // none: for the return address, the outermost frame
	regOther            // in another register, or an expression: not followed
)

// regRule is the rule of one register of one row.
type regRule struct {
	kind uint8
	off  int64
}

// frameState is a row of the CFI table, for the registers an unwinder
// needs on x86-64: the CFA, rbp and the return address; signal says the
// FDE is a signal trampoline's (its CIE's 'S').
type frameState struct {
	cfa    cfaRule
	rbp    regRule
	ra     regRule
	signal bool
}

// setReg sets the rule of register reg, if it is one the state keeps.
func (s *frameState) setReg(reg uint64, r regRule) {
	switch reg {
	case dwarfRBP:
		s.rbp = r
	case dwarfRA:
		s.ra = r
	}
}

// pltExpr is the CFA expression of a PLT entry, but for the byte at
// pltExprAt: DW_OP_lit11 (or lit10), the offset in the entry from which
// the push has happened.
var pltExpr = []byte{0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x00, 0x2a, 0x33, 0x24, 0x22}

const pltExprAt = 6

// pltThreshold returns the threshold of the PLT CFA expression e, 0 when e
// is another expression.
func pltThreshold(e []byte) uint8 {
	if len(e) != len(pltExpr) {
		return 0
	}
	for i, b := range e {
		if i != pltExprAt && b != pltExpr[i] {
			return 0
		}
	}
	if lit := e[pltExprAt]; lit >= 0x30 && lit <= 0x4f { // DW_OP_lit0..31
		return lit - 0x30
	}
	return 0
}

// cie is what an FDE needs from its CIE.
type cie struct {
	codeAlign uint64
	dataAlign int64
	fdeEnc    byte
	hasAug    bool // 'z': FDEs carry augmentation data to skip
	signal    bool // 'S': its FDEs describe signal trampolines
	initial   []byte
}

// ehReader reads the fields of .eh_frame; on a short read it sets err.
type ehReader struct {
	b    []byte
	off  int
	addr uint64 // section address, for pcrel pointers
	bo   binary.ByteOrder
	err  error
}

func (r *ehReader) fail() {
	if r.err == nil {
		r.err = fmt.Errorf("offset %#x: truncated", r.off)
	}
	r.off = len(r.b)
}

func (r *ehReader) bytes(n int) []byte {
	if n < 0 || r.off+n > len(r.b) {
		r.fail()
		return nil
	}
	v := r.b[r.off : r.off+n]
	r.off += n
	return v
}

func (r *ehReader) u8() byte {
	if b := r.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *ehReader) u16() uint64 {
	if b := r.bytes(2); b != nil {
		return uint64(r.bo.Uint16(b))
	}
	return 0
}

func (r *ehReader) u32() uint64 {
	if b := r.bytes(4); b != nil {
		return uint64(r.bo.Uint32(b))
	}
	return 0
}

func (r *ehReader) u64() uint64 {
	if b := r.bytes(8); b != nil {
		return r.bo.Uint64(b)
	}
	return 0
}

func (r *ehReader) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if r.off >= len(r.b) {
			r.fail()
			return 0
		}
		c := r.b[r.off]
		r.off++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *ehReader) sleb() int64 {
	var v int64
	shift := uint(0)
	for {
		if r.off >= len(r.b) {
			r.fail()
			return 0
		}
		c := r.b[r.off]
		r.off++
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

func (r *ehReader) cstring() []byte {
	for i := r.off; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := r.b[r.off:i]
			r.off = i + 1
			return s
		}
	}
	r.fail()
	return nil
}

// pointer reads a pointer in encoding enc. Only the value formats and the
// pcrel application are supported (what gcc and clang emit for .eh_frame);
// others set err.
func (r *ehReader) pointer(enc byte) uint64 {
	if enc == peOmit {
		return 0
	}
	at := r.addr + uint64(r.off)
	var v uint64
	switch enc & 0x0f {
	case pePtr, peUdata8, peSdata8:
		v = r.u64()
	case peULEB:
		v = r.uleb()
	case peSLEB:
		v = uint64(r.sleb())
	case peUdata2:
		v = r.u16()
	case peSdata2:
		v = uint64(int64(int16(r.u16())))
	case peUdata4:
		v = r.u32()
	case peSdata4:
		v = uint64(int64(int32(r.u32())))
	default:
		r.err = fmt.Errorf("offset %#x: pointer encoding %#x not supported", r.off, enc)
		r.off = len(r.b)
		return 0
	}
	switch enc & 0x70 {
	case 0:
	case pePCRel:
		v += at
	default:
		r.err = fmt.Errorf("offset %#x: pointer application %#x not supported", r.off, enc&0x70)
		r.off = len(r.b)
	}
	return v
}

// walkEHFrame reads an .eh_frame section (LSB 5.0 section 10.6: a sequence
// of CIEs and FDEs, ended by a zero length or the end of the section)
// loaded at addr, runs the CFI program of every FDE and calls emit with
// each address range and its row, FDE by FDE (ranges ascend within one).
// An FDE that does not decode is skipped (its code stays unknown); a
// malformed section stops the walk, and the first error is returned.
//
// With debugFrame it reads a .debug_frame section (DWARF 5 section 6.4.1)
// instead: a CIE's id is 0xffffffff, and an FDE names its CIE by its offset
// from the section's start.
func walkEHFrame(data []byte, addr uint64, bo binary.ByteOrder, debugFrame bool, emit func(lo, hi uint64, st *frameState)) error {
	cieID := uint64(0)
	if debugFrame {
		cieID = 0xffffffff
	}
	cies := map[int]*cie{}
	var firstErr error
	r := &ehReader{b: data, addr: addr, bo: bo}
	for r.off+4 <= len(data) {
		start := r.off
		length := r.u32()
		if length == 0 {
			break // terminator
		}
		if length == 0xffffffff {
			length = r.u64()
		}
		bodyStart := r.off
		if r.err != nil || length > uint64(len(data)-bodyStart) {
			if firstErr == nil {
				firstErr = fmt.Errorf("entry at %#x: length %d overruns the section", start, length)
			}
			break
		}
		end := bodyStart + int(length)
		er := &ehReader{b: data[:end], off: bodyStart, addr: addr, bo: bo}
		idPos := er.off
		id := er.u32()
		if id == cieID {
			c, err := parseCIE(er)
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("CIE at %#x: %w", start, err)
			}
			if err == nil {
				cies[start] = c
			}
		} else {
			cieAt := idPos - int(id)
			if debugFrame {
				cieAt = int(id)
			}
			c := cies[cieAt]
			if c == nil && cieAt >= 0 && cieAt < len(data) {
				// A CIE after its FDE is legal, if unusual.
				cr := &ehReader{b: data, off: cieAt, addr: addr, bo: bo}
				if l := cr.u32(); l != 0 && l != 0xffffffff && cr.err == nil && cr.off+int(l) <= len(data) {
					cr.b = data[:cr.off+int(l)]
					if cr.u32() == cieID {
						c, _ = parseCIE(cr)
						cies[cieAt] = c
					}
				}
			}
			if c != nil {
				_, _, err := runFDE(er, c, emit)
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("FDE at %#x: %w", start, err)
				}
			}
		}
		r.off = end
	}
	return firstErr
}

// parseCIE reads a CIE after its id field.
func parseCIE(r *ehReader) (*cie, error) {
	c := &cie{fdeEnc: pePtr}
	version := r.u8()
	if version != 1 && version != 3 && version != 4 {
		return nil, fmt.Errorf("version %d not supported", version)
	}
	aug := r.cstring()
	if len(aug) > 0 && aug[0] == 'e' && len(aug) > 1 && aug[1] == 'h' {
		r.u64() // old GCC "eh" data pointer
	}
	if version == 4 {
		r.u8() // address_size
		r.u8() // segment_selector_size
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if version == 1 {
		r.u8() // return_address_register
	} else {
		r.uleb()
	}
	if len(aug) > 0 && aug[0] == 'z' {
		c.hasAug = true
		n := r.uleb()
		augEnd := r.off + int(n)
		if n > uint64(len(r.b)-r.off) {
			return nil, errors.New("augmentation data overruns the CIE")
		}
		for _, ch := range aug[1:] {
			switch ch {
			case 'R':
				c.fdeEnc = r.u8()
			case 'P':
				enc := r.u8()
				r.pointer(enc &^ 0x80) // personality routine; indirect does not change the size
			case 'L':
				r.u8() // LSDA encoding
			case 'S':
				c.signal = true
			case 'B', 'G':
				// AArch64 BTI and MTE: no data
			default:
				// Unknown letters: their data is skipped with augEnd.
			}
		}
		r.off = augEnd
	} else if len(aug) > 0 && !(aug[0] == 'e' && string(aug) == "eh") {
		return nil, fmt.Errorf("augmentation %q not supported", aug)
	}
	if r.err != nil {
		return nil, r.err
	}
	c.initial = r.b[r.off:]
	return c, nil
}

// runFDE reads an FDE after its CIE pointer and runs the CIE's initial
// instructions and then its own, calling emit for each address range with
// its row.
func runFDE(r *ehReader, c *cie, emit func(lo, hi uint64, st *frameState)) (uint64, uint64, error) {
	lo := r.pointer(c.fdeEnc)
	n := r.pointer(c.fdeEnc & 0x0f) // pc_range: the value format only
	if c.hasAug {
		k := r.uleb()
		r.bytes(int(min(k, uint64(len(r.b)))))
	}
	if r.err != nil {
		return 0, 0, r.err
	}
	if n == 0 || lo+n < lo {
		return lo, n, nil
	}
	hi := lo + n
	st := frameState{signal: c.signal}
	var stack []frameState
	loc := lo
	// The CIE's instructions set the initial row; they must not advance.
	ir := &ehReader{b: c.initial, bo: r.bo, addr: 0}
	if err := runCFA(ir, c, &st, nil, &stack, &loc, r.bo, nil); err != nil {
		return lo, n, fmt.Errorf("initial instructions: %w", err)
	}
	initial := st
	loc = lo
	err := runCFA(r, c, &st, &initial, &stack, &loc, r.bo, func(next uint64) {
		if next > hi {
			next = hi
		}
		if next > loc {
			emit(loc, next, &st)
		}
	})
	if err != nil {
		// Keep what was decoded before the bad instruction; the rest of
		// the function stays unknown.
		return lo, n, err
	}
	if loc < hi {
		emit(loc, hi, &st)
	}
	return lo, n, nil
}

// runCFA interprets call frame instructions, tracking the rules of the CFA,
// rbp and the return address in st. initial is the row the CIE's
// instructions set, for DW_CFA_restore (nil while running those). advance
// is called with the new location before loc moves (nil: the instructions
// may not advance).
func runCFA(r *ehReader, c *cie, st *frameState, initial *frameState, stack *[]frameState, loc *uint64, bo binary.ByteOrder, advance func(next uint64)) error {
	rule := &st.cfa
	restore := func(reg uint64) {
		if initial != nil {
			switch reg {
			case dwarfRBP:
				st.rbp = initial.rbp
			case dwarfRA:
				st.ra = initial.ra
			}
		} else {
			st.setReg(reg, regRule{})
		}
	}
	move := func(delta uint64) error {
		if advance == nil {
			return errors.New("advance in initial instructions")
		}
		next := *loc + delta*c.codeAlign
		advance(next)
		*loc = next
		return nil
	}
	for r.off < len(r.b) && r.err == nil {
		op := r.u8()
		var err error
		switch op & 0xc0 {
		case cfaAdvanceLoc:
			err = move(uint64(op & 0x3f))
		case cfaOffset:
			st.setReg(uint64(op&0x3f), regRule{kind: regOffset, off: int64(r.uleb()) * c.dataAlign})
		case cfaRestore:
			restore(uint64(op & 0x3f))
		default:
			switch op {
			case cfaNop:
			case cfaSetLoc:
				if advance == nil {
					return errors.New("set_loc in initial instructions")
				}
				next := r.pointer(c.fdeEnc)
				if next < *loc {
					return fmt.Errorf("set_loc backwards to %#x", next)
				}
				advance(next)
				*loc = next
			case cfaAdvanceLoc1:
				err = move(uint64(r.u8()))
			case cfaAdvanceLoc2:
				err = move(r.u16())
			case cfaAdvanceLoc4:
				err = move(r.u32())
			case cfaOffsetExtended:
				reg := r.uleb()
				st.setReg(reg, regRule{kind: regOffset, off: int64(r.uleb()) * c.dataAlign})
			case cfaRegister, cfaValOffset:
				st.setReg(r.uleb(), regRule{kind: regOther})
				r.uleb()
			case cfaRestoreExtended:
				restore(r.uleb())
			case cfaUndefined:
				st.setReg(r.uleb(), regRule{kind: regUndefined})
			case cfaSameValue:
				st.setReg(r.uleb(), regRule{kind: regSame})
			case cfaGNUArgsSize:
				r.uleb()
			case cfaRememberState:
				if len(*stack) >= maxRememberDepth {
					return errors.New("remember_state nested too deep")
				}
				*stack = append(*stack, *st)
			case cfaRestoreState:
				if len(*stack) == 0 {
					return errors.New("restore_state without remember_state")
				}
				*st = (*stack)[len(*stack)-1]
				*stack = (*stack)[:len(*stack)-1]
			case cfaDefCFA:
				reg := r.uleb()
				*rule = cfaRule{reg: reg, off: int64(r.uleb()), simple: true}
			case cfaDefCFASF:
				reg := r.uleb()
				*rule = cfaRule{reg: reg, off: r.sleb() * c.dataAlign, simple: true}
			case cfaDefCFARegister:
				rule.reg = r.uleb()
			case cfaDefCFAOffset:
				rule.off = int64(r.uleb())
			case cfaDefCFAOffsetSF:
				rule.off = r.sleb() * c.dataAlign
			case cfaDefCFAExpression:
				e := r.bytes(int(min(r.uleb(), uint64(len(r.b)))))
				*rule = cfaRule{plt: pltThreshold(e)}
			case cfaExpression, cfaValExpression:
				st.setReg(r.uleb(), regRule{kind: regOther})
				r.bytes(int(min(r.uleb(), uint64(len(r.b)))))
			case cfaOffsetExtendedSF:
				reg := r.uleb()
				st.setReg(reg, regRule{kind: regOffset, off: r.sleb() * c.dataAlign})
			case cfaGNUNegOffsetExtSF:
				reg := r.uleb()
				st.setReg(reg, regRule{kind: regOffset, off: -r.sleb() * c.dataAlign})
			case cfaValOffsetSF:
				st.setReg(r.uleb(), regRule{kind: regOther})
				r.sleb()
			default:
				return fmt.Errorf("call frame instruction %#x not supported", op)
			}
		}
		if err != nil {
			return err
		}
	}
	return r.err
}
