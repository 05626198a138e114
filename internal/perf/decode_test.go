package perf

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sampleRecord encodes a PERF_RECORD_SAMPLE in the session's format, the
// way the kernel lays it out.
func sampleRecord(pid, tid uint32, t uint64, chain []uint64) []byte {
	n := 8 + 8*6 + 8 + 8*len(chain)
	b := make([]byte, n)
	ne.PutUint32(b[0:], RecordSample)
	ne.PutUint16(b[4:], MiscUser)
	ne.PutUint16(b[6:], uint16(n))
	o := 8
	put := func(v uint64) { ne.PutUint64(b[o:], v); o += 8 }
	put(77)                            // identifier
	put(chain[len(chain)-1])           // ip
	put(uint64(pid) | uint64(tid)<<32) // pid, tid
	put(t)                             // time
	put(1)                             // cpu, res
	put(10101010)                      // period
	put(uint64(len(chain)))            // callchain nr
	for _, a := range chain {
		put(a)
	}
	return b
}

func sessionFormat() format {
	return newFormat(sampleIdentifier|sampleIP|sampleTID|sampleTime|sampleCPU|samplePeriod|sampleCallchain, 0)
}

// fakeRing is a ring over ordinary memory, filled by the test as the kernel
// would fill a real one.
func fakeRing(dataSize int) *ring {
	words := make([]uint64, (4096+dataSize)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	return &ring{
		mem:     mem,
		meta:    (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0])),
		data:    mem[4096:],
		mask:    uint64(dataSize - 1),
		scratch: make([]uint64, 65536/8),
	}
}

func (r *ring) write(rec []byte) {
	head := r.meta.Data_head
	for i, c := range rec {
		r.data[(head+uint64(i))&r.mask] = c
	}
	r.meta.Data_head = head + uint64(len(rec))
}

func chain16() []uint64 {
	c := []uint64{ContextUser}
	for i := 0; i < 16; i++ {
		c = append(c, 0x400000+uint64(i)*0x40)
	}
	return c
}

func TestRingDecodesWrappedRecords(t *testing.T) {
	r := fakeRing(4096)
	f := sessionFormat()
	var rec Record
	got := 0
	for round := 0; round < 100; round++ {
		// Records of 200 bytes in a 4096-byte ring wrap every few rounds.
		for i := 0; i < 3; i++ {
			r.write(sampleRecord(10, uint32(round*3+i), uint64(round), chain16()))
		}
		st := r.read(&f, &rec, func(rec *Record) {
			s := rec.Sample
			if s.ID != 77 || s.Pid != 10 || s.Period != 10101010 || s.CPU != 1 || len(s.Callchain) != 17 {
				t.Fatalf("bad sample %+v", s)
			}
			if s.Tid != uint32(got) {
				t.Fatalf("sample %d has tid %d", got, s.Tid)
			}
			for i, a := range s.Callchain[1:] {
				if a != 0x400000+uint64(i)*0x40 {
					t.Fatalf("frame %d = %#x", i, a)
				}
			}
			got++
		})
		if st.corrupt != 0 {
			t.Fatalf("round %d: %d corrupt", round, st.corrupt)
		}
	}
	if got != 300 {
		t.Fatalf("decoded %d records, want 300", got)
	}
}

func TestDecodeRejectsBadRecords(t *testing.T) {
	f := sessionFormat()
	good := sampleRecord(1, 2, 3, chain16())
	var rec Record
	if err := f.decode(good, &rec); err != nil {
		t.Fatalf("good record: %v", err)
	}
	// A callchain count that overruns the record.
	bad := append([]byte(nil), good...)
	ne.PutUint64(bad[8+6*8:], 1<<40)
	if err := f.decode(bad, &rec); !errors.Is(err, ErrCorrupt) {
		t.Errorf("overlong callchain: got %v", err)
	}
	// Every truncation is an error, never a panic.
	for n := 0; n < len(good); n++ {
		b := append([]byte(nil), good[:n]...)
		if n >= 8 {
			ne.PutUint16(b[6:], uint16(n))
		}
		if err := f.decode(b, &rec); err == nil && n < 8+7*8 {
			t.Errorf("truncated to %d bytes: no error", n)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(sampleRecord(1, 2, 3, chain16()))
	fm := sessionFormat()
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= 8 {
			ne.PutUint16(b[6:], uint16(len(b)))
		}
		// Records in a ring are 8-byte aligned; keep that.
		w := make([]uint64, (len(b)+7)/8)
		a := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)[:len(b)]
		copy(a, b)
		var rec Record
		_ = fm.decode(a, &rec)
	})
}

func TestFrames(t *testing.T) {
	chain := []uint64{ContextKernel, 0xffffffff81000000, ContextUser, 0x401000, 0x402000}
	var kernel, user int
	Frames(chain, func(a uint64, k bool) {
		if k {
			kernel++
		} else {
			user++
		}
	})
	if kernel != 1 || user != 2 {
		t.Fatalf("kernel %d user %d", kernel, user)
	}
}

// BenchmarkDecodeSample measures reading one sample record with a 16-frame
// callchain out of a ring: header, bounds checks, field decoding and the
// callback, as the receiver's read loop does it.
func BenchmarkDecodeSample(b *testing.B) {
	benchDecode(b, sessionFormat(), sampleRecord(10, 11, 12, chain16()))
}

// benchDecode fills a ring with copies of rec, untimed, and times reading
// them back, b.N records in all.
func benchDecode(b *testing.B, f format, rec []byte) {
	r := fakeRing(1 << 20)
	n := (1 << 20) / len(rec)
	var out Record
	var sum uint64
	fn := func(r *Record) {
		sum += r.Sample.Callchain[len(r.Sample.Callchain)-1] + uint64(len(r.Sample.StackUser))
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(rec)))
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		k := min(n, b.N-done)
		for i := 0; i < k; i++ {
			r.write(rec)
		}
		b.StartTimer()
		r.read(&f, &out, fn)
		done += k
	}
	if sum == 0 {
		b.Fatal("nothing decoded")
	}
}
