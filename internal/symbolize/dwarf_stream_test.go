package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/testchild"
)

// eagerResolver names the addresses of a binary as objfile.resolve does,
// from the eager parse of its DWARF (eager_test.go, the oracle) and its
// symbols.
type eagerResolver struct {
	lines *eagerLineTable
	funcs *eagerFuncTable
	syms  *symtab
}

// newEagerResolver parses the binary at path, with its DWARF and symbols
// from dwarfPath (itself, or its separate debug file), as parse chooses
// them.
func newEagerResolver(tb testing.TB, path, dwarfPath string) *eagerResolver {
	tb.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer ef.Close()
	df, err := elf.Open(dwarfPath)
	if err != nil {
		tb.Fatal(err)
	}
	defer df.Close()
	loads := loadHeaders(ef)
	syms, err := ef.Symbols()
	if err != nil || len(syms) == 0 {
		syms, err = df.Symbols()
	}
	if err != nil || len(syms) == 0 {
		syms, _ = ef.DynamicSymbols()
	}
	d, err := df.DWARF()
	if err != nil {
		tb.Fatal(err)
	}
	lines, funcs, err := newEagerDWARFTables(d, loads)
	if err != nil {
		tb.Fatal(err)
	}
	return &eagerResolver{lines: lines, funcs: funcs, syms: newSymtab(syms, loads)}
}

// agrees reports whether got are the frames of addr: the eager parse's,
// or where subprograms share its range, those of one of them (see
// eagerTwins). It returns the eager parse's.
func (o *eagerResolver) agrees(addr uint64, got []Frame) (bool, []Frame) {
	var sym *symbol
	if o.syms != nil {
		if s, ok := o.syms.lookup(addr); ok {
			sym = &s
		}
	}
	want, file, line := eagerLookup(o.lines, o.funcs, addr, sym)
	if want == nil && sym != nil {
		want = []Frame{{Function: demangleName(sym.name), SystemName: sym.name, File: file, Line: line}}
	}
	if reflect.DeepEqual(got, want) {
		return true, want
	}
	same := func(fr []Frame) bool { return reflect.DeepEqual(got, fr) }
	return slices.ContainsFunc(eagerTwins(o.funcs, addr, file, line, sym), same), want
}

// libcDebugFile returns the libc mapped by p and its separate debug file,
// found by build id as the parse finds it; it skips the test without one.
func libcDebugFile(t *testing.T, p *Process) (*Mapping, string) {
	t.Helper()
	for _, m := range p.Mappings() {
		if !strings.HasPrefix(filepath.Base(m.Path), "libc.so") {
			continue
		}
		if id := m.BuildID; len(id) > 2 {
			dbg := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
			if _, err := os.Stat(dbg); err == nil {
				return m, dbg
			}
		}
		testchild.Unavailable(t, "no debug file for libc %s %s (apt-get install libc6-dbg)", m.Path, m.BuildID)
	}
	t.Fatal("no libc mapping")
	return nil, ""
}

// infoSection returns the size of the .debug_info of the ELF file path,
// decompressed, and whether it is compressed.
func infoSection(tb testing.TB, path string) (size uint64, compressed bool) {
	tb.Helper()
	f, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	s := dwarfSection(f, "info")
	if s == nil {
		tb.Fatalf("%s: no .debug_info", path)
	}
	return s.Size, s.Flags&elf.SHF_COMPRESSED != 0
}

