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

// perfRecordArgs is the perf record command line of a perf-record-HZ run.
// cpu-clock because VMs often have no hardware events. It starts with its
// events disabled (-D -1) and enables them on "enable" written to the
// control FIFO, answering "ack" on the other: that tells when perf is
// attached. --no-buildid skips reading every hit binary at exit.
// With pid "" it is perf-record-system-HZ: every CPU (-a).
func perfRecordArgs(pid, hz, data, ctl, ack string, dwarf bool) []string {
	target := []string{"-p", pid}
	if pid == "" {
		target = []string{"-a"}
	}
	callGraph := []string{"-g"}
	if dwarf {
		// perf's default copy: 8 KiB of stack per sample.
		callGraph = []string{"--call-graph", "dwarf"}
	}
	args := append(append([]string{"record", "-e", "cpu-clock", "-F", hz}, callGraph...), target...)
	return append(args, "-o", data, "--no-buildid", "-D", "-1", "--control", "fifo:"+ctl+","+ack)
}

type perfRun struct {
	*measure.Process
	perf    string
	data    string
	system  bool // -a: it does not exit with the child
	ctl     *os.File
	ack     *os.File
	baseCPU time.Duration
}

// startPerfRecord starts perf record on pid and returns once its events are
// enabled.
func (h *harness) startPerfRecord(ctx context.Context, pid, hz int, system, dwarf bool) (_ *perfRun, err error) {
	p := &perfRun{perf: h.perfPath, data: filepath.Join(h.tmp, "perf.data"), system: system}
	ctl, ack := filepath.Join(h.tmp, "perf-ctl"), filepath.Join(h.tmp, "perf-ack")
	defer func() {
		if err != nil {
			p.kill()
		}
	}()
	for _, f := range []*string{&ctl, &ack} {
		_ = os.Remove(*f)
		if err := syscall.Mkfifo(*f, 0o600); err != nil {
			return nil, fmt.Errorf("make perf control FIFO: %w", err)
		}
	}
	// Read-write opens of a FIFO do not block waiting for the other end.
	if p.ctl, err = os.OpenFile(ctl, os.O_RDWR, 0); err != nil {
		return nil, err
	}
	if p.ack, err = os.OpenFile(ack, os.O_RDWR, 0); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, h.perfPath, perfRecordArgs(map[bool]string{false: strconv.Itoa(pid), true: ""}[system], strconv.Itoa(hz), p.data, ctl, ack, dwarf)...)
	if p.Process, err = measure.Start("perf record", cmd); err != nil {
		return nil, err
	}
	if _, err := p.ctl.WriteString("enable\n"); err != nil {
		return nil, fmt.Errorf("enable perf record: %w", err)
	}
	acked := make(chan error, 1)
	go func() {
		_ = p.ack.SetReadDeadline(time.Now().Add(time.Minute))
		b := make([]byte, 16)
		n, err := p.ack.Read(b)
		if err == nil && !strings.HasPrefix(string(b[:n]), "ack") {
			err = fmt.Errorf("perf record answered %q, not ack", b[:n])
		}
		acked <- err
	}()
	select {
	case err = <-acked:
	case <-p.Exited():
		<-p.OutputDone()
		err = fmt.Errorf("perf record exited (%v)", p.Err())
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err == nil {
		p.baseCPU, err = measure.TaskCPU(cmd.Process.Pid)
	}
	if err != nil {
		return nil, fmt.Errorf("%w\nperf record output:\n%s", err, p.Tail(20))
	}
	return p, nil
}

// finish waits for perf record to exit (it does when its target exits;
// with -a it is interrupted, the child having exited), takes its CPU time
// and peak RSS from its rusage, and counts the samples in its file.
func (p *perfRun) finish(ctx context.Context, res *result) error {
	interrupted := false // perf record's way out of -a
	if p.system {
		err := p.Stop(os.Interrupt, 30*time.Second)
		var ee *exec.ExitError
		interrupted = errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT
	}
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		_ = p.Stop(os.Interrupt, 30*time.Second)
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := p.Err(); err != nil && !interrupted {
		return fmt.Errorf("perf record: %w\n%s", err, p.Tail(20))
	}
	ru, ok := p.Cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return fmt.Errorf("perf record: no rusage")
	}
	res.profCPU = time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) - p.baseCPU
	res.rssKB = uint64(ru.Maxrss)
	out, err := exec.CommandContext(ctx, p.perf, "report", "-i", p.data, "--stats").CombinedOutput()
	if err != nil {
		return fmt.Errorf("perf report --stats: %w\n%s", err, out)
	}
	res.samples, res.lost = countPerfStats(string(out))
	p.close()
	return os.Remove(p.data)
}

// countPerfStats reads the SAMPLE and LOST(_SAMPLES) counts from the first
// (aggregated) block of `perf report --stats`.
func countPerfStats(out string) (samples, lost uint64) {
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), " events:")
		if !ok || seen[name] {
			continue
		}
		seen[name] = true
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "SAMPLE":
			samples = v
		case "LOST", "LOST_SAMPLES":
			lost += v
		}
	}
	return samples, lost
}

func (p *perfRun) close() {
	if p.ctl != nil {
		p.ctl.Close()
	}
	if p.ack != nil {
		p.ack.Close()
	}
}

func (p *perfRun) kill() {
	if p.Process != nil {
		p.Process.Kill()
	}
	p.close()
}
