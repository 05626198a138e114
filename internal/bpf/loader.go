//go:build amd64

package bpf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/goruntime"
	"github.com/perfprof/perfprof/internal/otelctx"
)

var (
	// ErrPermission is wrapped when the kernel refuses to load the
	// program or attach it; the text names the capabilities.
	ErrPermission = errors.New("BPF denied")
	// ErrNotSupported is wrapped when the kernel lacks what the program
	// needs (BPF, BTF, ring buffers, perf-event programs).
	ErrNotSupported = errors.New("BPF feature not supported by this kernel")
)

// Options configure [Load].
type Options struct {
	// SpanKey and TraceKey are the pprof label keys holding the span id
	// (16 hex digits) and the trace id (32 hex digits); at most 32 bytes.
	// Empty means "span_id" and "trace_id".
	SpanKey, TraceKey string
	// MaxTargets is the number of processes AddTarget can hold; 0 means
	// 4096.
	MaxTargets int
	// RingBytes is the size of the records ring buffer, a power of two
	// and a multiple of the page size; 0 means 256 KiB (4 000 records).
	RingBytes int
	// DropOthers makes the programs drop the samples of processes that
	// are not targets (AddTarget, AddThreadContextTarget, AddPlainTarget),
	// in the kernel, before perf walks their stacks: for events that
	// sample every process on a CPU.
	DropOthers bool
	// SchedInterval, when set, also loads the scheduler program
	// (AttachSched): the on/off-CPU accounting of target threads in the
	// kernel, which writes a group of off-CPU time each time a thread's
	// off-CPU time crosses a multiple of it (DrainSched).
	SchedInterval time.Duration
	// MinBlock: off periods shorter than this are not off-CPU time
	// (Stats.SchedShort counts them). 0 keeps all.
	MinBlock time.Duration
	// CaptureGap and CaptureEvery say which switch-outs the scheduler
	// program captures, reading the thread's user stack and running span
	// (~2 µs): one that comes at least CaptureEvery switch-outs after the
	// thread's previous capture, while it has credit: each capture spends
	// CaptureGap of it, which accrues with time up to 16 captures' worth.
	// So a thread is captured at most once per CaptureGap on average, and
	// the bursts of one that switches less often are captured whole. A
	// group whose switch-out was not captured carries the latest that
	// was (SchedRecord.CaptureTime). 0 and 1 (or 0): every switch-out.
	CaptureGap   time.Duration
	CaptureEvery int
	// MaxRate caps the groups a target process writes a second; past
	// it, a thread's group is held back and written with its next one
	// (Stats.SchedDeferred), so no off-CPU time is lost. 0: no cap.
	MaxRate int
	// SchedRingBytes is the size of the scheduler program's ring buffer,
	// as RingBytes; 0 means 1 MiB (1 200 groups).
	SchedRingBytes int
	// KernelStacks makes the scheduler program read the kernel stack of
	// the switch-outs it captures too (SchedRecord.KernelStack).
	KernelStacks bool
	// RunStats turns on the kernel's BPF run-time statistics while the
	// programs are loaded (Stats.RunCount, RunTime; needs CAP_SYS_ADMIN).
	// They cost two clock reads per run of every BPF program on the
	// machine, ~0.2 µs here: at 50 000 context switches a second, a
	// point of CPU, more than the scheduler program itself.
	RunStats bool
}

// objects are what Load loads of the spanctx collection: the two programs
// of the perf events and their maps; not the scheduler program's (unless
// asked for), nor the accounting's test driver.
type objects struct {
	Sample  *ebpf.Program `ebpf:"spanctx_sample"`
	Switch  *ebpf.Program `ebpf:"spanctx_switch"`
	Records *ebpf.Map     `ebpf:"records"`
	Scratch *ebpf.Map     `ebpf:"scratch"`
	Stats   *ebpf.Map     `ebpf:"stats"`
	Targets *ebpf.Map     `ebpf:"targets"`
}

