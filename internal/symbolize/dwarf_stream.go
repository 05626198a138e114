package symbolize

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// .debug_info is read as a stream, one unit at a time, and never held
// whole (but for files whose units refer to each other, see dwarfTables).
// A compressed section (SHF_COMPRESSED, as Debian ships its debug files)
// can only be read forward: debug/elf decompresses it from its start, and
// going back restarts the decompression. So the parse reads it once from
// start to end, keeping the unit headers and skipping the bodies, and a
// report reads it once up to the last unit it needs (Process.Prepare).

// maxUnitBytes bounds the bytes of one unit read into memory, to read its
// top DIE or decode it: a unit's header says its length, and a forged one
// must not make us allocate it. The largest unit of libc's debug file is
// 84 KB. A larger unit is left out of the index (Stats.DWARFUnitsTooLarge):
// its addresses are named by the ELF symbols.
const maxUnitBytes = 64 << 20

// maxInfoBytes bounds a .debug_info that is read as a stream: nothing is
// allocated by its size, but its units are read from it, and every parse
// reads it all. A compressed section's header says what it inflates to.
const maxInfoBytes = 16 << 30

// maxUnitEntries bounds the unit headers (and padding words) a parse reads:
// a hostile section of zeros inflated from a few MB would otherwise be read
// four bytes at a time, billions of times.
const maxUnitEntries = 1 << 22

// maxUnitHeader is the most bytes of a unit header after its length: a
// DWARF 5 type unit in the 64-bit format (version, unit type, address size,
// abbreviation offset, type signature, type offset).
const maxUnitHeader = 2 + 1 + 1 + 8 + 8 + 8

// unitHeader is where a unit of .debug_info is: its header, its first DIE
// and its end, its abbreviation table, and whether it is a type unit (DWARF
// 5), which holds no code.
type unitHeader struct {
	off, end uint64
	die      dwarf.Offset
	abbrev   uint64 // offset in .debug_abbrev
	typeUnit bool
}

// unitReader reads the units of .debug_info in order, forward only: their
// headers (next) and, of those it is asked for, their bytes (unit, read).
type unitReader struct {
	r     io.Reader
	seek  io.Seeker // r, when skipping bytes need not read them; else nil
	bo    binary.ByteOrder
	size  uint64 // of the section
	off   uint64 // in the section, of the next byte of r
	count *int64 // adds the bytes read from r, if not nil

	cur     unitHeader // the unit whose header next read last
	end     uint64     // where the next unit header is
	head    [12 + maxUnitHeader]byte
	nhead   int // bytes of cur read into head
	entries int // headers and padding words read
}

// errUnitOrder is the error of a read that would have to go back.
var errUnitOrder = errors.New("units not read in order")

// next reads the header of the next unit, skipping what is left of the
// current one. It returns false at the end of the section. It reads the
// headers as debug/dwarf does (DWARF 2 to 5, 32- and 64-bit):
// .debug_aranges names units by the offset of their header, debug/dwarf by
// the offset of their first DIE, and it does not tell one from the other.
func (ur *unitReader) next() (unitHeader, bool, error) {
	for {
		if err := ur.skipTo(ur.end); err != nil {
			return unitHeader{}, false, err
		}
		off := ur.off
		if off >= ur.size {
			return unitHeader{}, false, nil
		}
		if ur.entries++; ur.entries > maxUnitEntries {
			return unitHeader{}, false, fmt.Errorf("unit header at offset %#x: more than %d units", off, maxUnitEntries)
		}
		if ur.size-off < 4 {
			return unitHeader{}, false, fmt.Errorf("unit header at offset %#x: truncated", off)
		}
		if err := ur.fill(ur.head[0:4]); err != nil {
			return unitHeader{}, false, err
		}
		bo := ur.bo
		length, hdr, is64 := uint64(bo.Uint32(ur.head[:])), uint64(4), false
		if length == 0xffffffff {
			if ur.size-off < 12 {
				return unitHeader{}, false, fmt.Errorf("unit header at offset %#x: truncated", off)
			}
			if err := ur.fill(ur.head[4:12]); err != nil {
				return unitHeader{}, false, err
			}
			length, hdr, is64 = bo.Uint64(ur.head[4:]), 12, true
		}
		if length == 0 {
			ur.end = off + hdr // padding, as debug/dwarf reads it
			continue
		}
		if length > ur.size-off-hdr || length < 2 {
			return unitHeader{}, false, fmt.Errorf("unit at offset %#x: length %#x out of range", off, length)
		}
		ur.end = off + hdr + length
		n := hdr + min(length, maxUnitHeader)
		if err := ur.fill(ur.head[hdr:n]); err != nil {
			return unitHeader{}, false, err
		}
		ur.nhead = int(n)
		b := ur.head[:n]
		version := bo.Uint16(b[hdr:])
		offSize := uint64(4)
		if is64 {
			offSize = 8
		}
		var (
			size     uint64 // of the rest of the header
			abbrevAt uint64 // where debug_abbrev_offset is in it
			typeUnit bool
		)
		switch {
		case 2 <= version && version <= 4:
			size, abbrevAt = 2+offSize+1, 2 // version, debug_abbrev_offset, address_size
		case version == 5:
			if length < 3 {
				return unitHeader{}, false, fmt.Errorf("unit at offset %#x: truncated", off)
			}
			size, abbrevAt = 2+1+1+offSize, 4 // version, unit_type, address_size, debug_abbrev_offset
			// Other unit types have nothing more, as debug/dwarf reads them.
			switch b[hdr+2] {
			case 0x04, 0x05: // DW_UT_skeleton, DW_UT_split_compile: dwo_id
				size += 8
			case 0x02, 0x06: // DW_UT_type, DW_UT_split_type: type_signature, type_offset
				size += 8 + offSize
				typeUnit = true
			}
		default:
			return unitHeader{}, false, fmt.Errorf("unit at offset %#x: unknown version %d", off, version)
		}
		// So the header is all in b: size < length, and size ≤ maxUnitHeader.
		if size >= length {
			return unitHeader{}, false, fmt.Errorf("unit at offset %#x: no DIE", off)
		}
		abbrev := uint64(bo.Uint32(b[hdr+abbrevAt:]))
		if is64 {
			abbrev = bo.Uint64(b[hdr+abbrevAt:])
		}
		ur.cur = unitHeader{off: off, end: ur.end, die: dwarf.Offset(off + hdr + size), abbrev: abbrev, typeUnit: typeUnit}
		return ur.cur, true, nil
	}
}

