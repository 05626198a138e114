package unwind

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/testchild"
)

// readelfRow is one row of `readelf --debug-dump=frames-interp`: from lo
// to hi, the CFA rule and the columns of rbp and the return address as
// readelf prints them ("c-16", "u", ...; "" when the FDE has no column).
type readelfRow struct {
	lo, hi  uint64
	cfa     string
	rbp, ra string
	signal  bool // of an FDE whose CIE says 'S': a signal trampoline
}

// readelfFrames runs readelf on bin and returns the rows of .eh_frame's
// FDEs. An FDE without instructions has its CIE's row, for which readelf
// prints no table.
func readelfFrames(t *testing.T, bin string) []readelfRow {
	t.Helper()
	// readelf exits 1 on warnings about other sections (libc's debug
	// link); what it printed of .eh_frame stands.
	out, err := exec.Command(testchild.LookTool(t, "readelf"), "--debug-dump=frames-interp", bin).Output()
	if len(out) == 0 {
		t.Fatalf("readelf: %v", err)
	}
	var rows []readelfRow
	var cols []string
	var fdeLo, fdeHi uint64
	inFDE, inEH := false, false
	cieRows := map[string]readelfRow{} // by the CIE's offset
	cieSignal := map[string]bool{}
	cieAt, fdeCIE := "", ""
	var pending []readelfRow
	flush := func() {
		if cieAt != "" && len(pending) > 0 {
			cieRows[cieAt] = pending[0]
		}
		cieAt = ""
		if !inFDE {
			pending = nil
			return
		}
		if len(pending) == 0 {
			r, ok := cieRows[fdeCIE]
			if !ok {
				t.Fatalf("FDE at %#x of CIE %s, not seen", fdeLo, fdeCIE)
			}
			r.lo = fdeLo
			pending = []readelfRow{r}
		}
		for i := range pending {
			pending[i].signal = cieSignal[fdeCIE]
			pending[i].hi = fdeHi
			if i+1 < len(pending) {
				pending[i].hi = pending[i+1].lo
			}
		}
		rows = append(rows, pending...)
		pending, inFDE = nil, false
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		// A register rule is printed "r10 (r10)": one field.
		line = strings.ReplaceAll(line, " (", "(")
		if strings.HasPrefix(line, "Contents of the ") {
			flush()
			inEH = strings.HasPrefix(line, "Contents of the .eh_frame section") ||
				strings.HasPrefix(line, "Contents of the .debug_frame section")
			clear(cieRows) // CIEs are named by their offset in their section
			clear(cieSignal)
			continue
		}
		if !inEH {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) >= 4 && (f[3] == "FDE" || f[3] == "CIE"):
			flush()
			if f[3] == "CIE" {
				cieAt = f[0]
				cieSignal[cieAt] = len(f) > 4 && strings.Contains(f[4], "S")
			}
			if f[3] == "FDE" {
				fdeCIE = strings.TrimPrefix(f[4], "cie=")
				pc := strings.TrimPrefix(f[5], "pc=")
				lo, hi, _ := strings.Cut(pc, "..")
				fdeLo, _ = strconv.ParseUint(lo, 16, 64)
				fdeHi, _ = strconv.ParseUint(hi, 16, 64)
				inFDE = fdeHi > fdeLo
			}
		case len(f) >= 2 && f[0] == "LOC" && f[1] == "CFA":
			cols = f[2:]
		case (inFDE || cieAt != "") && len(f) >= 2 && len(f[0]) == 16:
			loc, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				continue
			}
			r := readelfRow{lo: loc, cfa: f[1]}
			for i, c := range cols {
				if 2+i >= len(f) {
					break
				}
				switch c {
				case "rbp":
					r.rbp = f[2+i]
				case "ra":
					r.ra = f[2+i]
				}
			}
			if k := len(pending); k > 0 && pending[k-1].lo == loc {
				pending[k-1] = r
			} else {
				pending = append(pending, r)
			}
		}
	}
	flush()
	return rows
}