// TestPrepareLibc names addresses spread over libc, with its separate
// debug file (Debian compresses its .debug_info), as reports do: Prepare,
// then the lookups. Every answer is the eager parse's (eager_test.go). The
// first report's units are decoded in the pass its parse makes over
// .debug_info, the second's in one more pass, none by a lookup; addresses
// looked up unprepared are answered all the same, their units decoded by
// passes of their own. The DWARF held at once (the other sections and one
// unit) stays below the size of .debug_info.
func TestPrepareLibc(t *testing.T) {
	ch := start(t, build(t, "c-g"))
	p, c := openProcess(t, ch.pid, Options{})
	libc, dbg := libcDebugFile(t, p)
	infoSize, compressed := infoSection(t, dbg)
	t.Logf("%s: .debug_info of %d bytes, compressed: %v", dbg, infoSize, compressed)
	oracle := newEagerResolver(t, libc.Path, dbg)
	bias := loadBias(t, ch.pid, libc.Path)

	addrs := sampleAddrs(t, dbg, 1000)
	var bin *objfile
	report := func(name string, addrs []uint64, prepare bool) Stats {
		t.Helper()
		before := c.Stats()
		pcs := make([]uint64, len(addrs))
		for i, a := range addrs {
			pcs[i] = a + bias
		}
		if prepare {
			p.Prepare(pcs)
		}
		diffs := 0
		for i, pc := range pcs {
			loc := p.Lookup(pc)
			if ok, want := oracle.agrees(addrs[i], loc.Frames); !ok {
				if diffs++; diffs <= 10 {
					t.Errorf("%s: %#x:\ngot   %s\neager %s", name, addrs[i], fmtFullFrames(loc.Frames), fmtFullFrames(want))
				}
			}
			if loc.Mapping != libc {
				t.Fatalf("%s: %#x is not in libc: %+v", name, pc, loc.Mapping)
			}
		}
		if ms := p.find(pcs[0]); bin == nil {
			bin = ms.bin
		}
		after := c.Stats()
		t.Logf("%s: %d addresses, %d units decoded (%d by a lookup), %d bytes of .debug_info read; %d differences",
			name, len(addrs), after.DWARFUnitsDecoded-before.DWARFUnitsDecoded, after.DWARFUnprepared-before.DWARFUnprepared,
			after.DWARFInfoRead-before.DWARFInfoRead, diffs)
		return before
	}

	// The first report parses libc: one pass over .debug_info, which
	// decodes the units of its addresses on its way.
	var first, second []uint64
	for i, a := range addrs {
		if i%2 == 0 {
			first = append(first, a)
		} else if i%4 == 1 {
			second = append(second, a)
		}
	}
	report("first report", first, true)
	s := c.Stats()
	if s.BinariesParsed != 1 || s.DWARFUnitsDecoded == 0 || s.DWARFUnprepared != 0 || s.DWARFInfoRead != int64(infoSize) {
		t.Errorf("first report: %+v; want libc parsed, units decoded, none by a lookup, %d bytes of .debug_info read (one pass)", s, infoSize)
	}
	if bin.dwarf == nil || bin.dwarf.sec.info != nil || bin.dwarf.wholeFile {
		t.Fatalf("libc's .debug_info is held whole")
	}

	// The second, with addresses between those: the units of the new
	// ones in one pass, read no further than the last of them.
	before := report("second report", second, true)
	s = c.Stats()
	if s.DWARFUnitsDecoded == before.DWARFUnitsDecoded || s.DWARFUnprepared != 0 ||
		s.DWARFInfoRead-before.DWARFInfoRead > int64(infoSize) || s.DWARFLoads != 1 {
		t.Errorf("second report: %+v; want new units decoded, none by a lookup, at most %d bytes of .debug_info read, no load", s, infoSize)
	}

	// Addresses whose units are not yet decoded, looked up unprepared:
	// each unit by a pass of its own.
	var unprepared []uint64
	for _, a := range addrs {
		units := bin.dwarf.unitsAt(a, nil)
		if len(units) > 0 && !slices.ContainsFunc(units, func(u int32) bool { return bin.dwarf.units[u].tables != nil }) {
			unprepared = append(unprepared, a)
			if len(unprepared) == 8 {
				break
			}
		}
	}
	before = report("unprepared", unprepared, false)
	s = c.Stats()
	if n := s.DWARFUnitsDecoded - before.DWARFUnitsDecoded; n == 0 || s.DWARFUnprepared != n {
		t.Errorf("unprepared: %+v; want every unit decoded by a lookup", s)
	}

	if s.DWARFPeakBytes <= 0 || s.DWARFPeakBytes >= int64(infoSize) {
		t.Errorf("%d bytes of DWARF held at once; want fewer than .debug_info's %d", s.DWARFPeakBytes, infoSize)
	}
	t.Logf("%d bytes of DWARF held at most, %d of sections (.debug_info: %d)", s.DWARFPeakBytes, bin.dwarf.held(), infoSize)
}

