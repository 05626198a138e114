package profiler

import (
	"github.com/perfprof/perfprof/internal/bpf"
	"github.com/perfprof/perfprof/internal/counter"
	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/unwind"
)

// The series the engine counts, named as the receiver's metadata.yaml
// names its metrics (which documents each): the receiver binds them to its
// instruments, and its tests fail on a series without one. Counts the
// engine makes are added where they happen; those other parts keep as
// running totals (the kernel's, the BPF programs', the unwinder's, the
// symbol cache's, the target bounds') are stored when a flush reads them
// (storeTotals). Those exported are losses the receiver logs.
var (
	cProcesses          = counter.Define("receiver_perfprof_processes")
	cSamples            = counter.Define("receiver_perfprof_samples")
	CountBufferFull     = counter.Define("receiver_perfprof_dropped_samples", "reason", "buffer_full")
	cCorrupt            = counter.Define("receiver_perfprof_dropped_samples", "reason", "corrupt")
	cPidReused          = counter.Define("receiver_perfprof_dropped_samples", "reason", "pid_reused")
	CountLost           = counter.Define("receiver_perfprof_lost_records")
	cUnnamedThreads     = counter.Define("receiver_perfprof_unnamed_threads")
	cSpansIndexed       = counter.Define("receiver_perfprof_spans", "outcome", "indexed")
	cSpansLate          = counter.Define("receiver_perfprof_spans", "outcome", "late")
	cSpansOverLimit     = counter.Define("receiver_perfprof_spans", "outcome", "over_limit")
	cSpansInvalid       = counter.Define("receiver_perfprof_spans", "outcome", "invalid")
	cSpansFuture        = counter.Define("receiver_perfprof_spans", "outcome", "future")
	cSpansUnmapped      = counter.Define("receiver_perfprof_spans", "outcome", "unmapped")
	cSpansUnmatched     = counter.Define("receiver_perfprof_spans_unmatched")
	cJoinNoSpan         = counter.Define("receiver_perfprof_emitted_samples", "join", "no_span")
	cJoinAmbiguous      = counter.Define("receiver_perfprof_emitted_samples", "join", "ambiguous")
	CountJoinEarly      = counter.Define("receiver_perfprof_emitted_samples", "join", "early")
	cJoinOther          = counter.Define("receiver_perfprof_emitted_samples", "join", "other_process")
	cOffCPU             = counter.Define("receiver_perfprof_off_cpu_samples", "stack", "switch_out")
	cOffCPUEarlier      = counter.Define("receiver_perfprof_off_cpu_samples", "stack", "earlier_switch_out")
	cOffCPUUnattach     = counter.Define("receiver_perfprof_off_cpu_dropped", "reason", "not_attached")
	CountOffCPURingFull = counter.Define("receiver_perfprof_off_cpu_dropped", "reason", "ring_full")
	cOffCPUNoState      = counter.Define("receiver_perfprof_off_cpu_dropped", "reason", "no_thread_state")
	cOffCPUMaxRate      = counter.Define("receiver_perfprof_off_cpu_held", "reason", "max_rate")
	cOffCPUShort        = counter.Define("receiver_perfprof_off_cpu_held", "reason", "below_min_block")
	cSwitchRead         = counter.Define("receiver_perfprof_sched_switch_outs", "stack", "read")
	cSwitchNotRead      = counter.Define("receiver_perfprof_sched_switch_outs", "stack", "not_read")
	CountEBPFDropped    = counter.Define("receiver_perfprof_ebpf_records_dropped")
	cUnwindComplete     = counter.Define("receiver_perfprof_unwound_samples", "result", "complete")
	cUnwindSpliced      = counter.Define("receiver_perfprof_unwound_samples", "result", "spliced")
	cUnwindPending      = counter.Define("receiver_perfprof_unwound_samples", "result", "pending")
	cUnwindOverflow     = counter.Define("receiver_perfprof_unwound_samples", "result", "pending_overflow")
	cUnwindNoStack      = counter.Define("receiver_perfprof_unwound_samples", "result", "no_user_stack")
	cJITNewest          = counter.Define("receiver_perfprof_jit_frames", "naming", "newest")
	cJITOlder           = counter.Define("receiver_perfprof_jit_frames", "naming", "older")
	cJITLater           = counter.Define("receiver_perfprof_jit_frames", "naming", "later")
	cJITUnnamed         = counter.Define("receiver_perfprof_jit_frames", "naming", "unnamed")
	cNodeSlot           = counter.Define("receiver_perfprof_thread_context_walks_failed", "step", "record_slot")
	cNodeTag            = counter.Define("receiver_perfprof_thread_context_walks_failed", "step", "tag")
	cNodeRehash         = counter.Define("receiver_perfprof_thread_context_walks_failed", "step", "rehash")
	cNodeTable          = counter.Define("receiver_perfprof_thread_context_walks_failed", "step", "table")
	cNodeChain          = counter.Define("receiver_perfprof_thread_context_walks_failed", "step", "chain")
	cAttrsSets          = counter.Define("receiver_perfprof_context_attributes_dropped", "reason", "sets")
	cAttrsEntries       = counter.Define("receiver_perfprof_context_attributes_dropped", "reason", "entries")
	cAttrsTruncated     = counter.Define("receiver_perfprof_context_attributes_dropped", "reason", "truncated")
	cEBPFRuns           [bpf.NumPrograms]*counter.Def
	cEBPFRunTime        [bpf.NumPrograms]*counter.Def
	cLinked             [SourceThreadLatest + 1]*counter.Def // emitted_samples{join=span} by source
	cUnwindStopped      [len(UnwindStats{}.Stopped)]*counter.Def
	cLimits             [limits.NumKinds]*counter.Def
)

