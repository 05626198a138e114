package perf_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/symbolize"
	"github.com/perfprof/perfprof/internal/testchild"
)

// noFPC is a C program built at -O2 without frame pointers, as gcc builds
// C by default on x86-64: two threads calling, through three levels of its
// own functions, into Debian's libz (crc32, compress2) and libc (memset,
// qsort), whose Debian builds have no frame pointers either. Each level
// works after its call, so that no call is a tail call and the true path
// is main or start_thread → worker → level1 → level2 → level3 → library.
// Its buffers are thread-local, not on the stack: a 36 KiB frame would
// not fit the 16 KiB stack copy (UnwindStackCopy).
const noFPC = `#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
static unsigned char src[1 << 14];
volatile unsigned long sink;
static int cmp(const void *a, const void *b) { return *(const unsigned char *)a - *(const unsigned char *)b; }
static __thread unsigned char dst[1 << 15], tmp[1 << 12];
__attribute__((noinline)) unsigned long level3(int i) {
	uLongf n = sizeof dst;
	switch (i % 3) {
	case 0: compress2(dst, &n, src, sizeof src, 1); return n;
	case 1: memset(tmp, i, sizeof tmp); qsort(tmp, sizeof tmp, 1, cmp); return tmp[7];
	default: return crc32(0, src, sizeof src);
	}
}
__attribute__((noinline)) unsigned long level2(int i) { unsigned long s = level3(i); sink += s; return s ^ 3; }
__attribute__((noinline)) unsigned long level1(int i) { unsigned long s = level2(i); sink ^= s; return s + 1; }
static void *worker(void *arg) { for (int i = 0;; i++) sink += level1(i); return arg; }
int main(void) {
	for (unsigned i = 0; i < sizeof src; i++) src[i] = rand();
	pthread_t t;
	pthread_create(&t, 0, worker, 0);
	printf("ready %d\n", getpid());
	fflush(stdout);
	worker(0);
}
`

// noFPCXX is the C++ target: the same shape, with inlined std::sort of
// strings and an exception thrown and caught every seventh call, at -O2
// (g++ omits frame pointers there too), its thread a std::thread.
const noFPCXX = `#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <unistd.h>
volatile unsigned long sink;
__attribute__((noinline)) void thrower(int i) {
	if (i % 7 == 0) throw std::runtime_error("seventh");
	sink += i;
}
__attribute__((noinline)) unsigned long level3(int i) {
	std::vector<std::string> v;
	for (int k = 0; k < 200; k++) v.push_back(std::to_string((k * 7919 + i) % 1000));
	std::sort(v.begin(), v.end());
	try { thrower(i); } catch (const std::exception &e) { sink += e.what()[0]; }
	return v[3].size();
}
__attribute__((noinline)) unsigned long level2(int i) { unsigned long s = level3(i); sink += s; return s ^ 3; }
__attribute__((noinline)) unsigned long level1(int i) { unsigned long s = level2(i); sink ^= s; return s + 1; }
__attribute__((noinline)) static void worker() { for (int i = 0;; i++) sink += level1(i); }
int main() {
	std::thread t(worker);
	printf("ready %d\n", getpid());
	fflush(stdout);
	worker();
}
`

// noFPRust is the Rust target, built as the release profile builds (opt
// level 3, no frame pointers), its thread a std::thread.
const noFPRust = `use std::hint::black_box;
#[inline(never)]
fn level3(i: u64) -> u64 {
    let mut v: Vec<u64> = (0..2000u64).map(|k| (k * 7919 + i) % 1000).collect();
    v.sort_unstable();
    black_box(v.iter().map(|x| x.wrapping_mul(31)).sum::<u64>())
}
#[inline(never)]
fn level2(i: u64) -> u64 { let s = level3(i); black_box(s ^ 3) }
#[inline(never)]
fn level1(i: u64) -> u64 { let s = level2(i); black_box(s + 1) }
#[inline(never)]
fn worker() { let mut i = 0u64; loop { black_box(level1(i)); i += 1; } }
fn main() {
    std::thread::spawn(worker);
    println!("ready {}", std::process::id());
    worker();
}
`

