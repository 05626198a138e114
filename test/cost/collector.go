package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/perfprof/perfprof/test/measure"
)

// absent is the executable name the receiver is given where no process
// is to be sampled (the idle and span rows): the receiver needs a target
// selector, and discovery finds no process of this name.
const absent = "perfprof-cost-no-such-process"

// The collector configurations, one per kind of row. Only targets and
// frequency are set in the receiver; everything else is its default.
// %[1]s is the receiver's targets, %[2]s its frequency line (or nothing),
// %[3]s the trace file directory, %[4]s the telemetry section.
const profilesConfig = `receivers:
  perfprof:
    targets: %[1]s%[2]s
exporters:
  tracefile: {directory: %[3]s}
service:
%[4]s  pipelines:
    profiles: {receivers: [perfprof], exporters: [tracefile]}
`

// spansConfig: %[1]s the receivers section, %[2]s the receiver's name,
// %[3]s the sink's address, %[4]s the telemetry section.
const spansConfig = `receivers:
%[1]sexporters:
  otlp_grpc:
    endpoint: %[3]s
    tls: {insecure: true}
service:
%[4]s  pipelines:
    traces: {receivers: [%[2]s], exporters: [otlp_grpc]}
`

// perfprofSpans is perfprof's receivers section for the spans row: no
// process to sample, spans over OTLP/gRPC on %[1]s.
const perfprofSpans = `  perfprof:
    targets: {executables: [` + absent + `]}
    protocols:
      grpc: {endpoint: %[1]s}
`

// otlpSpans is the stock otlp receiver's, on %[1]s.
const otlpSpans = `  otlp:
    protocols:
      grpc: {endpoint: %[1]s}
`

// config is the collector's configuration for case c. pid is the target's
// (0: none), spans the address the receiver takes spans on, dir the trace
// file directory, sinkAddr the sink's, port the metrics port.
func (c *costCase) config(pid int, spans, dir, sinkAddr string, port int) string {
	tel := measure.TelemetryYAML(port)
	switch c.kind {
	case kindIdle:
		return fmt.Sprintf(profilesConfig, "{executables: ["+absent+"]}", "", dir, tel)
	case kindTarget:
		sel := fmt.Sprintf("{pids: [%d]}", pid)
		if c.target != nil && c.target.exe != "" {
			sel = "{executables: [" + c.target.exe + "]}"
		}
		return fmt.Sprintf(profilesConfig, sel, fmt.Sprintf("\n    frequency: %d", c.hz), dir, tel)
	case kindSpansPerfprof:
		return fmt.Sprintf(spansConfig, fmt.Sprintf(perfprofSpans, spans), "perfprof", sinkAddr, tel)
	default: // kindSpansOTLP
		return fmt.Sprintf(spansConfig, fmt.Sprintf(otlpSpans, spans), "otlp", sinkAddr, tel)
	}
}

// result is one run of one case: the collector's cost over the window.
type result struct {
	err  error
	wall time.Duration // the window, as measured
	cpu  time.Duration // the collector's threads' CPU time over the window
	mem  measure.Memory
	// The target's utime+stime over the window (target rows).
	targetCPU time.Duration

	// Counters over the window, from the collector's own metrics.
	samples, offCPU, lost, dropped   uint64
	spansIn, spansSent, spansRefused uint64
	// Spans the sink received over the window.
	spansSink uint64
}

func (r result) cpuPct() float64 { return 100 * r.cpu.Seconds() / r.wall.Seconds() }

// targetCores is the target's CPU time over the window's wall time.
func (r result) targetCores() float64 { return r.targetCPU.Seconds() / r.wall.Seconds() }

func perSec(n uint64, d time.Duration) float64 { return float64(n) / d.Seconds() }

// perK is CPU milliseconds per 1000 of n.
func perK(cpu time.Duration, n uint64) float64 {
	if n == 0 {
		return 0
	}
	return float64(cpu) / float64(time.Millisecond) / (float64(n) / 1000)
}