func init() {
	for i, name := range bpf.ProgramNames {
		cEBPFRuns[i] = counter.Define("receiver_perfprof_ebpf_runs", "program", name)
		cEBPFRunTime[i] = counter.Define("receiver_perfprof_ebpf_run_time", "program", name)
	}
	for src := range cLinked {
		cLinked[src] = counter.Define("receiver_perfprof_emitted_samples", "join", "span", "source", LinkSource(src).String())
	}
	for stop := range cUnwindStopped {
		// A walk that reached the end is complete (or spliced).
		if unwind.Stop(stop) != unwind.StopEnd {
			cUnwindStopped[stop] = counter.Define("receiver_perfprof_unwound_samples", "result", unwind.Stop(stop).String())
		}
	}
	for k := range limits.NumKinds {
		cLimits[k] = counter.Define("receiver_perfprof_target_limits", "bound", k.String())
	}
}

// Counts returns the set the engine counts in, for the receiver to flush
// (after StoreTotals, for the counts kept elsewhere).
func (p *Profiler) Counts() *counter.Set { return p.tel }

// StoreTotals stores what the perf rings, the BPF programs, the unwinder,
// the symbol cache and the target bounds keep as running totals into the
// engine's counts. Calls must not overlap: a total stored late would flush
// as a decrease.
func (p *Profiler) StoreTotals() {
	t := p.tel
	src := p.src.Stats()
	t.Store(CountLost, int64(src.Lost))
	t.Store(cCorrupt, int64(src.Corrupt))
	if p.plan.labels != nil {
		prog := p.plan.labels.stats()
		t.Store(CountEBPFDropped, int64(prog.Dropped))
		for i, r := range prog.Runs {
			t.Store(cEBPFRuns[i], int64(r.Count))
			t.Store(cEBPFRunTime[i], int64(r.Time))
		}
		t.Store(CountOffCPURingFull, int64(prog.SchedDropped))
		t.Store(cOffCPUNoState, int64(prog.SchedNoState))
		t.Store(cOffCPUMaxRate, int64(prog.SchedDeferred))
		t.Store(cOffCPUShort, int64(prog.SchedShort))
		t.Store(cSwitchRead, int64(prog.SchedCaptured))
		t.Store(cSwitchNotRead, int64(prog.SchedUncaptured))
		t.Store(cNodeSlot, int64(prog.NodeSlot))
		t.Store(cNodeTag, int64(prog.NodeTag))
		t.Store(cNodeRehash, int64(prog.NodeRehash))
		t.Store(cNodeTable, int64(prog.NodeTable))
		t.Store(cNodeChain, int64(prog.NodeChain))
	}
	p.mu.Lock()
	unw := p.counts.unwind
	p.mu.Unlock()
	t.Store(cUnwindComplete, unw.Complete)
	t.Store(cUnwindSpliced, unw.Spliced)
	// Samples unwound after waiting for their tables count under the
	// result of their unwinding; pending are those never unwound.
	t.Store(cUnwindPending, unw.PendingUnread)
	t.Store(cUnwindOverflow, unw.PendingOverflow)
	t.Store(cUnwindNoStack, unw.NoUserStack)
	for stop, d := range cUnwindStopped {
		if d != nil {
			t.Store(d, unw.Stopped[stop])
		}
	}
	for k, n := range p.opts.Limits.Counts() {
		t.Store(cLimits[k], n)
	}
}