// schedObjects are the scheduler program and its maps.
type schedObjects struct {
	SchedSwitch  *ebpf.Program `ebpf:"spanctx_sched_switch"`
	Threads      *ebpf.Map     `ebpf:"threads"`
	SchedRecords *ebpf.Map     `ebpf:"sched_records"`
}

// closeAll closes cs; cilium/ebpf's Close of a nil program or map does
// nothing.
func closeAll(cs ...io.Closer) error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

func (o *objects) Close() error {
	return closeAll(o.Sample, o.Switch, o.Records, o.Scratch, o.Stats, o.Targets)
}

func (o *schedObjects) Close() error {
	return closeAll(o.SchedSwitch, o.Threads, o.SchedRecords)
}

// Program is the loaded spanctx programs with their maps. Attach them to
// sampling and context-switch events, add target processes, and drain
// their records.
type Program struct {
	ns      PidNamespace
	objs    objects
	sched   *schedObjects   // with Options.SchedInterval
	link    link.Link       // AttachSched
	sreader *ringbuf.Reader // of sched_records
	reader  *ringbuf.Reader
	stats   io.Closer // BPF_STATS_RUN_TIME while open; nil if refused

	drainMu   sync.Mutex
	raw       ringbuf.Record
	closeOnce sync.Once
}

// Load loads the program into the kernel. It fails whole: without
// privilege (CAP_BPF and CAP_PERFMON, or root) the error wraps
// ErrPermission; without kernel BTF or BPF support, ErrNotSupported; a
// verifier rejection wraps *ebpf.VerifierError with the log.
func Load(opts Options) (*Program, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	// Before 5.11 BPF memory counts against RLIMIT_MEMLOCK; since then
	// against the cgroup, and raising the limit may be refused (EPERM in
	// a container) while loading works anyway.
	_ = rlimit.RemoveMemlock()
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return nil, fmt.Errorf("load BPF program spanctx: %w: no kernel BTF (%v); the kernel needs CONFIG_DEBUG_INFO_BTF", ErrNotSupported, err)
	}
	spec, ns, err := configure(opts)
	if err != nil {
		return nil, err
	}
	p := &Program{ns: ns}
	if err := p.load(spec, opts.SchedInterval > 0); err != nil {
		return nil, err
	}
	if err := p.openRings(); err != nil {
		p.Close()
		return nil, err
	}
	// Refused without CAP_SYS_ADMIN: then Stats has none.
	if opts.RunStats {
		if c, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME); err == nil {
			p.stats = c
		}
	}
	return p, nil
}

// fill sets the defaults of o and checks what the kernel would refuse
// less clearly.
func (o *Options) fill() error {
	if o.SpanKey == "" {
		o.SpanKey = convention.GoLabelSpanID
	}
	if o.TraceKey == "" {
		o.TraceKey = convention.GoLabelTraceID
	}
	for _, k := range []string{o.SpanKey, o.TraceKey} {
		if len(k) > 32 {
			return fmt.Errorf("bpf: label key %q is longer than 32 bytes", k)
		}
	}
	if o.MaxTargets == 0 {
		o.MaxTargets = 4096
	}
	if o.RingBytes == 0 {
		o.RingBytes = 256 << 10
	}
	if !ringSize(o.RingBytes) {
		return fmt.Errorf("bpf: ring size %d is not a power of two multiple of the page size", o.RingBytes)
	}
	if o.SchedInterval <= 0 {
		return nil
	}
	if o.SchedRingBytes == 0 {
		o.SchedRingBytes = 1 << 20
	}
	if !ringSize(o.SchedRingBytes) {
		return fmt.Errorf("bpf: sched ring size %d is not a power of two multiple of the page size", o.SchedRingBytes)
	}
	if o.MinBlock < 0 || o.CaptureGap < 0 || o.CaptureEvery < 0 || o.MaxRate < 0 {
		return fmt.Errorf("bpf: negative scheduler option in %+v", *o)
	}
	return nil
}

// ringSize says whether n bytes can be a BPF ring buffer.
func ringSize(n int) bool { return n&(n-1) == 0 && n%os.Getpagesize() == 0 }

