package measure

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a started helper process (the collector, perf) whose combined
// output is kept line by line, so that a measuring tool can wait for a line and
// show the output when something goes wrong.
type Process struct {
	Name string
	Cmd  *exec.Cmd

	mu      sync.Mutex
	lines   []string
	changed chan struct{} // a line came (capacity 1)
	eof     chan struct{} // output ended
	exited  chan struct{} // closed after Cmd.Wait returned
	waitErr error
}

// ErrExited is wrapped by WaitLine's error when the process exits before
// logging the line.
var ErrExited = errors.New("exited")

// Start starts cmd with stdout and stderr captured; the process is killed
// if the tool dies (Pdeathsig).
func Start(name string, cmd *exec.Cmd) (*Process, error) {
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
	p := &Process{Name: name, Cmd: cmd, changed: make(chan struct{}, 1), eof: make(chan struct{}), exited: make(chan struct{})}
	go p.scan(r)
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *Process) scan(r io.ReadCloser) {
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

// Pid is the process id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Exited is closed once the process has exited; Err then says how.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// OutputDone is closed once the output has been read to its end.
func (p *Process) OutputDone() <-chan struct{} { return p.eof }

// Err is Cmd.Wait's error, once Exited is closed.
func (p *Process) Err() error {
	select {
	case <-p.exited:
		return p.waitErr
	default:
		return nil
	}
}

// WaitLine waits up to timeout for a line at index from or later that
// contains one of subs, and returns its index and which one it contains.
// It returns ErrExited (wrapped) when the process exits first and
// context.DeadlineExceeded on timeout.
func (p *Process) WaitLine(ctx context.Context, from int, timeout time.Duration, subs ...string) (int, string, error) {
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
			return 0, "", fmt.Errorf("%s %w (%v) before logging %q", p.Name, ErrExited, p.waitErr, subs)
		}
		select {
		case <-p.changed:
		case <-p.exited:
			<-p.eof // read every line before giving up
			exited = true
		case <-timer.C:
			return 0, "", fmt.Errorf("%s did not log %q in %v: %w", p.Name, subs, timeout, context.DeadlineExceeded)
		case <-ctx.Done():
			return 0, "", ctx.Err()
		}
	}
}

// Lines is the number of lines of output so far.
func (p *Process) Lines() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

// Line returns line i of the output.
func (p *Process) Line(i int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lines[i]
}

// Tail returns the last n lines of output, indented, for error messages.
func (p *Process) Tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.lines[max(0, len(p.lines)-n):]
	return "\t" + strings.Join(l, "\n\t")
}

// Stop sends sig and waits up to timeout for the process to exit, then
// kills it.
func (p *Process) Stop(sig os.Signal, timeout time.Duration) error {
	select {
	case <-p.exited:
		return p.waitErr
	default:
	}
	_ = p.Cmd.Process.Signal(sig)
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(timeout):
		_ = p.Cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not exit %v after %v; killed", p.Name, timeout, sig)
	}
}

// Kill kills the process if it still runs and waits for it.
func (p *Process) Kill() {
	select {
	case <-p.exited:
	default:
		_ = p.Cmd.Process.Kill()
		<-p.exited
	}
}
