package unwind_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/symbolize"
	"github.com/perfprof/perfprof/internal/testchild"
	"github.com/perfprof/perfprof/internal/unwind"
)

// leafC is a C child whose hot function, leaf, pushes no frame: the
// frame-pointer walk from it skips mid, its caller.
const leafC = `#include <stdio.h>
volatile unsigned long sink;
__attribute__((noinline)) unsigned long leaf(unsigned long x) {
	for (unsigned long i = 0; i < 2000000; i++) {
		x = x * 6364136223846793005UL + 1442695040888963407UL;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}
__attribute__((noinline)) unsigned long mid(unsigned long n) {
	unsigned long s = leaf(n);
	sink += s;
	return s + 1;
}
int main(void) {
	printf("ready\n");
	fflush(stdout);
	for (;;) sink += mid(sink);
}
`

func buildLeafC(t *testing.T) string {
	testchild.LookTool(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "leaf.c")
	bin := filepath.Join(dir, "leafc")
	if err := os.WriteFile(src, []byte(leafC), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("gcc", "-O2", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer", "-o", bin, src).CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	testchild.LookTool(t, "objdump")
	dis, err := exec.Command("objdump", "-d", "--no-show-raw-insn", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	body := disasmOf(string(dis), "leaf")
	if body == "" || strings.Contains(body, "push") || strings.Contains(body, "call") {
		t.Fatalf("leaf is not a frameless leaf:\n%s", body)
	}
	if mid := disasmOf(string(dis), "mid"); !strings.Contains(mid, "push   %rbp") {
		t.Fatalf("mid has no frame:\n%s", mid)
	}

	return bin
}

// disasmOf returns the objdump -d lines of function fn.
func disasmOf(dis, fn string) string {
	i := strings.Index(dis, "<"+fn+">:\n")
	if i < 0 {
		return ""
	}
	body := dis[i:]
	if j := strings.Index(body, "\n\n"); j >= 0 {
		body = body[:j]
	}
	return body
}

// callerShare samples pid at 999 Hz for d and returns, of the cpu-clock
// samples whose leaf is in leafFn, how many have callerFn as the next frame,
// with the leaf caller recovered (stackUser > 0) or not.
// symbolizer returns the process pid with its unwind tables, and a
// function naming the outermost function at a pc ("" when unknown).
func symbolizer(t *testing.T, pid int) (*symbolize.Process, func(pc uint64) string) {
	t.Helper()
	cache := symbolize.NewCache(symbolize.Options{UnwindTables: true})
	t.Cleanup(func() { cache.Close() })
	proc, err := cache.Process(pid)
	if err != nil {
		t.Fatal(err)
	}
	return proc, func(pc uint64) string {
		loc := proc.Lookup(pc)
		if len(loc.Frames) == 0 {
			return ""
		}
		return loc.Frames[len(loc.Frames)-1].Function
	}
}

// callerShare samples pid until want samples are in leafFn, and returns
// how many there are and how many of them name callerFn as the caller.
func callerShare(t *testing.T, pid int, stackUser uint32, leafFn, callerFn string, want int) (inLeaf, withCaller int) {
	s, err := perf.Open(perf.Options{Frequency: 999, StackUser: stackUser})
	testchild.RequirePerf(t, err)
	defer s.Close()
	proc, fn := symbolizer(t, pid)
	if err := s.Attach(pid); err != nil {
		testchild.RequirePerf(t, err)
	}
	var buf []uint64
	var leafN atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- s.Read(func(r *perf.Record) {
			if r.Type != perf.RecordSample || r.Sample.Kind != perf.EventCPUClock {
				return
			}
			chain := r.Sample.Callchain
			if stackUser > 0 {
				chain = unwind.InsertLeafCaller(buf, chain, r.Sample.StackUser, func(pc uint64) bool {
					if ip, ok := r.Sample.UserIP(); !ok || ip != pc {
						return false
					}
					yes, _ := proc.ReturnAddressAtSP(pc)
					return yes
				})
				if len(chain) > len(r.Sample.Callchain) {
					buf = chain[:0]
				}
			}
			var addrs []uint64
			perf.Frames(chain, func(a uint64, kernel bool) {
				if !kernel {
					addrs = append(addrs, a)
				}
			})
			if len(addrs) < 2 || fn(addrs[0]) != leafFn {
				return
			}
			inLeaf++
			leafN.Add(1)
			if fn(addrs[1]-1) == callerFn {
				withCaller++
			}
		})
	}()
	testchild.WaitFor(t, 60*time.Second, fmt.Sprintf("%d samples in %s", want, leafFn), func() bool { return leafN.Load() >= int64(want) })
	s.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return inLeaf, withCaller
}

func TestLeafCallerRecoveredC(t *testing.T) {
	bin := buildLeafC(t)
	child := testchild.Start(t, bin)
	for _, stack := range []uint32{512, 0} {
		in, with := callerShare(t, child.Pid, stack, "leaf", "mid", 600)
		share := float64(with) / float64(max(in, 1))
		t.Logf("stack_user %d: %d samples in leaf, %d (%.1f%%) with mid as caller", stack, in, with, 100*share)
		if in < 500 {
			t.Fatalf("only %d samples in leaf", in)
		}
		if stack > 0 && share < 0.95 {
			t.Errorf("with recovery, %.1f%% of leaf samples have mid as caller, want ≥ 95%%", 100*share)
		}
		if stack == 0 && share > 0.05 {
			t.Errorf("without recovery, %.1f%% of leaf samples have mid as caller, want ~0%%", 100*share)
		}
	}
}

func TestLeafCallerRecoveredGo(t *testing.T) {
	child := testchild.Start(t, testchild.Build(t, "leafgo"))
	for _, stack := range []uint32{512, 0} {
		in, with := callerShare(t, child.Pid, stack, "main.leaf", "main.mid", 600)
		share := float64(with) / float64(max(in, 1))
		t.Logf("stack_user %d: %d samples in main.leaf, %d (%.1f%%) with main.mid as caller", stack, in, with, 100*share)
		if in < 500 {
			t.Fatalf("only %d samples in main.leaf", in)
		}
		if stack > 0 && share < 0.95 {
			t.Errorf("with recovery, %.1f%% of leaf samples have main.mid as caller, want ≥ 95%%", 100*share)
		}
		if stack == 0 && share > 0.05 {
			t.Errorf("without recovery, %.1f%% of leaf samples have main.mid as caller, want ~0%%", 100*share)
		}
	}
}