// wantRow is the unwind row readelf's row says, and whether it is one the
// compiled table must match exactly (an expression CFA is the PLT's or
// not followed: either is right).
func wantRow(r readelfRow) (tableRow, bool) {
	if r.signal {
		return tableRow{cfa: cfaSignal}, true
	}
	if r.ra == "u" {
		return tableRow{cfa: cfaEnd}, true
	}
	if r.ra != "c-8" {
		return tableRow{}, true
	}
	var w tableRow
	reg, off, ok := strings.Cut(r.cfa, "+")
	n, err := strconv.ParseInt(off, 10, 32)
	switch {
	case r.cfa == "exp":
		return tableRow{}, false
	case !ok || err != nil:
		return tableRow{}, true
	case reg == "rsp":
		w.cfa, w.cfaOff = cfaRSP, int32(n)
	case reg == "rbp":
		w.cfa, w.cfaOff = cfaRBP, int32(n)
	default:
		return tableRow{}, true
	}
	switch {
	case r.rbp == "" || r.rbp == "u" || r.rbp == "s":
		w.rbp = rbpSame
	case strings.HasPrefix(r.rbp, "c-"):
		n, err := strconv.ParseInt(r.rbp[1:], 10, 16)
		if err != nil {
			w.rbp = rbpUnknown
		} else {
			w.rbp, w.rbpOff = rbpAt, int16(n)
		}
	default:
		w.rbp = rbpUnknown
	}
	return w, true
}

// TestUnwindTableMatchesReadelf compiles the .eh_frame of Debian's libc,
// libstdc++ and libz, and of a C program built at -O2 without frame
// pointers, and the .debug_frame of the same program built without
// .eh_frame, and checks every row readelf interprets from them, at its
// first and last address: the CFA rule, where rbp was saved, and the
// outermost frames.
func TestUnwindTableMatchesReadelf(t *testing.T) {
	bins := []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/lib/x86_64-linux-gnu/libz.so.1"}
	testchild.LookTool(t, "gcc")
	dir := t.TempDir()
	bins = append(bins, buildC(t, filepath.Join(dir, "x"), "-O2", "-fomit-frame-pointer"),
		// Its own code in .debug_frame only (the C runtime's objects keep
		// their .eh_frame).
		buildC(t, filepath.Join(dir, "x-debug-frame"), "-O2", "-fomit-frame-pointer", "-g",
			"-fno-asynchronous-unwind-tables", "-fno-unwind-tables"))
	for _, bin := range bins {
		t.Run(bin[strings.LastIndexByte(bin, '/')+1:], func(t *testing.T) {
			ef, tab := tableOf(t, bin)
			plt := map[string]bool{}
			inPLT := func(a uint64) bool {
				for _, s := range ef.Sections {
					if strings.HasPrefix(s.Name, ".plt") && a >= s.Addr && a < s.Addr+s.Size {
						return true
					}
				}
				return false
			}
			rows := readelfFrames(t, bin)
			var checked, exprs int
			kinds := map[uint8]int{}
			for _, r := range rows {
				if r.hi <= r.lo {
					continue // a row at the FDE's end covers nothing
				}
				want, exact := wantRow(r)
				for _, a := range []uint64{r.lo, r.hi - 1} {
					got := tab.find(a)
					got.off = 0
					if !exact {
						exprs++
						if got.cfa == cfaPLT {
							plt[fmt.Sprintf("%#x", a)] = true
							if !inPLT(a) {
								t.Errorf("%#x: a PLT rule outside .plt*", a)
							}
						} else if got.cfa != cfaUnknown {
							t.Errorf("%#x: CFA expression compiled to %+v", a, got)
						}
						continue
					}
					if got != want {
						t.Fatalf("%#x (readelf row %+v): compiled %+v, want %+v", a, r, got, want)
					}
					kinds[got.cfa]++
					checked++
				}
			}
			t.Logf("%d rows compiled to %d; %d addresses checked (by CFA kind %v), %d with a CFA expression (%d of them PLT entries)",
				len(rows), len(tab.rows), checked, kinds, exprs, len(plt))
			if checked < 10 {
				t.Errorf("only %d addresses checked", checked)
			}
		})
	}
}

