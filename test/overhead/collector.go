package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
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

func collectorArgs(config string) []string {
	return []string{"--config", config, "--feature-gates=service.profilesSupport"}
}

// collectorRun is the collector of one perfprof run.
type collectorRun struct {
	*watched
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
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	config := filepath.Join(h.tmp, m.name+".yaml")
	if err := os.WriteFile(config, []byte(collectorYAML(pid, m.hz, port, m)), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, h.collector, collectorArgs(config)...)
	w, err := startWatched("collector", cmd)
	if err != nil {
		return nil, err
	}
	c := &collectorRun{watched: w, port: port}
	i, what, err := c.waitLine(ctx, 0, time.Minute, "Sampling process", "Cannot attach to process")
	if err == nil && what != "Sampling process" {
		err = fmt.Errorf("collector: %s", c.line(i))
	}
	if err == nil {
		c.baseCPU, err = taskCPU(cmd.Process.Pid)
	}
	if err != nil {
		c.kill()
		return nil, fmt.Errorf("%w\ncollector output:\n%s", err, c.tail(20))
	}
	return c, nil
}

// finish waits until the collector released the exited child and exported
// its last profiles, reads its CPU time, peak RSS and sample counters, and
// stops it with SIGTERM.
func (c *collectorRun) finish(ctx context.Context, res *result) error {
	pid := c.cmd.Process.Pid
	// Discovery notices the exit within a second.
	i, _, err := c.waitLine(ctx, 0, 10*time.Second, "Released process")
	if err != nil {
		return fmt.Errorf("%w\ncollector output:\n%s", err, c.tail(20))
	}
	// The next report sends what is left, if anything is: no Profiles line
	// within a report interval means nothing was.
	if _, _, err := c.waitLine(ctx, i+1, reportInterval+time.Second, "\tProfiles\t"); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w\ncollector output:\n%s", err, c.tail(20))
	}
	cpu, err := taskCPU(pid)
	if err != nil {
		return err
	}
	res.profCPU = cpu - c.baseCPU
	if res.rssKB, err = peakRSS(pid); err != nil {
		return err
	}
	m, err := scrape(ctx, c.port)
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
	if err := c.stop(syscall.SIGTERM, 20*time.Second); err != nil {
		return fmt.Errorf("stop the collector: %w\ncollector output:\n%s", err, c.tail(20))
	}
	return nil
}

// scrape reads the collector's Prometheus endpoint and returns the value of
// every metric, summed over labels, by name (without a _total suffix).
func scrape(ctx context.Context, port int) (map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	m := map[string]uint64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		name, val := line[:sp], line[sp+1:]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil || v < 0 {
			continue
		}
		m[strings.TrimSuffix(name, "_total")] += uint64(v)
	}
	return m, sc.Err()
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
