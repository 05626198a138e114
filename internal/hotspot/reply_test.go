package hotspot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/targetfile"
	"github.com/perfprof/perfprof/internal/testchild"
)

// fakeJVM serves the attach socket of the test process itself
// (/tmp/.java_pid<pid>, owned by us, served by our pid: what connect
// checks) and answers each request with reply.
func fakeJVM(t *testing.T, reply func(c net.Conn)) int {
	t.Helper()
	pid := os.Getpid()
	st, err := readStatus("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if st.nested {
		testchild.Unavailable(t, "the test process is in a pid namespace of its own")
	}
	path := fmt.Sprintf("/tmp/.java_pid%d", pid)
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		l.Close()
		<-done
	})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Read(make([]byte, 4096)) // the request
			reply(c)
			c.Close()
		}
	}()
	return pid
}

// repeat writes head, then b until the reader goes away.
func repeat(head string, b []byte) func(net.Conn) {
	return func(c net.Conn) {
		c.Write([]byte(head))
		for {
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	}
}

// A process that answers the attach protocol itself controls the reply:
// one of 1 GiB of short lines is read as a stream up to maxReply, then
// refused, within the timeout and without holding it.
func TestReplyBounds(t *testing.T) {
	header := fmt.Sprintf("\"x\" #1 prio=5 os_prio=0 tid=0x1 nid=%d runnable\n", os.Getpid())
	frame := "\tat java.lang.Thread.run(Thread.java:1583)\n"
	for _, tc := range []struct {
		name    string
		reply   func(net.Conn)
		tooLong bool
	}{
		{"short lines", repeat("0\n", bytes.Repeat([]byte(frame), (64<<10)/len(frame))), true},
		{"headers", repeat("0\n", bytes.Repeat([]byte(header), (64<<10)/len(header))), true},
		{"no status", repeat("", bytes.Repeat([]byte("x"), 64<<10)), false},
		{"garbage status", repeat("garbage\n", bytes.Repeat([]byte("x\n"), 32<<10)), false},
		{"too slow", func(c net.Conn) {
			c.Write([]byte("0\n" + header))
			for {
				time.Sleep(50 * time.Millisecond)
				if _, err := c.Write([]byte("\n")); err != nil {
					return
				}
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := fakeJVM(t, tc.reply)
			timeout := 2 * time.Second
			if tc.tooLong {
				timeout = 20 * time.Second // for -race to read 64 MiB
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			names, err := ThreadNames(ctx, pid)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%v after %v, %d MiB allocated", err, took, allocated>>20)
			if !isAttachReply(err) {
				t.Errorf("ThreadNames = %v, %v; want an attach_reply error", names, err)
			}
			if took > timeout+time.Second {
				t.Errorf("took %v, timeout %v", took, timeout)
			}
			if tc.tooLong && !errors.Is(err, errReplyTooLarge) {
				t.Errorf("%v does not say the reply was too long", err)
			}
			if tc.name == "too slow" && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v does not say the deadline passed", err)
			}
			// 64 KiB buffers, a name per header: nothing like the reply.
			if allocated > 32<<20 {
				t.Errorf("%d MiB allocated for a reply read as a stream", allocated>>20)
			}
		})
	}
}

// A reply at the bound, of a real dump, names the live threads only.
func TestFakeThreadDump(t *testing.T) {
	dump, err := os.ReadFile("testdata/threaddump-jdk25.txt")
	if err != nil {
		t.Fatal(err)
	}
	self := fmt.Sprintf("\"self\" #1 prio=5 os_prio=0 tid=0x1 nid=%d runnable\n", os.Getpid())
	pid := fakeJVM(t, func(c net.Conn) {
		c.Write([]byte("0\n"))
		c.Write(dump)
		c.Write([]byte(self))
	})
	names, err := ThreadNames(context.Background(), pid)
	if err != nil {
		t.Fatal(err)
	}
	// The dump's ids are not threads of ours: only "self" is named.
	if len(names) != 1 || names[pid] != "self" {
		t.Errorf("names %v, want only %d: self", names, pid)
	}
}

// Compiler.perfmap answers a message or nothing: a long reply is read to
// the bound and not kept.
func TestPerfMapReplyBound(t *testing.T) {
	pid := fakeJVM(t, repeat("0\n", bytes.Repeat([]byte("x\n"), 32<<10)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := PerfMap(ctx, pid)
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	if !errors.Is(err, errReplyTooLarge) || !isAttachReply(err) {
		t.Errorf("PerfMap = %v, want the reply too long", err)
	}
	if allocated > 32<<20 {
		t.Errorf("%d MiB allocated for a reply that is not kept", allocated>>20)
	}
}

// The memory map and status of a process are read with a bound.
func TestProcBounds(t *testing.T) {
	big := filepath.Join(t.TempDir(), "status")
	body := "Name:\tx\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nNSpid:\t7\nSigCgt:\t4\n"
	if err := os.WriteFile(big, []byte(body+strings.Repeat("x", maxStatus)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readStatus(big); !errors.Is(err, targetfile.ErrTooLarge) {
		t.Errorf("status of %d bytes: %v, want ErrTooLarge", maxStatus+len(body), err)
	}
	testchild.BloatMaps(t, targetfile.MaxMapsBytes)
	_, err := IsJVM(os.Getpid())
	if k, ok := limits.KindOf(err); !ok || k != limits.FileTooLarge {
		t.Errorf("IsJVM with maps over %d bytes: %v, want a file_too_large error", targetfile.MaxMapsBytes, err)
	}
}