// TestUnwindRowStep unwinds by hand-made rows over a hand-made stack: rsp-
// and rbp-based CFAs, rbp restored from the stack, the two halves of a PLT
// entry, and the rows that stop.
func TestUnwindRowStep(t *testing.T) {
	const sp = 0x7fff0000
	stack := &StackCopy{SP: sp, Data: make([]byte, 0x30)}
	for a, v := range map[uint64]uint64{sp: 0x401000, sp + 8: 0x401234, sp + 16: 0x7fff0100, sp + 24: 0x405678, sp + 0x28: 0x7fff0200} {
		binary.LittleEndian.PutUint64(stack.Data[a-sp:], v)
	}
	for _, c := range []struct {
		name string
		row  tableRow
		regs Regs
		want Regs
		ok   bool
	}{
		{"rsp+16", tableRow{cfa: cfaRSP, cfaOff: 16}, Regs{IP: 1, SP: sp, BP: 7}, Regs{IP: 0x401234, SP: sp + 16, BP: 7}, true},
		{"rsp+16, rbp at c-16", tableRow{cfa: cfaRSP, cfaOff: 24, rbp: rbpAt, rbpOff: -16}, Regs{SP: sp}, Regs{IP: 0x7fff0100, SP: sp + 24, BP: 0x401234}, true},
		{"rbp+16", tableRow{cfa: cfaRBP, cfaOff: 16, rbp: rbpAt, rbpOff: -16}, Regs{SP: 1, BP: sp + 16}, Regs{IP: 0x405678, SP: sp + 32, BP: 0x7fff0100}, true},
		{"plt before push", tableRow{cfa: cfaPLT, cfaOff: 11}, Regs{IP: 0x1006, SP: sp}, Regs{IP: 0x401000, SP: sp + 8}, true},
		{"plt after push", tableRow{cfa: cfaPLT, cfaOff: 11}, Regs{IP: 0x100b, SP: sp}, Regs{IP: 0x401234, SP: sp + 16}, true},
		{"rbp lost", tableRow{cfa: cfaRSP, cfaOff: 16, rbp: rbpUnknown}, Regs{SP: sp, BP: 9}, Regs{IP: 0x401234, SP: sp + 16}, true},
		{"rbp popped in an epilogue", tableRow{cfa: cfaRSP, cfaOff: 16, rbp: rbpAt, rbpOff: -24}, Regs{SP: sp, BP: 9}, Regs{IP: 0x401234, SP: sp + 16, BP: 9}, true},
		{"unknown", tableRow{}, Regs{SP: sp}, Regs{}, false},
		{"outermost", tableRow{cfa: cfaEnd}, Regs{SP: sp}, Regs{}, false},
		{"outside the stack copy", tableRow{cfa: cfaRSP, cfaOff: 4096}, Regs{SP: sp}, Regs{}, false},
	} {
		got, ok := c.row.step(c.regs, stack)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: step = %+v, %v; want %+v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// FuzzCompileEHFrame: any section compiles to a table whose rows ascend,
// or an error, without a panic or a loop.
func FuzzCompileEHFrame(f *testing.F) {
	if ef, err := elf.Open("/lib/x86_64-linux-gnu/libz.so.1"); err == nil {
		if sec := ef.Section(".eh_frame"); sec != nil {
			if data, err := sec.Data(); err == nil {
				f.Add(data[:min(len(data), 4096)], sec.Addr)
			}
		}
		ef.Close()
	}
	f.Add([]byte{20, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x1b, 0x0c, 7, 8, 0x90, 1, 0, 0}, uint64(0x1000))
	f.Add([]byte{16, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 0x10, 1, 0x1b, 0x0c, 7, 8}, uint64(0x1000))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		tab, _ := compileEHFrame(data, addr, binary.LittleEndian)
		if tab == nil {
			return
		}
		tab.AtSP(addr)
		for i := 1; i < len(tab.rows); i++ {
			if tab.rows[i].off <= tab.rows[i-1].off {
				t.Fatalf("rows %d and %d do not ascend: %+v %+v", i-1, i, tab.rows[i-1], tab.rows[i])
			}
		}
	})
}

// tableOf opens bin (skipping the test when it cannot) and compiles
// its .eh_frame and .debug_frame; the file is closed with the test.
func tableOf(tb testing.TB, bin string) (*elf.File, *Table) {
	tb.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		testchild.Unavailable(tb, "%v", err)
	}
	tb.Cleanup(func() { ef.Close() })
	var secs []Section
	for _, name := range []string{".eh_frame", ".debug_frame"} {
		sec := ef.Section(name)
		if sec == nil || sec.Type == elf.SHT_NOBITS {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			tb.Fatalf("read %s of %s: %v", name, bin, err)
		}
		secs = append(secs, Section{Data: data, Addr: sec.Addr, DebugFrame: name == ".debug_frame"})
	}
	tab, err := Compile(secs, ef.ByteOrder)
	if err != nil || tab == nil {
		tb.Fatalf("compile the .eh_frame of %s: %v", bin, err)
	}
	return ef, tab
}

