package symbolize

import "testing"

// BenchmarkLookupCached is the hot path: a pc already in the per-binary cache.
func BenchmarkLookupCached(b *testing.B) {
	ch := start(b, build(b, "go"))
	c := NewCache(Options{})
	defer c.Close()
	p, err := c.Process(ch.pid)
	if err != nil {
		b.Fatal(err)
	}
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
