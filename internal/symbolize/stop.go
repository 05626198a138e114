package symbolize

import "github.com/perfprof/perfprof/internal/unwind"

// UnwindStop is unwind.Stop under the name the receiver's metrics use:
// unwinding moved to package unwind.
//
// Deprecated: use unwind.Stop; kept until the receiver names it.
type UnwindStop = unwind.Stop

// The reasons of unwind.Stop, under the receiver's names.
//
// Deprecated: use unwind's StopEnd, StopNoCode, ….
const (
	UnwindEnd       = unwind.StopEnd
	UnwindNoCode    = unwind.StopNoCode
	UnwindNoRule    = unwind.StopNoRule
	UnwindStackCopy = unwind.StopStackCopy
	UnwindBadStack  = unwind.StopBadStack
	UnwindMaxFrames = unwind.StopMaxFrames
)
