package pprofiledict

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/perfprof/perfprof/internal/convention"
)

// Labels are the attributes of a sample, in the convention
// (docs/trace-conventions.md, the receiver's README): the Builder writes
// them (AppendLabels) and the Reader reads them back (Labels), so that one
// type says what a sample carries both ways.
type Labels struct {
	Tid        uint32 // thread.id; always written
	ThreadName string // thread.name; always written
	// CPU is cpu.logical_number, -1 for none (off-CPU samples).
	CPU int64
	// CPUDelta is thread.cpu.time_delta in ns, 0 for none: the thread's
	// CPU time since its previous on-CPU sample.
	CPUDelta uint64
	State    string // thread.state, "" for none (on-CPU samples)
	Worker   int64  // worker.id, -1 for none
	Root     string // span.root.name, "" for none
	// LinkSource is span.link.source, "" for none: how the sample's link
	// was found (one of the convention.LinkSource* values).
	LinkSource string
	// Context are the attributes of the thread context record (OTEP
	// 4947) the sample was read in, named by the process's key map
	// (http.route, ...): string attributes under any other key than the
	// ones above.
	Context []KV
}

// KV is a string attribute.
type KV struct{ Key, Value string }

// NoLabels are the Labels of a sample without attributes: Tid 0, no CPU and
// no worker.
var NoLabels = Labels{CPU: -1, Worker: convention.NoWorkerID}

// AppendLabels appends to dst, a sample's AttributeIndices, the indices of
// the attributes l has.
func (b *Builder) AppendLabels(dst pcommon.Int32Slice, l *Labels) {
	dst.Append(b.AttrInt(convention.ThreadID, int64(l.Tid)), b.AttrStr(convention.ThreadName, l.ThreadName))
	if l.State != "" {
		dst.Append(b.AttrStr(convention.ThreadState, l.State))
	}
	if l.CPU >= 0 {
		dst.Append(b.AttrInt(convention.CPU, l.CPU))
	}
	if l.CPUDelta > 0 {
		dst.Append(b.AttrIntUnit(convention.CPUTimeDelta, int64(l.CPUDelta), convention.CPUTimeDeltaUnit))
	}
	if l.Worker >= 0 {
		dst.Append(b.AttrInt(convention.WorkerID, l.Worker))
	}
	if l.Root != "" {
		dst.Append(b.AttrStr(convention.RootName, l.Root))
	}
	if l.LinkSource != "" {
		dst.Append(b.AttrStr(convention.LinkSource, l.LinkSource))
	}
	for _, kv := range l.Context {
		dst.Append(b.AttrStr(kv.Key, kv.Value))
	}
}

// SetProfileType sets the sample and period types of prof: on-CPU
// (samples/count, period cpu/nanoseconds) or off-CPU (off_cpu/nanoseconds
// for both), and its period in ns.
func (b *Builder) SetProfileType(prof pprofile.Profile, offCPU bool, period int64) {
	if offCPU {
		b.SetValueType(prof.SampleType(), convention.OffCPUType, convention.OffCPUUnit)
		b.SetValueType(prof.PeriodType(), convention.OffCPUType, convention.OffCPUUnit)
	} else {
		b.SetValueType(prof.SampleType(), convention.OnCPUSampleType, convention.OnCPUSampleUnit)
		b.SetValueType(prof.PeriodType(), convention.OnCPUPeriodType, convention.OnCPUPeriodUnit)
	}
	prof.SetPeriod(period)
}

// SetClockOffset gives prof the attribute convention.ClockOffset: the
// Unix − CLOCK_MONOTONIC offset, ns, its timestamps were converted with.
func (b *Builder) SetClockOffset(prof pprofile.Profile, offset int64) {
	prof.AttributeIndices().Append(b.AttrIntUnit(convention.ClockOffset, offset, convention.ClockOffsetUnit))
}