// noFPSignalC is the C target with a profiling timer: every millisecond of
// CPU a SIGPROF handler burns in inHandler, on the thread's stack, so that
// samples there unwind through the kernel's signal frame (libc's
// __restore_rt) into whatever the signal interrupted.
const noFPSignalC = `#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
volatile unsigned long sink;
__attribute__((noinline)) void inHandler(void) {
	for (int i = 0; i < 1000000; i++) sink = sink * 31 + i;
}
static void handler(int sig) { inHandler(); sink += sig; }
__attribute__((noinline)) unsigned long level3(int i) {
	unsigned long x = i;
	for (int k = 0; k < 100000; k++) x = x * 6364136223846793005UL + k;
	return x;
}
__attribute__((noinline)) unsigned long level2(int i) { unsigned long s = level3(i); sink += s; return s ^ 3; }
__attribute__((noinline)) unsigned long level1(int i) { unsigned long s = level2(i); sink ^= s; return s + 1; }
static void *worker(void *arg) { for (int i = 0;; i++) sink += level1(i); return arg; }
int main(void) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGPROF, &sa, 0);
	struct itimerval it = {{0, 1000}, {0, 1000}};
	setitimer(ITIMER_PROF, &it, 0);
	pthread_t t;
	pthread_create(&t, 0, worker, 0);
	printf("ready %d\n", getpid());
	fflush(stdout);
	worker(0);
}
`

// noFPVDSOC is the C target that spends its time in the vDSO: clock_gettime
// in a loop, the vDSO's frames unwound by its own .eh_frame (read from the
// process's memory).
const noFPVDSOC = `#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
volatile unsigned long sink;
__attribute__((noinline)) unsigned long level3(int i) {
	struct timespec ts;
	for (int k = 0; k < 1000; k++) { clock_gettime(CLOCK_MONOTONIC, &ts); sink += ts.tv_nsec; }
	return sink + i;
}
__attribute__((noinline)) unsigned long level2(int i) { unsigned long s = level3(i); sink += s; return s ^ 3; }
__attribute__((noinline)) unsigned long level1(int i) { unsigned long s = level2(i); sink ^= s; return s + 1; }
static void *worker(void *arg) { for (int i = 0;; i++) sink += level1(i); return arg; }
int main(void) {
	pthread_t t;
	pthread_create(&t, 0, worker, 0);
	printf("ready %d\n", getpid());
	fflush(stdout);
	worker(0);
}
`

// TestDWARFUnwind: samples of programs built without frame pointers (C at
// -O2 calling into Debian's libz and libc, C++ with inlining and
// exceptions, Rust's release profile), two threads each, unwound from
// their 16 KiB stack copies by the binaries' compiled .eh_frame, reach the
// thread's root (main through _start, start_thread through clone3) in
// ≥ 99% of cases, along the true path (level3, level2, level1, worker);
// the kernel's frame-pointer callchains of the same samples mostly do not.
func TestDWARFUnwind(t *testing.T) {
	for _, c := range []struct {
		name, src, tool string
		args            []string
		path            []string // the true path, from the innermost function checked out
	}{
		{"c", noFPC, "gcc", []string{"-x", "c", "-O2", "-fomit-frame-pointer", "-pthread", "-o", "BIN", "SRC", "-lz"}, nil},
		{"cxx", noFPCXX, "g++", []string{"-x", "c++", "-O2", "-pthread", "-o", "BIN", "SRC"}, nil},
		{"rust", noFPRust, "rustc", []string{"-C", "opt-level=3", "-o", "BIN", "SRC"}, nil},
		// Through the signal frame: the handler, libc's trampoline, the
		// interrupted level3 and its callers.
		{"c_signal", noFPSignalC, "gcc", []string{"-x", "c", "-O2", "-fomit-frame-pointer", "-pthread", "-o", "BIN", "SRC"},
			[]string{"inHandler", "handler", "*", "level3", "level2", "level1", "worker"}},
		// Out of the vDSO: clock_gettime's frames there, then level3.
		{"c_vdso", noFPVDSOC, "gcc", []string{"-x", "c", "-O2", "-fomit-frame-pointer", "-pthread", "-o", "BIN", "SRC"},
			[]string{"__vdso_clock_gettime", "*", "level3", "level2", "level1", "worker"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath(c.tool); err != nil {
				t.Skipf("no %s", c.tool)
			}
			if c.name == "c" {
				if _, err := os.Stat("/usr/include/zlib.h"); err != nil {
					t.Skip("no zlib.h (zlib1g-dev)")
				}
			}
			dir := t.TempDir()
			src, bin := filepath.Join(dir, "nofp."+c.name), filepath.Join(dir, "nofp")
			if c.name == "rust" {
				src = filepath.Join(dir, "nofp.rs")
			}
			if err := os.WriteFile(src, []byte(c.src), 0o644); err != nil {
				t.Fatal(err)
			}
			args := slices.Clone(c.args)
			for i, a := range args {
				args[i] = strings.NewReplacer("BIN", bin, "SRC", src).Replace(a)
			}
			if out, err := exec.Command(c.tool, args...).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", c.tool, err, out)
			}
			path := c.path
			if path == nil {
				path = []string{"level3", "level2", "level1", "worker"}
			}
			testDWARFUnwind(t, bin, path)
		})
	}
}

