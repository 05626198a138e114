package symbolize

import "github.com/perfprof/perfprof/internal/unwind"

// Deprecated: unwinding moved to package unwind; these names are kept
// for the receiver's metrics until they name unwind.Stop.
type UnwindStop = unwind.Stop

// Deprecated: see UnwindStop.
const (
	UnwindEnd       = unwind.StopEnd
	UnwindNoCode    = unwind.StopNoCode
	UnwindNoRule    = unwind.StopNoRule
	UnwindStackCopy = unwind.StopStackCopy
	UnwindBadStack  = unwind.StopBadStack
	UnwindMaxFrames = unwind.StopMaxFrames
)
