package symbolize

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/perfprof/perfprof/internal/testchild"
)

// BenchmarkLookupCached is the hot path: a pc already in the per-binary cache.
func BenchmarkLookupCached(b *testing.B) {
	ch := start(b, build(b, "go"))
	p, _ := openProcess(b, ch.pid, Options{})
	pc := ch.addr(b, "main.burnA") + 5
	if len(p.Lookup(pc).Frames) != 1 {
		b.Fatal("not resolved")
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(p.Lookup(pc).Frames) != 1 {
			b.Fatal("not resolved")
		}
	}
}

// BenchmarkFirstSymbolizeGo is the cold path: read the maps, open and parse
// the Go binary, resolve one address.
func BenchmarkFirstSymbolizeGo(b *testing.B) {
	ch := start(b, build(b, "go"))
	pc := ch.addr(b, "main.burnA") + 5
	b.ReportAllocs()
	for b.Loop() {
		c := NewCache(Options{})
		p, err := c.Process(ch.pid)
		if err != nil {
			b.Fatal(err)
		}
		if len(p.Lookup(pc).Frames) != 1 {
			b.Fatal("not resolved")
		}
		c.Close()
	}
}

// symbolizeFile is the cold path for a binary given by path, without a
// process: open it, parse it on the first lookup of vaddr (an ELF virtual
// address), and resolve vaddr. It returns the cache, for its Stats.
func symbolizeFile(b *testing.B, path string, vaddr uint64) *Cache {
	c := NewCache(Options{})
	bin, err := c.acquireFile(path, path)
	if err != nil {
		b.Fatal(err)
	}
	if len(bin.lookup(vaddr, c)) == 0 {
		b.Fatalf("%s: %#x not resolved", path, vaddr)
	}
	return c
}

// benchmarkFirstSymbolizeFile measures symbolizeFile and reports the bytes
// the cache holds for the binary afterwards (Stats.BytesHeld).
func benchmarkFirstSymbolizeFile(b *testing.B, path string, vaddr uint64) {
	b.ReportAllocs()
	var held int64
	for b.Loop() {
		c := symbolizeFile(b, path, vaddr)
		held = c.Stats().BytesHeld
		c.Close()
	}
	b.ReportMetric(float64(held), "B-held/binary")
}

// BenchmarkFirstSymbolizeGoLarge symbolizes the first address of the
// collector binary, a ~35 MB stripped Go binary (make build).
func BenchmarkFirstSymbolizeGoLarge(b *testing.B) {
	const path = "../../_build/otelcol-perfprof"
	ef, err := elf.Open(path)
	if err != nil {
		b.Skipf("no collector binary (run make build first): %v", err)
	}
	entry := ef.Entry
	ef.Close()
	benchmarkFirstSymbolizeFile(b, path, entry)
}

// libcPaths are where the system's libc may be.
var libcPaths = []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/lib64/libc.so.6"}

// libcFuncs returns the path of the system's libc and its sized function
// symbols, from its separate debug file when it has one (as the parse
// finds it, by build id), else from its own .symtab or .dynsym.
func libcFuncs(tb testing.TB) (string, []elf.Symbol) {
	tb.Helper()
	for _, path := range libcPaths {
		ef, err := elf.Open(path)
		if err != nil {
			continue
		}
		symFile := path
		if id := buildID(ef); len(id) > 2 {
			dbg := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
			if _, err := os.Stat(dbg); err == nil {
				symFile = dbg
			}
		}
		ef.Close()
		if ef, err = elf.Open(symFile); err != nil {
			tb.Fatal(err)
		}
		syms, err := ef.Symbols()
		if err != nil || len(syms) == 0 {
			syms, _ = ef.DynamicSymbols()
		}
		ef.Close()
		var funcs []elf.Symbol
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Size != 0 {
				funcs = append(funcs, s)
			}
		}
		if len(funcs) > 0 {
			return path, funcs
		}
	}
	testchild.Unavailable(tb, "no libc.so.6 with function symbols found")
	return "", nil
}

// libcReportFuncs are functions a steady target spends its time in: an
// allocator, formatting, copying, locking, I/O and sleeping.
var libcReportFuncs = []string{
	"malloc", "_int_malloc", "free", "_int_free", "__vfprintf_internal",
	"__memmove_avx_unaligned_erms", "__strlen_avx2", "___pthread_mutex_lock",
	"__libc_write", "__libc_read", "__clock_gettime", "__nanosleep",
}

// benchmarkSymbolizeLibc resolves addrs, ELF virtual addresses of the
// system's libc, in a new cache, the first time it sees the binary, as a
// report does (Process.Prepare, then the lookups), and reports the bytes
// the cache holds afterwards (Stats.BytesHeld), and after three reports
// that resolve nothing new (three calls of Trim).
func benchmarkSymbolizeLibc(b *testing.B, path string, addrs []uint64) {
	b.ReportAllocs()
	var held, idle int64
	for b.Loop() {
		c := NewCache(Options{})
		bin, err := c.acquireFile(path, path)
		if err != nil {
			b.Fatal(err)
		}
		bin.prepare(slices.Clone(addrs), c)
		for _, a := range addrs {
			if len(bin.lookup(a, c)) == 0 {
				b.Fatalf("%s: %#x not resolved", path, a)
			}
		}
		held = c.Stats().BytesHeld
		for range 3 {
			c.Trim()
		}
		idle = c.Stats().BytesHeld
		c.Close()
	}
	b.ReportMetric(float64(held), "B-held/binary")
	b.ReportMetric(float64(idle), "B-held-idle/binary")
	b.ReportMetric(float64(len(addrs)), "addrs/op")
}