// testDWARFUnwind samples bin and checks the unwound stacks: ≥ 99% reach
// the thread's root, and ≥ 99% of those holding path[0] hold path from
// there ("*" matches any one frame), which at least a fifth of all do.
func testDWARFUnwind(t *testing.T, bin string, path []string) {
	child := testchild.Start(t, bin)
	s, err := perf.Open(perf.Options{Frequency: 999, StackUser: 16 << 10})
	testchild.RequirePerf(t, err)
	defer s.Close()
	proc, outer := symbolizer(t, child.Pid)
	// The function's name without its C++ parameters or Rust path.
	name := func(pc uint64) string {
		fn := outer(pc)
		if fn == "" {
			return "?"
		}
		if i := strings.IndexByte(fn, '('); i > 0 {
			fn = fn[:i]
		}
		if i := strings.LastIndex(fn, "::"); i >= 0 && strings.HasPrefix(fn, "nofp::") {
			fn = fn[i+2:]
		}
		return fn
	}
	if err := s.Attach(child.Pid); err != nil {
		testchild.RequirePerf(t, err)
	}
	// The samples are kept, and unwound after the reading: the
	// unwinding and naming here (slow under the race detector) must not
	// hold up the rings.
	type sample struct {
		regs  symbolize.Regs
		stack []byte
		fp    []uint64 // the kernel's frame-pointer chain, user frames
	}
	var samples []sample
	done := make(chan error, 1)
	go func() {
		done <- s.Read(func(r *perf.Record) {
			smp := &r.Sample
			if r.Type != perf.RecordSample || smp.Kind != perf.EventCPUClock || int(smp.Pid) != child.Pid {
				return
			}
			ip, ok1 := smp.UserIP()
			sp, ok2 := smp.UserSP()
			bp, _ := smp.UserBP()
			if !ok1 || !ok2 {
				return
			}
			k := sample{regs: symbolize.Regs{IP: ip, SP: sp, BP: bp}, stack: slices.Clone(smp.StackUser)}
			perf.Frames(smp.Callchain, func(a uint64, kernel bool) {
				if !kernel {
					k.fp = append(k.fp, a)
				}
			})
			samples = append(samples, k)
		})
	}()
	time.Sleep(2 * time.Second)
	s.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	type result struct {
		fns  []string // leaf first
		stop symbolize.UnwindStop
		fp   []string
	}
	var results []result
	out := make([]uint64, 0, 128)
	for _, k := range samples {
		chain, stop := proc.Unwind(k.regs, &symbolize.StackCopy{SP: k.regs.SP, Data: k.stack}, out[:0])
		res := result{fns: []string{name(k.regs.IP)}, stop: stop}
		for _, ra := range chain {
			res.fns = append(res.fns, name(ra-1))
		}
		for _, a := range k.fp {
			res.fp = append(res.fp, name(a))
		}
		results = append(results, res)
	}

	rooted := func(fns []string) bool {
		return slices.Contains(fns, "main") && slices.Contains(fns, "_start") ||
			slices.Contains(fns, "start_thread") && (slices.Contains(fns, "clone3") || slices.Contains(fns, "__clone3"))
	}
	onPath := func(fns []string) bool {
		if len(fns) < len(path) {
			return false
		}
		for i, want := range path {
			if want != "*" && fns[i] != want {
				return false
			}
		}
		return true
	}
	var root, fpRoot, inLevels, truePath int
	stops := map[symbolize.UnwindStop]int{}
	var bad []result
	for _, r := range results {
		stops[r.stop]++
		if rooted(r.fns) && r.stop == symbolize.UnwindEnd {
			root++
		} else if len(bad) < 5 {
			bad = append(bad, r)
		}
		if rooted(r.fp) {
			fpRoot++
		}
		i := slices.Index(r.fns, path[0])
		if i < 0 {
			continue
		}
		inLevels++
		if onPath(r.fns[i:]) {
			truePath++
		}
	}
	n := len(results)
	t.Logf("%d samples: %d (%.2f%%) unwound to the thread's root (frame pointers: %d, %.2f%%); stops %v; %d in %s, %d (%.2f%%) of them on the true path %v",
		n, root, pct(root, n), fpRoot, pct(fpRoot, n), stops, inLevels, path[0], truePath, pct(truePath, inLevels), path)
	for _, r := range bad {
		t.Logf("not rooted (%v): %v", r.stop, r.fns)
	}
	if n < 1000 {
		t.Fatalf("only %d samples", n)
	}
	if root < n*99/100 {
		t.Errorf("%d of %d samples unwound to the root, want ≥ 99%%", root, n)
	}
	if inLevels < n/5 || truePath < inLevels*99/100 {
		t.Errorf("%d samples in %s, %d on the true path: want ≥ a fifth of the samples there, ≥ 99%% of them on it", inLevels, path[0], truePath)
	}
}

func pct(a, b int) float64 { return 100 * float64(a) / float64(max(b, 1)) }
