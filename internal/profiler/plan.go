package profiler

import (
	"runtime"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/perf"
)

// plan is what Open made of the Options: the perf session it opens, what
// reads the running span, how context switches are captured, and why what
// was asked for does not run. [Options] stay what the caller asked for;
// [Profiler.Stats] reports the plan.
type plan struct {
	// perf is the session's configuration: Options.Perf with the stack
	// copies that unwinding needs, per-CPU events for the eBPF programs,
	// and sched capture left to the scheduler program when it runs.
	perf perf.Options
	// contexts delivers the span each thread ran at each sample:
	// Options.Contexts, else the eBPF reader (labels), else nil.
	contexts Contexts
	labels   *spanReader // the eBPF reader when it is contexts
	// procs answers questions about processes: Options.Procs, with a
	// scanner that follows execs when the profiler discovers processes.
	procs Procs
	// ebpfErr says why the eBPF programs are not used (nil when they are).
	ebpfErr error
	// schedKernel: the scheduler program captures context switches;
	// schedErr: why it does not, when sched capture was asked for.
	schedKernel bool
	schedErr    error
}

// newPlan is the plan of opts (defaults set) before anything is opened:
// the stack copies each sample needs and the rings that hold them.
func newPlan(opts Options) plan {
	pl := plan{perf: opts.Perf, contexts: opts.Contexts, procs: opts.Procs}
	switch {
	case opts.Unwind != UnwindFramePointer:
		pl.perf.StackUser = opts.UnwindStackBytes
		if pl.perf.RingPages == 0 {
			cpus, err := perf.RingCPUs()
			if err != nil {
				cpus = runtime.NumCPU() // perf.Open reports the error
			}
			pl.perf.RingPages = stackRingPages(int(opts.Perf.Frequency), int(opts.UnwindStackBytes), cpus)
			if pl.perf.WakeFraction == 0 {
				// Wake the reader at half full: below 121 Hz a ring
				// holds a second, half a second of slack; the
				// largest hold 256 samples, 128 ms of slack at
				// 999 Hz.
				pl.perf.WakeFraction = 2
			}
		}
	case opts.RecoverLeafCaller:
		pl.perf.StackUser = leafStackBytes
	default:
		pl.perf.StackUser = 0
	}
	return pl
}

// openEBPF loads the eBPF reader of the running span per opts.EBPF and
// makes it the plan's contexts; it fails only with EBPFRequired. It
// decides how context switches are captured (decideSched).
func (pl *plan) openEBPF(opts Options) error {
	if opts.EBPF == EBPFOff {
		pl.ebpfErr = errEBPFOff
		pl.decideSched(opts, nil, errEBPFOff)
		return nil
	}
	g, err := loadEBPF(opts)
	if err != nil {
		if opts.EBPF == EBPFRequired {
			return err
		}
		pl.ebpfErr = err
		opts.Logger.Warn("Spans are read at sample time only with eBPF; joining samples to spans by thread and time", zap.Error(err))
		pl.decideSched(opts, nil, err)
		return nil
	}
	if ns := g.prog.PidNamespace(); ns.Level > 0 {
		opts.Logger.Info("The collector is in a pid namespace of its own: the eBPF programs name processes by its pids, and sample only the processes it sees",
			zap.Uint32("pid_namespace_level", ns.Level), zap.Uint64("pid_namespace_inode", ns.Inode))
	}
	pl.perf.BPFProgram = g.prog.FD()
	pl.perf.BPFSwitchProgram = g.prog.SwitchFD()
	pl.contexts, pl.labels = g, g
	// Per-thread events are switched in and out with their thread: at
	// 50 000 switches a second that alone cost a target 10-18% of its
	// CPU. Per-CPU events are not, and the programs drop the samples of
	// other processes before perf walks their stacks.
	if pl.perf.Scope == perf.ScopeProcess {
		pl.perf.Scope = perf.ScopeSystem
		opts.Logger.Info("Sampling the targets with per-CPU events; the eBPF programs drop the samples of other processes in the kernel")
	}
	pl.decideSched(opts, g, g.schedErr)
	return nil
}

// decideSched settles how sched capture (Perf.Sched) runs: in the kernel
// by the scheduler program when g runs it; else with perf's context-switch
// events when SchedPerfFallback allows (they cost a switch-heavy target
// ten times as much), or not at all, why being err.
func (pl *plan) decideSched(opts Options, g *spanReader, err error) {
	if !pl.perf.Sched {
		return
	}
	switch {
	case g != nil && g.sched:
		pl.perf.Sched = false
		pl.schedKernel = true
		opts.Logger.Info("Capturing context switches in the kernel (eBPF scheduler program) for off-CPU profiles")
	case opts.SchedPerfFallback:
		pl.schedErr = err
		opts.Logger.Warn("Capturing context switches with perf events: the eBPF scheduler program cannot run; switch-heavy targets pay more", zap.Error(err))
	default:
		pl.perf.Sched = false
		pl.schedErr = err
		opts.Logger.Warn("Off-CPU profiling is off: it runs by default only with the eBPF scheduler program, which cannot run here; set sched.enabled: true to capture context switches with perf events at a higher cost", zap.Error(err))
	}
}