// configure reads the spanctx collection and sets, for opts, its
// constants (the pid namespace, the label keys, the scheduler's
// parameters) and the sizes of its maps.
func configure(opts Options) (*ebpf.CollectionSpec, PidNamespace, error) {
	spec, err := loadSpanctx()
	if err != nil {
		return nil, PidNamespace{}, err
	}
	ns, err := checkPidNamespace(spec)
	if err != nil {
		return nil, PidNamespace{}, err
	}
	if err := setPidNamespace(spec, ns); err != nil {
		return nil, PidNamespace{}, err
	}
	var span, trace [32]byte
	copy(span[:], opts.SpanKey)
	copy(trace[:], opts.TraceKey)
	vars := []specVar{
		{spanctxVarSpanKey, span}, {spanctxVarSpanKeyLen, uint32(len(opts.SpanKey))},
		{spanctxVarTraceKey, trace}, {spanctxVarTraceKeyLen, uint32(len(opts.TraceKey))},
	}
	if opts.DropOthers {
		vars = append(vars, specVar{spanctxVarDropOthers, uint32(1)})
	}
	if opts.SchedInterval > 0 {
		vars = append(vars,
			specVar{spanctxVarAcctInterval, uint64(opts.SchedInterval)},
			specVar{spanctxVarMinBlock, uint64(opts.MinBlock)},
			specVar{spanctxVarCaptureGap, uint64(opts.CaptureGap)},
			specVar{spanctxVarCaptureEvery, uint32(max(opts.CaptureEvery, 1))},
			specVar{spanctxVarMaxRate, uint32(opts.MaxRate)},
			specVar{spanctxVarSchedOn, uint32(1)},
			specVar{spanctxVarKernelStacks, map[bool]uint32{false: 0, true: 1}[opts.KernelStacks]},
		)
		spec.Maps[spanctxMapSchedRecords].MaxEntries = uint32(opts.SchedRingBytes)
	}
	for _, v := range vars {
		if err := spec.Variables[v.name].Set(v.val); err != nil {
			return nil, PidNamespace{}, fmt.Errorf("set %s: %w", v.name, err)
		}
	}
	spec.Maps[spanctxMapTargets].MaxEntries = uint32(opts.MaxTargets)
	spec.Maps[spanctxMapRecords].MaxEntries = uint32(opts.RingBytes)
	return spec, ns, nil
}

// specVar is a constant of the collection and its value.
type specVar struct {
	name string
	val  any
}

// load loads the programs and maps of spec into the kernel: the
// scheduler program's too when sched.
func (p *Program) load(spec *ebpf.CollectionSpec, sched bool) error {
	if !sched {
		if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
			return explainLoadError(err)
		}
		return nil
	}
	var both struct {
		objects
		schedObjects
	}
	if err := spec.LoadAndAssign(&both, nil); err != nil {
		return explainLoadError(err)
	}
	p.objs, p.sched = both.objects, &both.schedObjects
	return nil
}

// openRings opens the readers of the loaded programs' ring buffers.
// Reads never wait (their deadline is past): Drain and DrainSched take
// what is there.
func (p *Program) openRings() (err error) {
	if p.sched != nil {
		if p.sreader, err = ringbuf.NewReader(p.sched.SchedRecords); err != nil {
			return fmt.Errorf("open sched_records ring buffer: %w", err)
		}
		p.sreader.SetDeadline(time.Unix(1, 0))
	}
	if p.reader, err = ringbuf.NewReader(p.objs.Records); err != nil {
		return fmt.Errorf("open records ring buffer: %w", err)
	}
	p.reader.SetDeadline(time.Unix(1, 0))
	return nil
}

func explainLoadError(err error) error {
	var ve *ebpf.VerifierError
	switch {
	case errors.As(err, &ve) && !errors.Is(err, unix.EPERM):
		// Before EACCES: the verifier rejects a program with EACCES
		// too. Without privilege the kernel answers EPERM (and a log
		// may come with it).
		return fmt.Errorf("load BPF program spanctx: verifier rejected it: %w", err)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		eff, ok := effectiveCaps()
		return fmt.Errorf("load BPF program spanctx: %w", deniedError(err, eff, ok))
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("load BPF program spanctx: %w: %v", ErrNotSupported, err)
	}
	return fmt.Errorf("load BPF program spanctx: %w", err)
}

