package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is a started spin process, waiting for its go line.
type child struct {
	cmd   *exec.Cmd
	pid   int
	stdin io.WriteCloser
	lines chan string // its stdout, closed at EOF
	start time.Time   // when the go line was sent
}

// childArgs are the spin child's arguments for h.child and h.work.
func (h *harness) childArgs() []string {
	if h.child == childNoFP {
		// One thread, as spin: the other CPU is the profiler's.
		return []string{strconv.Itoa(h.work), "1"}
	}
	if h.child == childPingpong {
		args := []string{"-pingpong", strconv.Itoa(h.work)}
		if h.hop >= 0 {
			args = append(args, "-hop", strconv.Itoa(h.hop))
		}
		return args
	}
	return []string{"-work", strconv.Itoa(h.work)}
}

// startChild starts the spin child and waits for its "ready PID" line, so
// that the Go runtime has started all its threads (and the pingpong child
// its two) before a profiler attaches.
func startChild(ctx context.Context, bin string, args []string) (*child, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the spin child: %w", err)
	}
	c := &child{cmd: cmd, pid: cmd.Process.Pid, stdin: stdin, lines: make(chan string, 4)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	select {
	case line, ok := <-c.lines:
		if f := strings.Fields(line); !ok || len(f) != 2 || f[0] != "ready" || f[1] != strconv.Itoa(c.pid) {
			c.kill()
			return nil, fmt.Errorf("spin child: want \"ready %d\", got %q", c.pid, line)
		}
	case <-time.After(10 * time.Second):
		c.kill()
		return nil, fmt.Errorf("spin child did not get ready in 10 s")
	}
	return c, nil
}

// run lets the child work, waits for it to exit and fills in its CPU time
// (user+system) and context switches from its rusage, and its wall time.
// The CPU sum is exact (the kernel scales its tick-sampled user/system
// split to the precise runtime); the split is not, so it is not reported.
func (c *child) run(res *result) error {
	c.start = time.Now()
	if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
		return fmt.Errorf("send the go line: %w", err)
	}
	c.stdin.Close()
	var out []string
	for line := range c.lines {
		out = append(out, line)
	}
	if err := c.cmd.Wait(); err != nil {
		return fmt.Errorf("spin child: %w (output %q)", err, out)
	}
	res.childWall = time.Since(c.start)
	if len(out) != 1 || !strings.HasPrefix(out[0], "done ") {
		return fmt.Errorf("spin child: want a done line, got %q", out)
	}
	ru, ok := c.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return fmt.Errorf("spin child: no rusage")
	}
	res.childCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	res.switches = uint64(ru.Nvcsw + ru.Nivcsw)
	return nil
}

// kill ends the child if it still runs (on an error path).
func (c *child) kill() {
	if c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	}
}