// syntheticStack builds, over libc's compiled table, a stack of n frames
// at real libc addresses with rsp-based CFAs (as code without frame
// pointers has): the registers at the leaf, the stack copy, and the return
// addresses an unwinder must find.
func syntheticStack(tb testing.TB, n int) (*Table, Regs, *StackCopy, []uint64) {
	tb.Helper()
	_, tab := tableOf(tb, "/lib/x86_64-linux-gnu/libc.so.6")
	// Addresses inside rows with a frame of some size, spread over libc.
	var pcs []uint64
	for i := 0; i < len(tab.rows)-1 && len(pcs) < n+1; i += len(tab.rows) / (4 * n) {
		r := tab.rows[i]
		if r.cfa == cfaRSP && r.cfaOff > 8 && tab.rows[i+1].off > r.off+1 {
			pcs = append(pcs, tab.base+uint64(r.off)+1)
		}
	}
	if len(pcs) < n+1 {
		tb.Fatalf("only %d usable rows", len(pcs))
	}
	const sp = 0x7ffd0000
	stack := &StackCopy{SP: sp, Data: make([]byte, 64<<10)}
	regs := Regs{IP: pcs[0], SP: sp, BP: 0x1234}
	at := regs
	var want []uint64
	type slot struct{ at, v uint64 }
	var ras []slot
	for i := 0; i < n; i++ {
		r := tab.find(at.IP)
		if i > 0 {
			r = tab.find(at.IP - 1) // pcs[i] is a return address: +1 into its row
		}
		cfa := at.SP + uint64(r.cfaOff)
		// A row of an epilogue may still say rbp is saved below the
		// stack pointer, where the callee's return address is here:
		// the return addresses are written last, over it.
		if r.rbp == rbpAt {
			if a := cfa + uint64(int64(r.rbpOff)); a >= sp {
				binary.LittleEndian.PutUint64(stack.Data[a-sp:], at.BP)
			}
		}
		ras = append(ras, slot{cfa - 8, pcs[i+1]})
		want = append(want, pcs[i+1])
		at = Regs{IP: pcs[i+1], SP: cfa, BP: at.BP}
	}
	for _, s := range ras {
		binary.LittleEndian.PutUint64(stack.Data[s.at-sp:], s.v)
	}
	return tab, regs, stack, want
}

// TestUnwindWalk unwinds 16 frames of libc code without frame pointers from
// a stack copy, and stops cleanly on a copy too short for them.
func TestUnwindWalk(t *testing.T) {
	tab, regs, stack, want := syntheticStack(t, 16)
	u := libcUnwinder(tab)
	got, _ := u.Unwind(regs, stack, make([]uint64, 0, 64))
	if !slices.Equal(got[:min(len(got), len(want))], want) || len(got) < len(want) {
		t.Fatalf("unwound %x, want %x first", got, want)
	}
	short := &StackCopy{SP: stack.SP, Data: stack.Data[:64]}
	got, stop := u.Unwind(regs, short, make([]uint64, 0, 64))
	if len(got) >= len(want) || !slices.Equal(got, want[:len(got)]) || stop != StopStackCopy {
		t.Fatalf("on a 64-byte copy: %x, %v", got, stop)
	}
}

// TestRowCache: rows a RowCache keeps for one Unwinder are not used for
// another at the same pcs (here one whose binary has no unwind table, so
// that the frame pointers are followed), and a warm cache unwinds as a
// cold one.
func TestRowCache(t *testing.T) {
	tab, regs, stack, want := syntheticStack(t, 16)
	withRows := libcUnwinder(tab)
	noRows := libcUnwinder(nil)
	var c RowCache
	wantNoRows, wantStop := noRows.Unwind(regs, stack, make([]uint64, 0, 64))
	for round := range 3 {
		got, _ := withRows.UnwindCached(regs, stack, make([]uint64, 0, 64), &c)
		if !slices.Equal(got[:min(len(got), len(want))], want) || len(got) < len(want) {
			t.Fatalf("round %d: unwound %x, want %x first", round, got, want)
		}
		got, stop := noRows.UnwindCached(regs, stack, make([]uint64, 0, 64), &c)
		if !slices.Equal(got, wantNoRows) || stop != wantStop {
			t.Fatalf("round %d: without rows, unwound %x (%v), want %x (%v)", round, got, stop, wantNoRows, wantStop)
		}
	}
	if slices.Equal(wantNoRows, want[:min(len(want), len(wantNoRows))]) && len(wantNoRows) >= len(want) {
		t.Fatal("the frame pointers unwind the synthetic stack: the test cannot tell the unwinders apart")
	}
}

// libcUnwinder is an Unwinder whose one mapping is libc's table at its
// link-time addresses.
func libcUnwinder(tab *Table) *Unwinder {
	return NewUnwinder([]Mapping{{Start: 0, Limit: 1 << 47, CFI: tab, Binary: true}})
}

