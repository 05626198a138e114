package unwind

import (
	"slices"
	"testing"

	"github.com/perfprof/perfprof/internal/perf"
)

func stackOf(words ...uint64) []byte {
	b := make([]byte, 8*len(words))
	for i, w := range words {
		ne.PutUint64(b[8*i:], w)
	}
	return b
}

func TestInsertLeafCaller(t *testing.T) {
	const leaf, mid, top = 0x1010, 0x2020, 0x3030
	yes := func(uint64) bool { return true }
	no := func(uint64) bool { return false }
	onlyLeaf := func(pc uint64) bool { return pc == leaf }
	tests := []struct {
		name  string
		chain []uint64
		stack []byte
		atSP  func(uint64) bool
		want  []uint64
	}{
		{"user only, inserted", []uint64{perf.ContextUser, leaf, top}, stackOf(mid, 7), onlyLeaf, []uint64{perf.ContextUser, leaf, mid, top}},
		{"predicate no", []uint64{perf.ContextUser, leaf, top}, stackOf(mid), no, []uint64{perf.ContextUser, leaf, top}},
		{"already next", []uint64{perf.ContextUser, leaf, mid, top}, stackOf(mid), yes, []uint64{perf.ContextUser, leaf, mid, top}},
		{"with kernel part", []uint64{perf.ContextKernel, 0xffff1, 0xffff2, perf.ContextUser, leaf, top}, stackOf(mid), onlyLeaf,
			[]uint64{perf.ContextKernel, 0xffff1, 0xffff2, perf.ContextUser, leaf, mid, top}},
		{"kernel only", []uint64{perf.ContextKernel, 0xffff1}, stackOf(mid), yes, []uint64{perf.ContextKernel, 0xffff1}},
		{"leaf alone", []uint64{perf.ContextUser, leaf}, stackOf(mid), yes, []uint64{perf.ContextUser, leaf, mid}},
		{"no markers", []uint64{leaf, top}, stackOf(mid), yes, []uint64{leaf, mid, top}},
		{"short stack", []uint64{perf.ContextUser, leaf, top}, []byte{1, 2, 3}, yes, []uint64{perf.ContextUser, leaf, top}},
		{"no stack", []uint64{perf.ContextUser, leaf, top}, nil, yes, []uint64{perf.ContextUser, leaf, top}},
		{"zero at sp", []uint64{perf.ContextUser, leaf, top}, stackOf(0), yes, []uint64{perf.ContextUser, leaf, top}},
		{"marker at sp", []uint64{perf.ContextUser, leaf, top}, stackOf(perf.ContextUser), yes, []uint64{perf.ContextUser, leaf, top}},
		{"empty chain", nil, stackOf(mid), yes, nil},
		{"marker last", []uint64{perf.ContextUser}, stackOf(mid), yes, []uint64{perf.ContextUser}},
	}
	var buf []uint64
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := InsertLeafCaller(buf, tt.chain, tt.stack, tt.atSP)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %#x, want %#x", got, tt.want)
			}
			if len(got) == len(tt.chain) && len(got) > 0 && &got[0] != &tt.chain[0] {
				t.Fatal("unchanged chain was copied")
			}
			buf = got[:0]
		})
	}
}

// BenchmarkInsertLeafCaller measures the recovery of one sample whose leaf
// is frameless, with a 16-frame chain (the predicate is a stub: its cost,
// a table lookup, is measured in symbolize).
func BenchmarkInsertLeafCaller(b *testing.B) {
	chain := []uint64{perf.ContextUser}
	for i := range 16 {
		chain = append(chain, 0x400000+uint64(i)*0x40)
	}
	stack := stackOf(0x402000, 0, 0, 0)
	var buf []uint64
	b.ReportAllocs()
	for b.Loop() {
		out := InsertLeafCaller(buf, chain, stack, func(uint64) bool { return true })
		buf = out[:0]
	}
}
