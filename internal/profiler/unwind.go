package profiler

import "github.com/perfprof/perfprof/internal/unwind"

// How user stacks are found, and what became of them: package unwind's,
// under the names the profiler's Options and Stats have.
type (
	// UnwindMode says how the user part of on-CPU stacks is found.
	UnwindMode = unwind.Mode
	// UnwindStats count what became of the user stacks of on-CPU
	// samples when they are unwound from copies.
	UnwindStats = unwind.Stats
)

const (
	UnwindFramePointer = unwind.FramePointer
	UnwindAuto         = unwind.Auto
	UnwindDWARF        = unwind.DWARF

	DefaultUnwindStackBytes = unwind.DefaultStackBytes
	MaxUnwindStackBytes     = unwind.MaxStackBytes

	// unwindRingPages is the ring size per CPU when stacks are copied:
	// 4 MiB holds 256 samples of 16 KiB, 256 ms at 999 Hz, and its
	// watermark wakes the reader every 128. Each wake-up costs the
	// collector far more than the switch (its state is cold, the target
	// having run in between): against 2 MiB rings waking at a quarter,
	// the collector's CPU at 999 Hz on the C target went from 1.38-1.48%
	// of a core to 1.12-1.16% (interleaved runs), with more slack. With
	// 1 MiB the reader fell behind two threads burning both CPUs at
	// 999 Hz under the race detector (8% lost).
	unwindRingPages = 1024
)

// ParseUnwindMode reads "auto", "frame_pointer" or "dwarf".
func ParseUnwindMode(s string) (UnwindMode, error) { return unwind.ParseMode(s) }