// Linux capability numbers (<linux/capability.h>).
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// deniedError explains a refusal to load the program, given the effective
// capabilities eff of this process (ok false: unknown). A perf_event
// program needs CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN: when one is
// missing the error names it and leaves out cilium/ebpf's guess that
// RLIMIT_MEMLOCK may be too low, which misleads there (since Linux 5.11,
// which the program needs, BPF memory is charged to the cgroup).
func deniedError(err error, eff uint64, ok bool) error {
	const (
		needs = "it needs CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN"
		fix   = "fix: run the collector as root, or grant it CAP_BPF and CAP_PERFMON " +
			"(setcap cap_bpf,cap_perfmon+ep otelcol-perfprof; in Kubernetes securityContext.capabilities.add: [BPF, PERFMON])"
	)
	if !ok {
		return fmt.Errorf("%w (%v): %s; %s", ErrPermission, err, needs, fix)
	}
	have := func(c uint) bool { return eff&(1<<c) != 0 }
	var missing []string
	if !have(capSysAdmin) {
		if !have(capBPF) {
			missing = append(missing, "CAP_BPF")
		}
		if !have(capPerfmon) {
			missing = append(missing, "CAP_PERFMON")
		}
	}
	if len(missing) == 0 {
		return fmt.Errorf("%w (%v): this process has the capabilities (%s), so the kernel refused for another reason: "+
			"RLIMIT_MEMLOCK before Linux 5.11, kernel lockdown, or a seccomp or LSM policy", ErrPermission, err, needs)
	}
	cause := err
	var errno unix.Errno
	if errors.As(err, &errno) {
		cause = errno
	}
	return fmt.Errorf("%w (%v): this process lacks %s (%s); %s", ErrPermission, cause, strings.Join(missing, " and "), needs, fix)
}

// effectiveCaps returns the effective capabilities of the calling thread.
func effectiveCaps() (uint64, bool) {
	var data [2]unix.CapUserData
	if err := unix.Capget(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &data[0]); err != nil {
		return 0, false
	}
	return uint64(data[1].Effective)<<32 | uint64(data[0].Effective), true
}

// PidNamespace is the pid namespace whose ids the programs use, the
// collector's: the pids of AddTarget and of records are in it.
func (p *Program) PidNamespace() PidNamespace { return p.ns }

// FD is the file descriptor of the program for cpu-clock sampling events,
// for PERF_EVENT_IOC_SET_BPF (see perf.Options.BPFProgram).
func (p *Program) FD() int { return p.objs.Sample.FD() }

// SwitchFD is the file descriptor of the program for context-switch
// events (perf.Options.BPFSwitchProgram): its records carry FlagSwitch.
func (p *Program) SwitchFD() int { return p.objs.Switch.FD() }

// AttachPerfEvent attaches the cpu-clock program to the perf event fd (a
// sampling event: software cpu-clock, or any that samples). The event
// keeps the program until it is closed; events inherited by new threads
// inherit it.
func (p *Program) AttachPerfEvent(fd int) error {
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, p.FD()); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return fmt.Errorf("attach spanctx to perf event: %w (%v)", ErrPermission, err)
		}
		return fmt.Errorf("attach spanctx to perf event: %w", err)
	}
	return nil
}