// unit returns the bytes of the unit whose header next just read, in buf.
func (ur *unitReader) unit(buf *unitBuf) ([]byte, error) {
	h := ur.cur
	if ur.off != h.off+uint64(ur.nhead) {
		return nil, fmt.Errorf("unit at offset %#x: %w", h.off, errUnitOrder)
	}
	b, err := buf.get(h.end - h.off)
	if err != nil {
		return nil, fmt.Errorf("unit at offset %#x: %w", h.off, err)
	}
	copy(b, ur.head[:ur.nhead])
	if err := ur.fill(b[ur.nhead:]); err != nil {
		return nil, err
	}
	return b, nil
}

// read returns the bytes [off, end) of the section, a unit, in buf. off
// may not be before what was read already.
func (ur *unitReader) read(off, end uint64, buf *unitBuf) ([]byte, error) {
	if end < off || end > ur.size {
		return nil, fmt.Errorf("unit at offset %#x: end %#x out of range", off, end)
	}
	if err := ur.skipTo(off); err != nil {
		return nil, err
	}
	if ur.off != off {
		return nil, fmt.Errorf("unit at offset %#x: %w", off, errUnitOrder)
	}
	b, err := buf.get(end - off)
	if err != nil {
		return nil, fmt.Errorf("unit at offset %#x: %w", off, err)
	}
	if err := ur.fill(b); err != nil {
		return nil, err
	}
	ur.end = max(ur.end, end)
	return b, nil
}

// skipTo moves forward to off: it never goes back.
func (ur *unitReader) skipTo(off uint64) error {
	if off <= ur.off {
		return nil
	}
	n := int64(off - ur.off)
	var err error
	if ur.seek != nil {
		_, err = ur.seek.Seek(n, io.SeekCurrent)
	} else {
		var done int64
		done, err = io.CopyN(io.Discard, ur.r, n)
		if ur.count != nil {
			*ur.count += done
		}
	}
	if err != nil {
		return fmt.Errorf("read .debug_info at offset %#x: %w", ur.off, err)
	}
	ur.off = off
	return nil
}

// fill reads the next len(b) bytes into b.
func (ur *unitReader) fill(b []byte) error {
	n, err := io.ReadFull(ur.r, b)
	if ur.count != nil {
		*ur.count += int64(n)
	}
	if err != nil {
		return fmt.Errorf("read .debug_info at offset %#x: %w", ur.off+uint64(n), err)
	}
	ur.off += uint64(n)
	return nil
}

// unitBuf holds the bytes of one unit at a time, reused from unit to unit:
// on the Go heap when small, else in memory mapped for it, as the large
// sections are (see mapSectionBytes). free unmaps it.
type unitBuf struct {
	b      []byte
	mapped bool
}

// get returns n bytes of ub, overwriting what it held.
func (ub *unitBuf) get(n uint64) ([]byte, error) {
	if n > maxUnitBytes {
		return nil, fmt.Errorf("%d bytes, more than %d", n, maxUnitBytes)
	}
	if n <= uint64(cap(ub.b)) {
		return ub.b[:n], nil
	}
	ub.free()
	if n < mapSectionBytes {
		ub.b = make([]byte, n)
		return ub.b, nil
	}
	mem, err := mapBytes(int(n))
	if err != nil {
		return nil, err
	}
	ub.b, ub.mapped = mem, true
	return mem, nil
}

// held is the bytes ub holds.
func (ub *unitBuf) held() int64 { return int64(cap(ub.b)) }

func (ub *unitBuf) free() {
	if ub.mapped {
		_ = unix.Munmap(ub.b) // memory of our own: nothing to report
	}
	*ub = unitBuf{}
}

// mapBytes returns n bytes of anonymous memory, outside the Go heap, for
// munmap to free.
func mapBytes(n int) ([]byte, error) {
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes: %w", n, err)
	}
	return mem, nil
}