// BenchmarkUnwind16 unwinds a 16-frame stack of libc code without frame
// pointers from its stack copy, as the read loop does (Unwinder.Unwind):
// a mapping and a row lookup and two reads a frame.
func BenchmarkUnwind16(b *testing.B) {
	tab, regs, stack, want := syntheticStack(b, 16)
	u := libcUnwinder(tab)
	out := make([]uint64, 0, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, _ = u.Unwind(regs, stack, out[:0])
	}
	if len(out) != len(want) || !slices.Equal(out, want) {
		b.Fatalf("unwound %x, want %x", out, want)
	}
}

// BenchmarkUnwind16Cached is BenchmarkUnwind16 with a RowCache, as the
// engine unwinds.
func BenchmarkUnwind16Cached(b *testing.B) {
	tab, regs, stack, want := syntheticStack(b, 16)
	u := libcUnwinder(tab)
	out := make([]uint64, 0, 16)
	var c RowCache
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, _ = u.UnwindCached(regs, stack, out[:0], &c)
	}
	if len(out) != len(want) || !slices.Equal(out, want) {
		b.Fatalf("unwound %x, want %x", out, want)
	}
}

// FuzzUnwind: registers and a stack copy that hold anything give a stack
// no longer than the room given, and a reason, without a panic or a loop.
// The seeds are a true 16-frame stack and pieces of it.
func FuzzUnwind(f *testing.F) {
	tab, regs, stack, _ := syntheticStack(f, 16)
	u := libcUnwinder(tab)
	f.Add(regs.IP, regs.BP, stack.Data[:4096])
	f.Add(regs.IP, regs.BP, stack.Data[:64])
	f.Add(regs.IP+7, uint64(stack.SP+64), stack.Data[8:1024])
	f.Fuzz(func(t *testing.T, ip, bp uint64, data []byte) {
		const sp = 0x7ffd0000
		out := make([]uint64, 0, 127)
		got, stop := u.Unwind(Regs{IP: ip, SP: sp, BP: bp}, &StackCopy{SP: sp, Data: data}, out)
		if len(got) > cap(out) || stop > StopMaxFrames {
			t.Fatalf("%d frames, stop %v", len(got), stop)
		}
	})
}

// TestUnwindTableBuckets: the bucketed lookup finds the row a binary
// search of all rows finds, at every row's first and last address, one
// past them, and addresses past the table's end, in libc's table.
func TestUnwindTableBuckets(t *testing.T) {
	_, tab := tableOf(t, "/lib/x86_64-linux-gnu/libc.so.6")
	ref := func(vaddr uint64) tableRow {
		if vaddr < tab.base || vaddr-tab.base > 1<<32-1 {
			return tableRow{}
		}
		off := uint32(vaddr - tab.base)
		i := sort.Search(len(tab.rows), func(i int) bool { return tab.rows[i].off > off }) - 1
		if i < 0 {
			return tableRow{}
		}
		return tab.rows[i]
	}
	n := 0
	for i, r := range tab.rows {
		for _, a := range []uint64{uint64(r.off), uint64(r.off) + 1, uint64(r.off) - 1, uint64(r.off) + 1<<bucketShift} {
			vaddr := tab.base + a
			if got, want := tab.find(vaddr), ref(vaddr); got != want {
				t.Fatalf("row %d: find(%#x) = %+v, want %+v", i, vaddr, got, want)
			}
			n++
		}
	}
	last := tab.base + uint64(tab.rows[len(tab.rows)-1].off)
	for _, vaddr := range []uint64{tab.base - 1, last + 1<<20, tab.base + 1<<32} {
		if got, want := tab.find(vaddr), ref(vaddr); got != want {
			t.Fatalf("find(%#x) = %+v, want %+v", vaddr, got, want)
		}
	}
	t.Logf("%d rows, %d buckets (%d bytes), %d lookups checked", len(tab.rows), len(tab.buckets), 4*len(tab.buckets), n)
}

// BenchmarkUnwindTableFind looks up the rows of 4 096 addresses spread
// over libc, in turn: the row lookup of an unwinder whose samples land
// all over the code.
func BenchmarkUnwindTableFind(b *testing.B) {
	_, tab := tableOf(b, "/lib/x86_64-linux-gnu/libc.so.6")
	span := uint64(tab.rows[len(tab.rows)-1].off)
	pcs := make([]uint64, 4096)
	for i := range pcs {
		pcs[i] = tab.base + uint64(i)*span/uint64(len(pcs)) + uint64(i%7)*3
	}
	b.ResetTimer()
	var n int
	for i := range b.N {
		if tab.find(pcs[i%len(pcs)]).cfa != cfaUnknown {
			n++
		}
	}
	if n == 0 {
		b.Fatal("no row found")
	}
}