// AddTarget makes the programs read the labels of pid's goroutines, at the
// places l says (goruntime.ReadFile("/proc/PID/exe")). A process whose
// labels are not a slice (Go 1.23 and older, or no runtime/pprof) is
// added too: its records say whether a goroutine ran, with no labels.
func (p *Program) AddTarget(pid int, l goruntime.Layout) error {
	v := spanctxTarget{Kind: targetGo}
	v.Go.TlsG, v.Go.G_m, v.Go.G_labels, v.Go.M_curg, v.Go.G_goid = l.TLSG, l.GM, l.GLabels, l.MCurg, l.GGoid
	// label_size 0 tells the program not to read the label set: it
	// then reports labels as present (FlagLabels) without a span.
	if l.Labels == goruntime.LabelsSlice {
		v.Go.LabelList, v.Go.LabelSize, v.Go.LabelKey, v.Go.LabelValue = l.LabelList, l.LabelSize, l.LabelKey, l.LabelValue
	}
	return p.put(pid, &v)
}

// AddThreadContextTarget makes the programs read, in each thread of pid,
// the OTEP 4947 context record that otel_thread_ctx_v1 points to, found
// where v says (otelctx.LocateTLS). Its records carry FlagThreadContext.
func (p *Program) AddThreadContextTarget(pid int, v otelctx.TLSVar) error {
	t, err := tlsTarget(pid, targetTLS, v)
	if err != nil {
		return err
	}
	return p.put(pid, &t)
}

// AddNodeTarget makes the programs read, in each thread of pid, the OTEP
// 4947 record of the context its JavaScript runs in, walking V8's heap
// from the thread's Node.js discovery struct (schema nodejs_v1_dev),
// found where v says (otelctx.LocateTLSSymbol with otelctx.NodeTLSSymbol).
// Its records carry FlagThreadContext; a walk that does not validate
// FlagWalk.
func (p *Program) AddNodeTarget(pid int, v otelctx.TLSVar) error {
	t, err := tlsTarget(pid, targetNode, v)
	if err != nil {
		return err
	}
	return p.put(pid, &t)
}

func tlsTarget(pid int, kind uint32, v otelctx.TLSVar) (spanctxTarget, error) {
	t := spanctxTarget{Kind: kind}
	if v.Static {
		t.Tls.TpOffset = v.TPOffset
	} else {
		if v.Module == 0 {
			return t, fmt.Errorf("add target pid %d: dynamic TLS of module 0", pid)
		}
		t.Tls.Module, t.Tls.Offset = v.Module, v.Offset
	}
	return t, nil
}

// AddPlainTarget keeps the samples of pid (with DropOthers) without
// reading any span in it; AddTarget and AddThreadContextTarget replace it.
func (p *Program) AddPlainTarget(pid int) error {
	return p.put(pid, &spanctxTarget{Kind: targetPlain})
}

// Must match TARGET_* in spanctx.h.
const (
	targetPlain = 0
	targetGo    = 1
	targetTLS   = 2
	targetNode  = 3
)

func (p *Program) put(pid int, v *spanctxTarget) error {
	if err := p.objs.Targets.Put(uint32(pid), v); err != nil {
		return fmt.Errorf("add target pid %d: %w", pid, err)
	}
	return nil
}

// RemoveTarget stops reading pid's labels. Removing a pid that is not a
// target is not an error.
func (p *Program) RemoveTarget(pid int) error {
	if err := p.objs.Targets.Delete(uint32(pid)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("remove target pid %d: %w", pid, err)
	}
	return nil
}

// Buffered is the number of bytes of records in the ring buffer, read
// without a system call: a reader can poll it cheaply and drain only when
// the ring fills.
func (p *Program) Buffered() int { return p.buffered(&p.reader) }

// SchedBuffered is Buffered for the scheduler program's ring; 0 when
// it was not loaded.
func (p *Program) SchedBuffered() int { return p.buffered(&p.sreader) }

// buffered returns the bytes in *r, 0 once it is closed (Close sets it
// to nil, under drainMu).
func (p *Program) buffered(r **ringbuf.Reader) int {
	p.drainMu.Lock()
	defer p.drainMu.Unlock()
	if *r == nil {
		return 0
	}
	return (*r).AvailableBytes()
}

