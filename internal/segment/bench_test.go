package segment

import "testing"

// BenchmarkSeal writes one batch of about 64 KiB and seals its segment per
// op: the cost of rotation itself (open, seal, and the syncs that make a
// sealed segment durable), without compression.
func BenchmarkSeal(b *testing.B) {
	r, err := New(Options{Dir: b.TempDir(), Prefix: "seg"})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	batch := rotBatch(0, 64, 1000, 5e9)
	b.ResetTimer()
	for range b.N {
		if err := writeBatch(r, batch); err != nil {
			b.Fatal(err)
		}
		if err := r.Rotate(); err != nil {
			b.Fatal(err)
		}
	}
}
