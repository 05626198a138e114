package symbolize

import (
	"debug/elf"
	"testing"
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

// BenchmarkFirstSymbolizeLibc symbolizes getpid in the system's libc.
func BenchmarkFirstSymbolizeLibc(b *testing.B) {
	for _, path := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/lib64/libc.so.6"} {
		ef, err := elf.Open(path)
		if err != nil {
			continue
		}
		syms, _ := ef.DynamicSymbols()
		ef.Close()
		for _, s := range syms {
			if s.Name == "getpid" && s.Value != 0 {
				benchmarkFirstSymbolizeFile(b, path, s.Value+1)
				return
			}
		}
	}
	b.Skip("no libc.so.6 with getpid found")
}