// Drain passes every record in the ring buffer to fn, without waiting for
// more, and returns how many it passed. The record of a sample is in the
// ring before perf writes the sample, so a reader that drains after it
// has read a sample from a perf ring has that sample's record. fn runs on
// the calling goroutine; the Record is reused after it returns. Calls are
// serialised.
func (p *Program) Drain(fn func(*Record)) (int, error) {
	p.drainMu.Lock()
	defer p.drainMu.Unlock()
	if p.reader == nil {
		return 0, fmt.Errorf("bpf: %w", os.ErrClosed)
	}
	// An atomic load of the ring's positions: no system call when empty.
	if p.reader.AvailableBytes() == 0 {
		return 0, nil
	}
	return drainRing(p.reader, &p.raw, "records", fn)
}

// drainRing passes every record in r to fn, decoded into one R reused
// from call to call, until r has none left (its deadline is in the past).
// raw is the caller's buffer.
func drainRing[R any, PR interface {
	*R
	decode([]byte) error
}](r *ringbuf.Reader, raw *ringbuf.Record, ring string, fn func(PR)) (int, error) {
	var rec R
	n := 0
	for {
		err := r.ReadInto(raw)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("read %s ring buffer: %w", ring, err)
		}
		if err := PR(&rec).decode(raw.RawSample); err != nil {
			return n, err
		}
		n++
		fn(&rec)
	}
}

// AttachSched attaches the scheduler program (Options.SchedInterval) to
// the sched_switch tracepoint: from now on it keeps the accounting of the
// targets' threads. It stays attached until Close.
func (p *Program) AttachSched() error {
	if p.sched == nil {
		return errors.New("bpf: the scheduler program was not loaded (Options.SchedInterval)")
	}
	if p.link != nil {
		return nil
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: p.sched.SchedSwitch})
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return fmt.Errorf("attach the scheduler program to sched_switch: %w (%v)", ErrPermission, err)
		}
		return fmt.Errorf("attach the scheduler program to sched_switch: %w", err)
	}
	p.link = l
	return nil
}

// DrainSched passes every group of off-CPU time in the scheduler program's
// ring buffer to fn, without waiting for more, and returns how many. The
// SchedRecord is reused after fn returns. Calls are serialised with Drain.
func (p *Program) DrainSched(fn func(*SchedRecord)) (int, error) {
	p.drainMu.Lock()
	defer p.drainMu.Unlock()
	if p.sreader == nil {
		return 0, fmt.Errorf("bpf: %w", os.ErrClosed)
	}
	if p.sreader.AvailableBytes() == 0 {
		return 0, nil
	}
	return drainRing(p.sreader, &p.raw, "sched_records", fn)
}

// Stats are cumulative counters of the program.
type Stats struct {
	// Samples counts runs for samples of targets; each one writes a
	// record unless the ring buffer is full (Dropped).
	Samples, Dropped uint64
	// What the runs found (a sample counts in at most one of NoGoroutine,
	// NotValid, NoLabels and NoSpan): no goroutine on the thread (or no
	// thread pointer), a thread context record being written, a goroutine
	// without labels (a thread without a record), labels (a record)
	// without a span. BadValue counts span or trace values that were not
	// hex ids, Faults failed reads of the target's memory.
	NoGoroutine, NotValid, NoLabels, NoSpan, BadValue, Faults uint64
	// Others counts the samples of processes that are not targets that
	// the programs dropped (Options.DropOthers).
	Others uint64
	// SchedDropped counts groups of off-CPU time the scheduler program
	// could not write: its ring buffer was full.
	SchedDropped uint64
	// SchedShort counts off periods below Options.MinBlock, not counted
	// as off-CPU time; SchedDeferred groups held back by Options.MaxRate
	// (their time goes into a later group).
	SchedShort, SchedDeferred uint64
	// SchedCaptured and SchedUncaptured count target switch-outs whose
	// stack and span were read, and those that were not
	// (Options.CaptureGap, CaptureEvery).
	SchedCaptured, SchedUncaptured uint64
	// SchedNoState counts the times the scheduler program could not
	// make the state of a target's thread (task storage refused): that
	// thread's switch was not accounted.
	SchedNoState uint64
	// Node.js walks (AddNodeTarget) that did not validate, by the step
	// that failed: the discovery struct's record slot offset (0 or not a
	// multiple of 8); a frame, table or value not tagged as a heap object;
	// the frame's table being rehashed; table counts out of their bounds;
	// a bucket chain longer than the walk follows.
	NodeSlot, NodeTag, NodeRehash, NodeTable, NodeChain uint64
	// RunCount and RunTime are the kernel's totals over all runs of the
	// programs, for every sample of every event they are attached to and
	// every context switch (targets or not). Zero without
	// Options.RunStats, or when they could not be enabled (they need
	// CAP_SYS_ADMIN). Runs has them per program.
	RunCount uint64
	RunTime  time.Duration
	Runs     [NumPrograms]ProgramRuns
}

