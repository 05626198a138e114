package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/wire"
)

// Names a profiled program controls, each trying something on a terminal
// or on a folded line.
var hostile = struct{ leaf, mid, root, span, thread, service string }{
	leaf:    "evil;leaf\x1b[31m",
	mid:     "two\nlines\r;x 99",
	root:    "root\u009b2J\xff",
	span:    "GET /a;b\n\x1b]0;title\a",
	thread:  "worker\x1b[1A",
	service: "svc\x7f\x1b[2J",
}

// hostileFile writes a trace whose function, span, thread and service
// names carry control characters, ';', newlines and invalid UTF-8: three
// on-CPU samples of one three-frame stack in one span.
func hostileFile(t *testing.T) string {
	t.Helper()
	var b bytes.Buffer
	w := wire.NewWriter(&b)
	const start = 1_000_000_000
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.WriteClockSync(wire.ClockSyncEvent{Timestamp: start, RealtimeNs: 1_780_000_000_000_000_000}))
	must(w.WriteSegmentMetadata(wire.SegmentMetadataEvent{Timestamp: start, Entries: []wire.StringPair{
		{Key: convention.MetaService, Value: hostile.service}, {Key: convention.MetaSamplePeriod, Value: "1000000"}}}))
	for i, name := range []string{hostile.leaf, hostile.mid, hostile.root} {
		must(w.WriteSymbolTableEntry(wire.SymbolTableEntry{Addr: 0x1000 * uint64(i+1), SymbolName: name,
			SourceFile: name + ".go", SourceLine: 7}))
	}
	const trace, span = "0123456789abcdef0123456789abcdef", "0123456789abcdef"
	must(w.Write(wire.SpanSchema, start+10, wire.PooledStringValue(trace), wire.PooledStringValue(span), wire.Absent,
		wire.PooledStringValue(hostile.span), wire.VarintValue(10_000_000), wire.U32Value(7), wire.Absent,
		wire.PooledStringValue(hostile.service), wire.U32Value(42)))
	for i := range 3 {
		must(w.Write(wire.CpuSampleExtSchema, start+100+uint64(i)*1_000_000, wire.VarintValue(0), wire.U32Value(7),
			wire.U8Value(0), wire.PooledStringValue(hostile.thread), wire.PooledStackValue([]uint64{0x1000, 0x2000, 0x3000}),
			wire.VarintValue(1), wire.PooledStringValue(trace), wire.PooledStringValue(span),
			wire.PooledStringValue(hostile.span), wire.Absent, wire.Absent, wire.U32Value(42), wire.Absent, wire.Absent, wire.Absent))
	}
	must(w.Flush())
	path := filepath.Join(t.TempDir(), "hostile.bin")
	must(os.WriteFile(path, b.Bytes(), 0o600))
	return path
}

// checkPrintable fails if out holds anything a terminal acts on other than
// the newlines ending its lines: C0 controls, DEL, C1 controls, invalid
// UTF-8.
func checkPrintable(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		if r == utf8.RuneError || (r < 0x20 && r != '\n') || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			t.Errorf("%s: %q at byte %d: ...%q...", what, r, i, out[max(i-30, 0):min(i+30, len(out))])
			return
		}
	}
}

// TestHostileNamesText: what the CLI prints as text (report, dump, errors
// and warnings that quote names) escapes the names' control characters,
// and keeps them readable.
func TestHostileNamesText(t *testing.T) {
	path := hostileFile(t)
	rep := mustRun(t, "report", path)
	checkPrintable(t, "report", rep)
	for _, want := range []string{`evil;leaf\x1b[31m`, `two\nlines\r;x 99`, `root\u009b2J\xff`, `GET /a;b\n\x1b]0;title\a`,
		`svc\x7f\x1b[2J`} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %s", want)
		}
	}
	checkPrintable(t, "report --span", mustRun(t, "report", "--span", hostile.span, path))
	checkPrintable(t, "dump", mustRun(t, "dump", path))
	_, errs, code := perfprof(t, "report", "--span", "nosuch", path)
	if code != 1 || !strings.Contains(errs, `GET /a;b\n\x1b]0;title\a`) {
		t.Errorf("report --span nosuch: exit %d, stderr %q", code, errs)
	}
	checkPrintable(t, "error", errs)
	_, errs, _ = perfprof(t, "report", filepath.Join(t.TempDir(), "no\x1b[2Jfile"))
	checkPrintable(t, "error naming a file", errs)
}

// TestHostileNamesFolded: a name with ';', a newline or control characters
// stays one frame of one line: as many lines as stacks, and each line
// splits back into the stack's frames.
func TestHostileNamesFolded(t *testing.T) {
	path := hostileFile(t)
	for _, tt := range []struct {
		args   []string
		frames int
	}{
		{nil, 3},
		{[]string{"--by", "span"}, 4},
		{[]string{"--by", "thread"}, 4},
	} {
		out := mustRun(t, append(append([]string{"folded"}, tt.args...), path)...)
		checkPrintable(t, "folded", out)
		sum, stacks := foldedSum(t, out)
		if sum != 3 || len(stacks) != 1 {
			t.Fatalf("folded %v: %d samples in %d lines, want 3 in 1:\n%s", tt.args, sum, len(stacks), out)
		}
		for st := range stacks {
			if n := len(strings.Split(st, ";")); n != tt.frames {
				t.Errorf("folded %v: %q splits into %d frames, want %d", tt.args, st, n, tt.frames)
			}
		}
	}
}
