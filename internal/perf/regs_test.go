package perf

import (
	"testing"
)

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
