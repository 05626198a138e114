package unwind

import (
	"slices"
	"testing"

	"github.com/perfprof/perfprof/internal/perf"
)

// TestWalkerSample: what Walker.Sample decides per mode, on a synthetic
// libc stack of 16 frames without frame pointers whose kernel chain (as
// the frame pointers found it) holds its callers from the fourth frame on:
// the whole stack when the copy holds it; spliced from the kernel's chain
// where the copy ends in Auto, cut there in DWARF; the kernel's chain, to
// wait, before the tables are read; the kernel's chain in FramePointer.
func TestWalkerSample(t *testing.T) {
	tab, regs, stack, want := syntheticStack(t, 16)
	u := libcUnwinder(tab)
	kernel := []uint64{perf.ContextKernel, 0xffffffff81000010}
	// The frame pointers lost the first three callers.
	fpChain := append(append(slices.Clone(kernel), perf.ContextUser, regs.IP), want[3:]...)
	sample := func(data []byte) *perf.SampleRecord {
		return &perf.SampleRecord{
			Callchain: fpChain,
			RegsABI:   2, // PERF_SAMPLE_REGS_ABI_64
			RegsUser:  []uint64{regs.BP, regs.SP, regs.IP},
			StackUser: data,
		}
	}
	whole := append(append(slices.Clone(kernel), perf.ContextUser, regs.IP), want...)
	// A copy that ends after the fifth frame: past the frames the
	// kernel's chain lost, short of the root.
	short := stack.Data
	for n := 8; n < len(stack.Data); n += 8 {
		got, _ := u.Unwind(regs, &StackCopy{SP: stack.SP, Data: stack.Data[:n]}, make([]uint64, 0, 64))
		if len(got) >= 5 {
			short = stack.Data[:n]
			break
		}
	}
	for _, tt := range []struct {
		name  string
		mode  Mode
		u     *Unwinder
		data  []byte
		want  []uint64
		wait  bool
		count func(Stats) int64
	}{
		{"frame pointer", FramePointer, u, stack.Data, fpChain, false, func(s Stats) int64 { return 1 - s.Unwound }},
		{"auto, whole", Auto, u, stack.Data, whole, false, func(s Stats) int64 { return s.Complete }},
		{"dwarf, whole", DWARF, u, stack.Data, whole, false, func(s Stats) int64 { return s.Complete }},
		{"auto, copy ends", Auto, u, short, whole, false, func(s Stats) int64 { return s.Spliced }},
		{"auto, tables unread", Auto, nil, stack.Data, fpChain, true, func(s Stats) int64 { return s.Pending }},
		{"no user stack", Auto, u, nil, fpChain, false, func(s Stats) int64 { return s.NoUserStack }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var st Stats
			w := NewWalker(tt.mode, false, &st)
			chain, _, wait := w.Sample(tt.u, sample(tt.data))
			if !slices.Equal(chain, tt.want) || wait != tt.wait {
				t.Fatalf("chain %x wait %v, want %x wait %v", chain, wait, tt.want, tt.wait)
			}
			if n := tt.count(st); n != 1 {
				t.Fatalf("counted %d, want 1: %+v", n, st)
			}
		})
	}
	t.Run("dwarf, copy ends", func(t *testing.T) {
		var st Stats
		chain, _, _ := NewWalker(DWARF, false, &st).Sample(u, sample(short))
		if len(chain) >= len(whole) || !slices.Equal(chain, whole[:len(chain)]) || st.Stopped[StopStackCopy] != 1 {
			t.Fatalf("chain %x, stats %+v: want a prefix of %x, stopped at the copy's end", chain, st, whole)
		}
	})
}