// TestDWARFUnitsReadAt decodes the units of a program of several
// compilation units whose DWARF is not compressed (gcc -gz=none), in the
// binary, in a separate debug file, and without .debug_aranges (each unit
// indexed by its top DIE): the parse reads the unit headers only (and the
// units without a set), each unit is read at its offset when it is
// decoded, and the answers are the eager parse's.
func TestDWARFUnitsReadAt(t *testing.T) {
	dir := t.TempDir()
	names, units, main := unitSources(t, dir)
	srcs := append([]string{main}, units...)
	bin := filepath.Join(dir, "units")
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run("gcc", append([]string{"-O2", "-g", "-gz=none", "-Wl,--build-id", "-o", bin}, srcs...)...)
	// A stripped copy that names its debug file, next to it.
	stripped := filepath.Join(dir, "units-stripped")
	run("objcopy", "--only-keep-debug", bin, bin+".debug")
	run("objcopy", "--strip-debug", "--add-gnu-debuglink="+bin+".debug", bin, stripped)
	noAranges := filepath.Join(dir, "units-noaranges")
	run("objcopy", "--remove-section=.debug_aranges", bin, noAranges)

	for _, tc := range []struct {
		name, path, dwarfPath string
		topDIE                bool
	}{
		{"binary", bin, bin, false},
		{"debug file", stripped, bin + ".debug", false},
		{"no aranges", noAranges, noAranges, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			infoSize, compressed := infoSection(t, tc.dwarfPath)
			if compressed {
				t.Fatalf("%s: .debug_info is compressed", tc.dwarfPath)
			}
			compareDWARF(t, tc.path, 0) // through the tables alone

			ef, err := elf.Open(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			syms, _ := ef.Symbols()
			ef.Close()
			addr := map[string]uint64{}
			for _, s := range syms {
				if slices.Contains(names, s.Name) {
					addr[s.Name] = s.Value
				}
			}
			oracle := newEagerResolver(t, tc.path, tc.dwarfPath)
			c := NewCache(Options{})
			defer c.Close()
			b, err := c.acquireFile(tc.path, tc.path)
			if err != nil {
				t.Fatal(err)
			}
			b.seenAt(0, tc.path) // as mapped: its debuglink is looked for next to it
			// lookup resolves function n at off. It returns how many
			// bytes of .debug_info it read, and how many bytes the
			// units it decoded have.
			lookup := func(n string, off uint64) (read, units int64) {
				t.Helper()
				parsed := b.dwarf != nil
				var undecoded []int32
				if parsed {
					for u := range b.dwarf.units {
						if b.dwarf.units[u].tables == nil {
							undecoded = append(undecoded, int32(u))
						}
					}
				}
				before := c.Stats().DWARFInfoRead
				a := addr[n] + off
				fr := b.lookup(a, c)
				if ok, want := oracle.agrees(a, fr); !ok || len(fr) == 0 || fr[len(fr)-1].Function != n {
					t.Errorf("%s+%d: %s, eager %s", n, off, fmtFullFrames(fr), fmtFullFrames(want))
				}
				if b.dwarf == nil {
					t.Fatal("no DWARF")
				}
				if !parsed {
					for u := range b.dwarf.units {
						undecoded = append(undecoded, int32(u))
					}
				}
				for _, u := range undecoded {
					if un := &b.dwarf.units[u]; un.tables != nil {
						units += int64(un.end - un.hdr)
					}
				}
				return c.Stats().DWARFInfoRead - before, units
			}

			// The parse reads the unit headers, and the units of
			// unit_a: those that hold it, and without aranges all
			// of them, each for its top DIE.
			read, units := lookup("unit_a", 0)
			if b.dwarf.infoAt == nil || b.dwarf.sec.info != nil {
				t.Fatal(".debug_info not read at offsets")
			}
			headers := int64(len(b.dwarf.units)) * (4 + maxUnitHeader)
			t.Logf("the parse read %d bytes of .debug_info's %d, %d of them of the units it decoded", read, infoSize, units)
			switch {
			case tc.topDIE && read != int64(infoSize):
				t.Errorf("parse read %d bytes of .debug_info; want all %d", read, infoSize)
			case !tc.topDIE && (read < units || read > units+headers || read >= int64(infoSize)):
				t.Errorf("parse read %d bytes of .debug_info; want the %d of the units decoded and at most %d of headers, of %d", read, units, headers, infoSize)
			}
			// The other units are read at their offsets, when decoded.
			before := c.Stats()
			for _, n := range names[1:] {
				read, units := lookup(n, 0)
				if units == 0 || read != units {
					t.Errorf("%s: read %d bytes of .debug_info; want those of the units it decoded, %d", n, read, units)
				}
				if read, _ := lookup(n, 1); read != 0 {
					t.Errorf("%s+1: read %d bytes of .debug_info; want none", n, read)
				}
			}
			if s := c.Stats(); s.DWARFLoads != 1 || s.DWARFUnprepared != s.DWARFUnitsDecoded-before.DWARFUnitsDecoded || s.DWARFUnprepared < len(names)-1 {
				t.Errorf("%+v: want one load, and the units of the other functions decoded by their lookups", s)
			}
		})
	}
}

