package symbolize

import (
	"debug/elf"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/testchild"
)

// forgeDWARF returns a copy of the C test program whose DWARF sections
// are replaced by secs (name without ".debug_", bytes), or with sections
// added (a name that starts with a dot), and without .debug_aranges,
// which would name the units of the old .debug_info.
func forgeDWARF(t *testing.T, secs map[string][]byte, remove ...string) string {
	named := make(map[string][]byte)
	for name, b := range secs {
		if !strings.HasPrefix(name, ".") {
			name = ".debug_" + name
		}
		named[name] = b
	}
	return testchild.Forge(t, build(t, "c-g"), named, append(remove, ".debug_aranges")...)
}

// dwarfOf indexes the DWARF of the binary at path for a Cache counting
// bounds in rec.
func dwarfOf(t *testing.T, path string, rec *limits.Recorder) (*dwarfTables, *Cache) {
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ef.Close() })
	c := NewCache(Options{Limits: rec})
	dt, err := newDWARFTables(path, ef, nil, loadHeaders(ef), nil, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dt.release() })
	return dt, c
}

// A binary whose DIEs nest 100 000 deep: the walk skips what is below
// maxDIEDepth, quickly and without recursing that deep, and counts it
// through the Recorder, logged once for the binary.
func TestDeepDIEsRecorded(t *testing.T) {
	abbrev, info, _ := deepDWARF(100_000, false)
	path := forgeDWARF(t, map[string][]byte{"abbrev": abbrev, "info": info})
	var logged []string
	rec := limits.NewRecorder(func(k limits.Kind, subject string, err error) {
		logged = append(logged, k.String()+" "+subject+": "+err.Error())
	})
	dt, c := dwarfOf(t, path, rec)
	start := time.Now()
	for _, addr := range []uint64{dt.src.Entry, dt.src.Entry + 1} {
		dt.lookup(addr, nil, c)
	}
	t.Logf("decoded in %v; logged %q", time.Since(start), logged)
	if got := c.Stats().DWARFTooDeep; got != 1 {
		t.Errorf("Stats.DWARFTooDeep %d, want 1", got)
	}
	if got := rec.Counts()[limits.DWARFDepth]; got != 1 || len(logged) != 1 {
		t.Errorf("DWARFDepth counted %d, logged %q; want 1, once", got, logged)
	}
}

// A unit's line program is read up to maxRows rows, and the addresses
// past the last kept row have no line; a binary's units together up to
// maxLineRows, counted through the Recorder.
func TestLineRowsBound(t *testing.T) {
	path := build(t, "c-g")
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	d, err := ef.DWARF()
	if err != nil {
		t.Fatal(err)
	}
	r := d.Reader()
	cu, err := r.Next()
	if err != nil || cu == nil {
		t.Fatal(cu, err)
	}
	all := func(uint64) bool { return true }
	full, _, err := decodeUnit(d, cu.Offset, all, maxUnitLineRows)
	if err != nil || full.lines == nil || len(full.lines.rows) < 10 {
		t.Fatalf("unit of the test program: %v, %+v", err, full.lines)
	}
	const keep = 5
	cut, _, err := decodeUnit(d, cu.Offset, all, keep)
	if k, ok := limits.KindOf(err); !ok || k != limits.LineRows {
		t.Fatalf("decodeUnit with %d rows: %v, want a %v", keep, err, limits.LineRows)
	}
	if cut.lines == nil || len(cut.lines.rows) > keep {
		t.Fatalf("%d rows kept, want at most %d", len(cut.lines.rows), keep)
	}
	last := cut.lines.rows[len(cut.lines.rows)-1]
	if last.file != endOfSequence {
		t.Errorf("the last row kept is %+v, want an end of sequence", last)
	}

	rec := limits.NewRecorder(nil)
	dt, c := dwarfOf(t, path, rec)
	dt.lineRows = maxLineRows - keep
	for i := range dt.units {
		dt.unitTables(int32(i), c)
	}
	if dt.lineRows > maxLineRows {
		t.Errorf("%d rows decoded, more than %d", dt.lineRows, maxLineRows)
	}
	if got := rec.Counts()[limits.LineRows]; got == 0 {
		t.Errorf("LineRows not counted")
	}
}

// A compressed section that inflates past maxSectionBytes is not read: a
// .debug_aranges (read best effort, the units then indexed by their DIE)
// or a .debug_str (the DWARF of the binary then refused, its ELF symbols
// answering). Either is counted as CompressedSection for the binary.
func TestCompressedSectionBound(t *testing.T) {
	bomb := testchild.ZDebug(t, maxSectionBytes+1<<20)
	t.Logf("%d bytes inflate to %d", len(bomb), maxSectionBytes+1<<20)
	for _, name := range []string{".zdebug_aranges", ".zdebug_str"} {
		t.Run(name, func(t *testing.T) {
			// Without the section stored as is, which would be read.
			path := forgeDWARF(t, map[string][]byte{name: bomb}, strings.Replace(name, ".zdebug", ".debug", 1))
			rec := limits.NewRecorder(nil)
			c := NewCache(Options{Limits: rec})
			defer c.Close()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b, err := c.acquireFile(path, path)
			if err != nil {
				t.Fatal(err)
			}
			b.parse(nil, c)
			runtime.ReadMemStats(&after)
			if got := rec.Counts()[limits.CompressedSection]; got != 1 {
				t.Errorf("CompressedSection counted %d times, want 1", got)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
				t.Errorf("the parse allocated %d MB", alloc>>20)
			}
			if b.syms == nil {
				t.Error("no ELF symbols")
			}
			if (b.dwarf != nil) != (name == ".zdebug_aranges") {
				t.Errorf("DWARF tables %v", b.dwarf != nil)
			}
		})
	}
}