// ProgramRuns are the kernel's run-time statistics of one program.
type ProgramRuns struct {
	Count uint64
	Time  time.Duration
}

// The programs, as Stats.Runs indexes them.
const (
	ProgSample = iota // on the cpu-clock events: a sample's span
	ProgSwitch        // on perf's context-switch events (when the scheduler program cannot run)
	ProgSched         // the scheduler program (sched_switch)
	NumPrograms
)

// ProgramNames are the programs' names in telemetry.
var ProgramNames = [NumPrograms]string{"sampling", "switch_out", "scheduler"}

// Must match the STAT_* enum in spanctx.h.
const (
	statRuns = iota
	statDropped
	statNoG
	statNoLabels
	statNoSpan
	statBadValue
	statFaults
	statNotValid
	statOthers
	statSchedDropped
	statSchedShort
	statSchedDeferred
	statSchedCaptured
	statSchedUncaptured
	statSchedNoState
	statNodeSlot
	statNodeTag
	statNodeRehash
	statNodeTable
	statNodeChain
	statMax
)

// Stats reads the counters.
func (p *Program) Stats() (Stats, error) {
	var s Stats
	dst := [statMax]*uint64{&s.Samples, &s.Dropped, &s.NoGoroutine, &s.NoLabels, &s.NoSpan, &s.BadValue, &s.Faults, &s.NotValid, &s.Others, &s.SchedDropped,
		&s.SchedShort, &s.SchedDeferred, &s.SchedCaptured, &s.SchedUncaptured, &s.SchedNoState,
		&s.NodeSlot, &s.NodeTag, &s.NodeRehash, &s.NodeTable, &s.NodeChain}
	var perCPU [][statMax]uint64
	if err := p.objs.Stats.Lookup(uint32(0), &perCPU); err != nil {
		return s, fmt.Errorf("read spanctx stats: %w", err)
	}
	for _, cpu := range perCPU {
		for i, v := range cpu {
			*dst[i] += v
		}
	}
	progs := [NumPrograms]*ebpf.Program{p.objs.Sample, p.objs.Switch}
	if p.sched != nil {
		progs[ProgSched] = p.sched.SchedSwitch
	}
	for i, prog := range progs {
		if prog == nil {
			continue
		}
		if ps, err := prog.Stats(); err == nil {
			s.Runs[i] = ProgramRuns{Count: ps.RunCount, Time: ps.Runtime}
			s.RunCount += ps.RunCount
			s.RunTime += ps.Runtime
		}
	}
	return s, nil
}

// Close unloads the program. Events it is attached to keep running it
// until they are closed themselves. Safe to call more than once.
func (p *Program) Close() error {
	var err error
	p.closeOnce.Do(func() {
		p.drainMu.Lock()
		defer p.drainMu.Unlock()
		if p.link != nil {
			err = p.link.Close()
			p.link = nil
		}
		if p.reader != nil {
			err = errors.Join(err, p.reader.Close())
			p.reader = nil
		}
		if p.sreader != nil {
			err = errors.Join(err, p.sreader.Close())
			p.sreader = nil
		}
		if p.sched != nil {
			err = errors.Join(err, p.sched.Close())
		}
		if p.stats != nil {
			p.stats.Close()
		}
		if cerr := p.objs.Close(); err == nil {
			err = cerr
		}
	})
	return err
}
