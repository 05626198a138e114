//go:build !amd64

package bpf

import (
	"fmt"
	"runtime"
	"time"

	"github.com/perfprof/perfprof/internal/goruntime"
	"github.com/perfprof/perfprof/internal/otelctx"
)

// The program reads the FS base and the amd64 TLS slot of the Go runtime,
// and its object is built for amd64 only.

var (
	ErrPermission   = fmt.Errorf("BPF denied")
	ErrNotSupported = fmt.Errorf("BPF feature not supported by this kernel")
	ErrPidNamespace = fmt.Errorf("the eBPF programs and the collector disagree on process ids")
)

// PidNamespace is the pid namespace the programs name processes in.
type PidNamespace struct {
	Inode uint64
	Level uint32
}

// Options configure [Load].
type Options struct {
	SpanKey, TraceKey string
	MaxTargets        int
	RingBytes         int
	DropOthers        bool
	SchedInterval     time.Duration
	MinBlock          time.Duration
	CaptureGap        time.Duration
	CaptureEvery      int
	MaxRate           int
	SchedRingBytes    int
	KernelStacks      bool
	RunStats          bool
}

// Program is not available on this architecture.
type Program struct{}

// Stats are cumulative counters of the program.
type Stats struct {
	Samples, Dropped                                          uint64
	NoGoroutine, NotValid, NoLabels, NoSpan, BadValue, Faults uint64
	Others, SchedDropped                                      uint64
	SchedShort, SchedDeferred, SchedCaptured, SchedUncaptured uint64
	SchedNoState                                              uint64
	NodeSlot, NodeTag, NodeRehash, NodeTable, NodeChain       uint64
	RunCount                                                  uint64
	RunTime                                                   time.Duration
	Runs                                                      [NumPrograms]ProgramRuns
}

// ProgramRuns are the kernel's run-time statistics of one program.
type ProgramRuns struct {
	Count uint64
	Time  time.Duration
}

// The programs, as Stats.Runs indexes them.
const (
	ProgSample = iota
	ProgSwitch
	ProgSched
	NumPrograms
)

// ProgramNames are the programs' names in telemetry.
var ProgramNames = [NumPrograms]string{"sampling", "switch_out", "scheduler"}

// Load fails with ErrNotSupported.
func Load(Options) (*Program, error) {
	return nil, fmt.Errorf("load BPF program spanctx: %w: built for amd64 only, not %s", ErrNotSupported, runtime.GOARCH)
}

func (*Program) FD() int                                          { return -1 }
func (*Program) SwitchFD() int                                    { return -1 }
func (*Program) AttachPerfEvent(int) error                        { return ErrNotSupported }
func (*Program) AddTarget(int, goruntime.Layout) error            { return ErrNotSupported }
func (*Program) AddThreadContextTarget(int, otelctx.TLSVar) error { return ErrNotSupported }
func (*Program) AddPlainTarget(int) error                         { return ErrNotSupported }
func (*Program) RemoveTarget(int) error                           { return nil }
func (*Program) Drain(func(*Record)) (int, error)                 { return 0, nil }
func (*Program) AttachSched() error                               { return ErrNotSupported }
func (*Program) DrainSched(func(*SchedRecord)) (int, error)       { return 0, nil }
func (*Program) SchedBuffered() int                               { return 0 }
func (*Program) Stats() (Stats, error)                            { return Stats{}, nil }
func (*Program) Close() error                                     { return nil }
func (*Program) Buffered() int                                    { return 0 }
func (*Program) PidNamespace() PidNamespace                       { return PidNamespace{} }