// BenchmarkFirstSymbolizeLibc resolves what a first report of a steady
// target holds: 48 addresses, four in each of libcReportFuncs.
func BenchmarkFirstSymbolizeLibc(b *testing.B) {
	path, funcs := libcFuncs(b)
	byName := make(map[string]elf.Symbol)
	for _, s := range funcs {
		byName[s.Name] = s
	}
	var addrs []uint64
	for _, name := range libcReportFuncs {
		s, ok := byName[name]
		if !ok {
			continue
		}
		for i := range uint64(4) {
			addrs = append(addrs, s.Value+i*s.Size/4)
		}
	}
	if len(addrs) < 20 {
		b.Skipf("%s: only %d of the report's addresses found", path, len(addrs))
	}
	benchmarkSymbolizeLibc(b, path, addrs)
}

// BenchmarkSymbolizeLibcAll resolves the start of every function symbol of
// libc: the worst case, every compilation unit decoded.
func BenchmarkSymbolizeLibcAll(b *testing.B) {
	path, funcs := libcFuncs(b)
	seen := make(map[uint64]bool)
	var addrs []uint64
	for _, s := range funcs {
		if !seen[s.Value] {
			seen[s.Value] = true
			addrs = append(addrs, s.Value)
		}
	}
	benchmarkSymbolizeLibc(b, path, addrs)
}

// perfMapLines writes n perf map lines of 256-byte functions in the order a
// JIT allocates them (not address order), the kth naming "fn_k_tag".
func perfMapLines(n int, tag string) []byte {
	var b []byte
	for k := range n {
		// A stride coprime to n scatters the addresses.
		slot := (k * 7919) % n
		b = fmt.Appendf(b, "%x 100 JS:*fn_%d_%s /app/x.js:%d\n", 0x10000000+slot*0x100, k, tag, k)
	}
	return b
}

// BenchmarkPerfMapLookup names an address in a map of 50 000 lines, by the
// newest line and by a line replaced since (a sample older than a reuse).
func BenchmarkPerfMapLookup(b *testing.B) {
	var m PerfMap
	if _, err := m.parse(bytes.NewReader(perfMapLines(50000, "a"))); err != nil {
		b.Fatal(err)
	}
	// Reuse every tenth function's memory.
	var reuse []byte
	for k := 0; k < 50000; k += 10 {
		reuse = fmt.Appendf(reuse, "%x 100 JS:*new_%d\n", 0x10000000+k*0x100, k)
	}
	if _, err := m.parse(bytes.NewReader(reuse)); err != nil {
		b.Fatal(err)
	}
	m.sortHistory()
	pc := uint64(0x10000000 + 4990*0x100 + 0x10)
	b.Run("newest", func(b *testing.B) {
		for b.Loop() {
			if _, how := m.Lookup(pc, Latest); how != JITNewest {
				b.Fatal(how)
			}
		}
	})
	b.Run("replaced", func(b *testing.B) {
		for b.Loop() {
			if _, how := m.Lookup(pc, 0); how != JITOlder {
				b.Fatal(how)
			}
		}
	})
}

// BenchmarkPerfMapUpdate reads a map of 50 000 lines as a poll finds it:
// unchanged, with 10 lines appended, and written anew with 1% of its
// lines changed (a JVM's Compiler.perfmap). ns/op is per poll.
func BenchmarkPerfMapUpdate(b *testing.B) {
	path := filepath.Join(b.TempDir(), "perf-1.map")
	base := perfMapLines(50000, "a")
	if err := os.WriteFile(path, base, 0o644); err != nil {
		b.Fatal(err)
	}
	m := newPerfMapAt(path)
	if _, err := m.Update(); err != nil {
		b.Fatal(err)
	}
	b.Run("unchanged", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.Update(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append10", func(b *testing.B) {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		k := 0
		for b.Loop() {
			var lines []byte
			for range 10 {
				lines = fmt.Appendf(lines, "%x 80 JS:*late_%d\n", 0x20000000+k*0x80, k)
				k++
			}
			f.Write(lines)
			if _, err := m.Update(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rewrite", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			data := bytes.Clone(base)
			// Rename 1% of the functions: their memory was reused.
			data = bytes.ReplaceAll(data, []byte("00 100 JS:*fn_1"), fmt.Appendf(nil, "00 100 JS:*re%d_1", i))
			if err := os.WriteFile(path, data, 0o644); err != nil {
				b.Fatal(err)
			}
			m.Reread()
			b.StartTimer()
			if _, err := m.Update(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