// runCase runs case c once: target (or span load), collector, warm-up,
// window. A failure is returned in the result, with why.
func (t *tool) runCase(ctx context.Context, c *costCase) (res result) {
	dir, err := os.MkdirTemp(t.tmp, c.name+"-")
	if err != nil {
		return result{err: err}
	}
	defer os.RemoveAll(dir)

	// The sink takes the Go service's spans and the span rows' exports.
	var s *sink
	if c.kind == kindSpansPerfprof || c.kind == kindSpansOTLP || (c.target != nil && c.target.name == "go") {
		if s, err = startSink(); err != nil {
			return result{err: fmt.Errorf("start the sink: %w", err)}
		}
		defer s.stop()
	}

	var tg *running
	pid := 0
	if c.target != nil {
		if tg, err = c.target.start(ctx, t, s); err != nil {
			return result{err: fmt.Errorf("start the target: %w", err)}
		}
		defer tg.stop()
		pid = tg.pid
	}

	port, err := measure.FreePort()
	if err != nil {
		return result{err: err}
	}
	var spansAddr string
	if s != nil && c.target == nil {
		p, err := measure.FreePort()
		if err != nil {
			return result{err: err}
		}
		spansAddr = "127.0.0.1:" + strconv.Itoa(p)
	}
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte(c.config(pid, spansAddr, filepath.Join(dir, "traces"), addrOf(s), port)), 0o644); err != nil {
		return result{err: err}
	}
	col, err := measure.Start("collector", exec.CommandContext(ctx, t.collector, measure.CollectorArgs(config)...))
	if err != nil {
		return result{err: err}
	}
	defer col.Kill()
	fail := func(err error) result {
		return result{err: fmt.Errorf("%w\ncollector output:\n%s", err, col.Tail(20))}
	}
	i, what, err := col.WaitLine(ctx, 0, time.Minute, "Everything is ready", "Cannot attach to process")
	if err == nil && what != "Everything is ready" {
		err = errors.New(col.Line(i))
	}
	if err != nil {
		return fail(err)
	}
	if c.kind == kindTarget {
		if _, _, err := col.WaitLine(ctx, 0, 10*time.Second, "Sampling process"); err != nil {
			return fail(fmt.Errorf("the collector is ready but did not log \"Sampling process\" for pid %d (%v)", pid, err))
		}
	}

	if c.kind == kindSpansPerfprof || c.kind == kindSpansOTLP {
		gen := exec.CommandContext(ctx, t.spangen, "-rate", strconv.Itoa(t.spanRate), "-threads", strconv.Itoa(spanThreads),
			"-burn", "0s", "-endpoint", spansAddr)
		p, _, err := startReady(ctx, "spangen", gen, 10*time.Second)
		if err != nil {
			return fail(err)
		}
		defer p.Kill()
		tg = &running{procs: []*measure.Process{p}}
	}

	// Warm-up, then the window; the run fails if the collector or the
	// target stops meanwhile.
	if err := t.hold(ctx, t.warmup, col, tg); err != nil {
		return fail(err)
	}
	cpid := col.Pid()
	before, err := t.sample(ctx, cpid, pid, port, s)
	if err != nil {
		return fail(err)
	}
	if err := t.hold(ctx, t.window, col, tg); err != nil {
		return fail(err)
	}
	after, err := t.sample(ctx, cpid, pid, port, s)
	if err != nil {
		return fail(err)
	}
	if res.mem, err = measure.ReadMemory(cpid); err != nil {
		return fail(err)
	}
	res.wall = after.at.Sub(before.at)
	res.cpu = after.cpu - before.cpu
	res.targetCPU = after.targetCPU - before.targetCPU
	d := func(name string) uint64 { return after.m[name] - min(before.m[name], after.m[name]) }
	res.samples = d("otelcol_receiver_perfprof_samples")
	res.offCPU = d("otelcol_receiver_perfprof_off_cpu_samples")
	res.lost = d("otelcol_receiver_perfprof_lost_records")
	res.dropped = d("otelcol_receiver_perfprof_dropped_samples")
	res.spansIn = d("otelcol_receiver_accepted_spans")
	res.spansRefused = d("otelcol_receiver_refused_spans") + d("otelcol_receiver_failed_spans")
	res.spansSent = d("otelcol_exporter_sent_spans")
	res.spansSink = after.sink - before.sink

	// What makes a run's figures meaningless.
	switch spanRow := c.kind == kindSpansPerfprof || c.kind == kindSpansOTLP; {
	case c.kind == kindTarget && res.samples == 0:
		return fail(errors.New("no samples over the window"))
	case spanRow && res.spansIn == 0:
		return fail(fmt.Errorf("the receiver accepted no spans over the window (%d refused or failed)", res.spansRefused))
	case spanRow && res.spansSink == 0:
		return fail(fmt.Errorf("the sink received no spans over the window: the receiver accepted %d, the exporter sent %d", res.spansIn, res.spansSent))
	}
	if err := col.Stop(syscall.SIGTERM, 20*time.Second); err != nil {
		return fail(fmt.Errorf("stop the collector: %w", err))
	}
	return res
}

// snapshot is what is read at each end of the window.
type snapshot struct {
	at        time.Time
	cpu       time.Duration // the collector's
	targetCPU time.Duration
	m         map[string]uint64
	sink      uint64
}

// sample reads the CPU time of the collector (pid) and of the target
// (target, 0 for none), the collector's metrics and the sink's count.
func (t *tool) sample(ctx context.Context, pid, target, port int, s *sink) (snapshot, error) {
	var sn snapshot
	var err error
	sn.at = time.Now()
	if sn.cpu, err = measure.TaskCPU(pid); err != nil {
		return sn, err
	}
	if target > 0 {
		if sn.targetCPU, err = measure.StatCPU(target); err != nil {
			return sn, fmt.Errorf("the target: %w", err)
		}
	}
	if sn.m, err = measure.Scrape(ctx, port); err != nil {
		return sn, fmt.Errorf("read the collector's metrics: %w", err)
	}
	if s != nil {
		sn.sink = s.spans.Load()
	}
	return sn, nil
}

// hold waits d, failing if the collector or a process of the target (or
// of the span load) exits meanwhile.
func (t *tool) hold(ctx context.Context, d time.Duration, col *measure.Process, tg *running) error {
	var tgExited <-chan struct{}
	if tg != nil {
		tgExited = tg.exited()
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-col.Exited():
		return fmt.Errorf("the collector exited (%v)", col.Err())
	case <-tgExited:
		return errors.New(strings.TrimSpace("the load stopped: " + tg.why()))
	}
}

func addrOf(s *sink) string {
	if s == nil {
		return ""
	}
	return s.addr
}
