package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/perfprof/perfprof/test/measure"
)

// reportInterval is the collector's report_interval: how long after the
// child's release its last profiles may take to be exported.
const reportInterval = 2 * time.Second

// collectorConfig profiles one pid and drops the profiles into the debug
// exporter. Metrics are on (level basic) only so that the sample counter can
// be scraped at the end of a run. Argument 5 is sched.enabled, 6 more
// receiver lines (ring_pages), each starting with a newline, 8 more sched
// options, each starting with a comma.
const collectorConfig = `receivers:
  perfprof:
    targets: {pids: [%[1]v]}
    scope: %[7]s
    frequency: %[2]v
    report_interval: %[3]s
    sched: {enabled: %[5]v%[8]s}%[6]s
exporters:
  debug: {verbosity: basic}
service:
  telemetry:
    logs: {level: info}
    metrics:
      level: basic
      readers:
        - pull:
            exporter:
              prometheus: {host: 127.0.0.1, port: %[4]v, without_scope_info: true, without_units: true, without_type_suffix: true}
  pipelines:
    profiles: {receivers: [perfprof], exporters: [debug]}
`

// collectorRun is the collector of one perfprof run.
type collectorRun struct {
	*measure.Process
	port    int
	baseCPU time.Duration
}

// collectorYAML is the collector's configuration for mode m.
func collectorYAML(pid, hz, port any, m mode) string {
	var extra string
	if m.noRecover {
		extra += "\n    recover_leaf_caller: false"
	}
	if m.noBPF {
		extra += "\n    ebpf: off"
	}
	switch m.unwind {
	case "fp":
		extra += "\n    unwind: frame_pointer"
	case "dwarf":
		extra += "\n    unwind: dwarf"
	}
	if m.runStats {
		extra += "\n    ebpf_run_stats: true"
	}
	if m.ringPages > 0 {
		extra += fmt.Sprintf("\n    ring_pages: %d", m.ringPages)
	}
	var sched string
	if m.gap != "" {
		sched += ", stack_min_gap: " + m.gap
	}
	if m.every > 0 {
		sched += fmt.Sprintf(", stack_every: %d", m.every)
	}
	scope := "process"
	if m.system {
		scope = "system"
	}
	return fmt.Sprintf(collectorConfig, pid, hz, reportInterval, port, !m.noSched, extra, scope, sched)
}

// startCollector starts the collector on pid and returns once it logged
// "Sampling process" for it; its CPU time is read then, so that start-up
// does not count.
func (h *harness) startCollector(ctx context.Context, pid int, m mode) (*collectorRun, error) {
	port, err := measure.FreePort()
	if err != nil {
		return nil, err
	}
	config := filepath.Join(h.tmp, m.name+".yaml")
	if err := os.WriteFile(config, []byte(collectorYAML(pid, m.hz, port, m)), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, h.collector, measure.CollectorArgs(config)...)
	w, err := measure.Start("collector", cmd)
	if err != nil {
		return nil, err
	}
	c := &collectorRun{Process: w, port: port}
	i, what, err := c.WaitLine(ctx, 0, time.Minute, "Sampling process", "Cannot attach to process")
	if err == nil && what != "Sampling process" {
		err = fmt.Errorf("collector: %s", c.Line(i))
	}
	if err == nil {
		c.baseCPU, err = measure.TaskCPU(cmd.Process.Pid)
	}
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("%w\ncollector output:\n%s", err, c.Tail(20))
	}
	return c, nil
}

func (c *collectorRun) kill() { c.Kill() }

// finish waits until the collector released the exited child and exported
// its last profiles, reads its CPU time, peak RSS and sample counters, and
// stops it with SIGTERM.
func (c *collectorRun) finish(ctx context.Context, res *result) error {
	pid := c.Pid()
	// Discovery notices the exit within a second.
	i, _, err := c.WaitLine(ctx, 0, 10*time.Second, "Released process")
	if err != nil {
		return fmt.Errorf("%w\ncollector output:\n%s", err, c.Tail(20))
	}
	// The next report sends what is left, if anything is: no Profiles line
	// within a report interval means nothing was.
	if _, _, err := c.WaitLine(ctx, i+1, reportInterval+time.Second, "\tProfiles\t"); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w\ncollector output:\n%s", err, c.Tail(20))
	}
	cpu, err := measure.TaskCPU(pid)
	if err != nil {
		return err
	}
	res.profCPU = cpu - c.baseCPU
	if res.rssKB, err = measure.PeakRSS(pid); err != nil {
		return err
	}
	m, err := measure.Scrape(ctx, c.port)
	if err != nil {
		return fmt.Errorf("read the collector's sample counter: %w", err)
	}
	res.samples = m["otelcol_receiver_perfprof_samples"]
	res.lost = m["otelcol_receiver_perfprof_lost_records"]
	res.bpfRuns = m["otelcol_receiver_perfprof_ebpf_runs"]
	res.bpfNs = m["otelcol_receiver_perfprof_ebpf_run_time"]
	res.offCPU = m["otelcol_receiver_perfprof_off_cpu_samples"]
	res.offLost = m["otelcol_receiver_perfprof_off_cpu_dropped"] + m["otelcol_receiver_perfprof_ebpf_records_dropped"]
	if d := m["otelcol_receiver_perfprof_dropped_samples"]; d > 0 {
		return fmt.Errorf("the collector dropped %d samples", d)
	}
	if err := c.Stop(syscall.SIGTERM, 20*time.Second); err != nil {
		return fmt.Errorf("stop the collector: %w\ncollector output:\n%s", err, c.Tail(20))
	}
	return nil
}