// TestUnitReaderBounds reads hostile unit headers: a section whose header
// says it is huge, and units that say they are. Nothing is allocated by
// what they claim.
func TestUnitReaderBounds(t *testing.T) {
	bo := binary.LittleEndian
	// A 64-bit unit of 1 TiB, DWARF 4, at the start of a section that
	// says it has 2 TiB but ends after the header.
	var info []byte
	info = bo.AppendUint32(info, 0xffffffff)
	info = bo.AppendUint64(info, 1<<40)
	info = bo.AppendUint16(info, 4)
	info = bo.AppendUint64(info, 0) // debug_abbrev_offset
	info = append(info, 8)          // address_size
	info = append(info, make([]byte, 32)...)
	ur := &unitReader{r: struct{ io.Reader }{bytes.NewReader(info)}, bo: bo, size: 2 << 40}
	h, ok, err := ur.next()
	if err != nil || !ok || h.end != 12+1<<40 {
		t.Fatalf("next = %+v, %v, %v", h, ok, err)
	}
	var buf unitBuf
	defer buf.free()
	if _, err := ur.unit(&buf); err == nil || buf.held() != 0 {
		t.Errorf("read a unit of 1 TiB: %v, %d bytes held", err, buf.held())
	}
	// Skipping it reads to the end of what there is, and fails.
	if _, _, err := ur.next(); !errors.Is(err, io.EOF) {
		t.Errorf("next after a unit past the end: %v; want EOF", err)
	}
	// Read as a stream, a unit larger than maxUnitBytes is not read.
	if _, err := (&unitReader{r: bytes.NewReader(nil), size: 1 << 40}).read(0, maxUnitBytes+1, &buf); err == nil || buf.held() != 0 {
		t.Errorf("read %d bytes: %v, %d bytes held", maxUnitBytes+1, err, buf.held())
	}

	// Padding words, a million of them, are read as debug/dwarf reads
	// them, up to maxUnitEntries headers.
	zeros := make([]byte, 4*(maxUnitEntries+1))
	ur = &unitReader{r: bytes.NewReader(zeros), bo: bo, size: uint64(len(zeros))}
	if _, _, err := ur.next(); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("next over %d padding words: %v", maxUnitEntries+1, err)
	}
}

// BenchmarkFirstSymbolizeLibcStream resolves the 48 addresses of a first
// report of a steady target (BenchmarkFirstSymbolizeLibc) in a new cache,
// libc's debug file holding its .debug_info whole as before ("whole"),
// read as a stream and prepared as a report does ("stream"), and read as a
// stream by lookups one at a time ("lookups"). It reports the CPU time
// (user and system, all threads: the garbage collector's too), the most
// bytes of DWARF held at once, and the bytes of .debug_info read.
func BenchmarkFirstSymbolizeLibcStream(b *testing.B) {
	path, funcs := libcFuncs(b)
	byName := make(map[string]elf.Symbol)
	for _, s := range funcs {
		byName[s.Name] = s
	}
	var addrs []uint64
	for _, name := range libcReportFuncs {
		if s, ok := byName[name]; ok {
			for i := range uint64(4) {
				addrs = append(addrs, s.Value+i*s.Size/4)
			}
		}
	}
	if len(addrs) < 20 {
		b.Skipf("%s: only %d of the report's addresses found", path, len(addrs))
	}
	for _, mode := range []string{"whole", "stream", "lookups"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			var st Stats
			cpu := cpuTime()
			for b.Loop() {
				c := NewCache(Options{})
				c.holdInfo = mode == "whole"
				bin, err := c.acquireFile(path, path)
				if err != nil {
					b.Fatal(err)
				}
				if mode != "lookups" {
					bin.prepare(slices.Clone(addrs), c)
				}
				for _, a := range addrs {
					if len(bin.lookup(a, c)) == 0 {
						b.Fatalf("%s: %#x not resolved", path, a)
					}
				}
				st = c.Stats()
				c.Close()
			}
			b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/1000/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(st.DWARFPeakBytes), "B-peak")
			b.ReportMetric(float64(st.DWARFInfoRead), "B-info-read")
			b.ReportMetric(float64(st.BytesHeld), "B-held")
			b.ReportMetric(float64(st.DWARFUnitsDecoded), "units")
		})
	}
}

// cpuTime is the CPU time of the process so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
