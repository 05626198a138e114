package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// taskCPU returns the CPU time of every live thread of pid, summed, from
// /proc/PID/task/TID/schedstat (nanoseconds; /proc/PID/stat has 10 ms
// ticks).
func taskCPU(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("read CPU time of pid %d: %w", pid, err)
	}
	var sum time.Duration
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read CPU time of pid %d: %s/schedstat: %w", pid, e.Name(), err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// peakRSS returns VmHWM of pid in KiB.
func peakRSS(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read peak RSS: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("read peak RSS: no VmHWM in /proc/%d/status", pid)
}

// watched is a started helper process (collector, perf) whose combined
// output is kept line by line so that the harness can wait for a line, and
// shown when something goes wrong.
type watched struct {
	name string
	cmd  *exec.Cmd

	mu      sync.Mutex
	lines   []string
	changed chan struct{} // a line came (capacity 1)
	eof     chan struct{} // output ended
	exited  chan struct{} // closed after cmd.Wait returned
	waitErr error
}

var errExited = errors.New("exited")

// startWatched starts cmd with stdout and stderr captured.
func startWatched(name string, cmd *exec.Cmd) (*watched, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &watched{name: name, cmd: cmd, changed: make(chan struct{}, 1), eof: make(chan struct{}), exited: make(chan struct{})}
	go p.scan(r)
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *watched) scan(r io.ReadCloser) {
	defer r.Close()
	defer close(p.eof)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, sc.Text())
		p.mu.Unlock()
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// waitLine waits up to timeout for a line at index from or later that
// contains one of subs, and returns its index and which one it contains.
// It returns errExited (wrapped) when the process exits first and
// context.DeadlineExceeded on timeout.
func (p *watched) waitLine(ctx context.Context, from int, timeout time.Duration, subs ...string) (int, string, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	exited := false
	for {
		p.mu.Lock()
		for i := from; i < len(p.lines); i++ {
			for _, s := range subs {
				if strings.Contains(p.lines[i], s) {
					p.mu.Unlock()
					return i, s, nil
				}
			}
		}
		from = len(p.lines)
		p.mu.Unlock()
		if exited {
			return 0, "", fmt.Errorf("%s %w (%v) before logging %q", p.name, errExited, p.waitErr, subs)
		}
		select {
		case <-p.changed:
		case <-p.exited:
			<-p.eof // read every line before giving up
			exited = true
		case <-timer.C:
			return 0, "", fmt.Errorf("%s did not log %q in %v: %w", p.name, subs, timeout, context.DeadlineExceeded)
		case <-ctx.Done():
			return 0, "", ctx.Err()
		}
	}
}

// line returns line i of the output.
func (p *watched) line(i int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lines[i]
}

// tail returns the last n lines of output, for error messages.
func (p *watched) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.lines[max(0, len(p.lines)-n):]
	return "\t" + strings.Join(l, "\n\t")
}

// stop sends sig and waits up to timeout for the process to exit, then
// kills it.
func (p *watched) stop(sig os.Signal, timeout time.Duration) error {
	select {
	case <-p.exited:
		return p.waitErr
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not exit %v after %v; killed", p.name, timeout, sig)
	}
}

func (p *watched) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}
