package perf

import (
	"slices"
	"testing"
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
		{"user only, inserted", []uint64{ContextUser, leaf, top}, stackOf(mid, 7), onlyLeaf, []uint64{ContextUser, leaf, mid, top}},
		{"predicate no", []uint64{ContextUser, leaf, top}, stackOf(mid), no, []uint64{ContextUser, leaf, top}},
		{"already next", []uint64{ContextUser, leaf, mid, top}, stackOf(mid), yes, []uint64{ContextUser, leaf, mid, top}},
		{"with kernel part", []uint64{ContextKernel, 0xffff1, 0xffff2, ContextUser, leaf, top}, stackOf(mid), onlyLeaf,
			[]uint64{ContextKernel, 0xffff1, 0xffff2, ContextUser, leaf, mid, top}},
		{"kernel only", []uint64{ContextKernel, 0xffff1}, stackOf(mid), yes, []uint64{ContextKernel, 0xffff1}},
		{"leaf alone", []uint64{ContextUser, leaf}, stackOf(mid), yes, []uint64{ContextUser, leaf, mid}},
		{"no markers", []uint64{leaf, top}, stackOf(mid), yes, []uint64{leaf, mid, top}},
		{"short stack", []uint64{ContextUser, leaf, top}, []byte{1, 2, 3}, yes, []uint64{ContextUser, leaf, top}},
		{"no stack", []uint64{ContextUser, leaf, top}, nil, yes, []uint64{ContextUser, leaf, top}},
		{"zero at sp", []uint64{ContextUser, leaf, top}, stackOf(0), yes, []uint64{ContextUser, leaf, top}},
		{"marker at sp", []uint64{ContextUser, leaf, top}, stackOf(ContextUser), yes, []uint64{ContextUser, leaf, top}},
		{"empty chain", nil, stackOf(mid), yes, nil},
		{"marker last", []uint64{ContextUser}, stackOf(mid), yes, []uint64{ContextUser}},
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

func TestSampleUserRegs(t *testing.T) {
	f := newFormat(sampleIdentifier|sampleIP|sampleTID|sampleTime|sampleCPU|samplePeriod|sampleCallchain|sampleRegsUser|sampleStackUser, regsMask)
	rec := sampleRecordStack(10, 11, 12, chain16(), 512)
	var out Record
	if err := f.decode(rec, &out); err != nil {
		t.Fatal(err)
	}
	s := &out.Sample
	sp, ok1 := s.UserSP()
	ip, ok2 := s.UserIP()
	bp, ok3 := s.UserBP()
	if !ok1 || !ok2 || !ok3 || sp != 0x7ff000 || ip != 0x401000 || bp != 0x7ff100 {
		t.Fatalf("regs sp %#x %v ip %#x %v bp %#x %v", sp, ok1, ip, ok2, bp, ok3)
	}
	if len(s.StackUser) != 512 || ne.Uint64(s.StackUser) != 0x402000 {
		t.Fatalf("stack %d bytes", len(s.StackUser))
	}
	// A sample of an event without registers (the switch event) ends
	// after its callchain.
	plain := sampleRecord(10, 11, 12, chain16())
	if err := f.decode(plain, &out); err != nil {
		t.Fatal(err)
	}
	if _, ok := out.Sample.UserSP(); ok || out.Sample.StackUser != nil {
		t.Fatal("registers from a sample without them")
	}
}

// sampleRecordStack is sampleRecord with REGS_USER (BP, SP, IP) and a
// STACK_USER copy of n bytes whose first word is a return address.
func sampleRecordStack(pid, tid uint32, t uint64, chain []uint64, n int) []byte {
	base := sampleRecord(pid, tid, t, chain)
	size := len(base) + 8 + 3*8 + 8 + n + 8
	b := make([]byte, size)
	copy(b, base)
	ne.PutUint16(b[6:], uint16(size))
	o := len(base)
	put := func(v uint64) { ne.PutUint64(b[o:], v); o += 8 }
	put(2) // PERF_SAMPLE_REGS_ABI_64
	put(0x7ff100)
	put(0x7ff000)
	put(0x401000)
	put(uint64(n))
	ne.PutUint64(b[o:], 0x402000)
	o += n
	put(uint64(n)) // dyn_size
	return b
}

// BenchmarkDecodeSampleStack is BenchmarkDecodeSample with the user
// registers and a 512-byte stack copy in every sample (recover_leaf_caller).
func BenchmarkDecodeSampleStack(b *testing.B) {
	f := newFormat(sampleIdentifier|sampleIP|sampleTID|sampleTime|sampleCPU|samplePeriod|sampleCallchain|sampleRegsUser|sampleStackUser, regsMask)
	benchDecode(b, f, sampleRecordStack(10, 11, 12, chain16(), 512))
}

// BenchmarkInsertLeafCaller measures the recovery of one sample whose leaf
// is frameless, with a 16-frame chain (the predicate is a stub: its cost,
// a table lookup, is measured in symbolize).
func BenchmarkInsertLeafCaller(b *testing.B) {
	chain := chain16()
	stack := stackOf(0x402000, 0, 0, 0)
	var buf []uint64
	b.ReportAllocs()
	for b.Loop() {
		out := InsertLeafCaller(buf, chain, stack, func(uint64) bool { return true })
		buf = out[:0]
	}
}
