// Command golabels is the ground-truth workload of the goroutine-label
// tests: goroutines that are not locked to threads (GOMAXPROCS=2) burn CPU
// in slices, each either labelled with a fresh random span id and trace id
// (runtime/pprof goroutine labels, as an app that copies its OTel span
// into its labels does) or unlabelled, and record when and on which
// thread each slice ran.
//
// Flags:
//
//	-goroutines N   burning goroutines (default 4)
//	-duration D     how long they burn (default 3s)
//	-out FILE       where the ground truth goes (required)
//	-span-key K     label key of the span id (default span_id)
//	-trace-key K    label key of the trace id (default trace_id)
//
// It prints "ready PID", waits for a line on stdin (so that a profiler can
// attach first), burns for -duration, writes the ground truth to -out and
// prints "done SLICES".
//
// Each goroutine loops: set labels {a: x, span: x, <span-key>: 16 hex
// digits, span_idx: x, <trace-key>: 32 hex digits, zz: x} (the decoys share
// prefixes and lengths with the real keys, to catch a sloppy key match),
// burn 1–5 ms, clear its labels, burn 1–4 ms unlabelled. Every burn is one
// slice of the ground truth; ground-truth lines are
//
//	L TID0 TID1 START END SPANHEX TRACEHEX [many] [GAPSTART-GAPEND ...]   a labelled slice
//	U TID0 TID1 START END - - [many] [GAPSTART-GAPEND ...]                an unlabelled slice
//
// where TID0 and TID1 are the thread (gettid) at the slice's start and
// end and START, END are CLOCK_MONOTONIC nanoseconds read after the labels
// were set (or cleared) and before they change again. Gaps are pauses of
// the burn loop longer than 100 µs (it reads the clock every microsecond or
// so): the thread was off the CPU, or another goroutine ran on it; "many"
// says more than 8 were seen and some are not listed. So a sample on TID0
// inside [START, END] of a slice with TID0 == TID1, outside its gaps, ran
// that slice's code with its labels.
//
// Keeping that true most of the time needs every slice to run on one
// thread without another goroutine in between: each goroutine calls
// runtime.Gosched after every slice, so none runs 10 ms without yielding
// and the runtime seldom preempts it (it still does when the machine is
// busy and a slice takes over 10 ms of wall time: the gaps show it), and
// the garbage collector is off (the few MB of labels are kept), so no
// stop-the-world or mark worker interrupts a slice. The clock is the
// runtime's own vDSO nanotime and gettid a raw system call: neither gives
// the P away. A slice whose TID0 and TID1 differ moved anyway and is to be
// left out.
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"
	_ "unsafe" // go:linkname
)

// nanotime is CLOCK_MONOTONIC, as perf and bpf_ktime_get_ns read it.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

type slice struct {
	labelled   bool
	tid0, tid1 int
	start, end int64
	span       [8]byte
	trace      [16]byte
	gaps       [8][2]int64
	ngaps      int
	gapsLost   bool
}

var sink uint64

// burn spins for about d. It reads the clock every 1024 iterations (about
// a microsecond) and calls nothing that could yield. A longer pause
// between two reads than gapMin means the thread was taken off the CPU,
// or the goroutine off the thread: it is noted in s.gaps (up to
// len(s.gaps); more set s.gapsLost).
//
//go:noinline
func burn(d int64, s *slice) {
	last := nanotime()
	end := last + d
	x := uint64(1)
	for {
		for i := 0; i < 1024; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
		now := nanotime()
		if now-last > gapMin {
			if s.ngaps < len(s.gaps) {
				s.gaps[s.ngaps] = [2]int64{last, now}
				s.ngaps++
			} else {
				s.gapsLost = true
			}
		}
		last = now
		if now >= end {
			break
		}
	}
	sink += x
}

// gapMin is the shortest pause of a burn loop taken for a gap. Pauses of
// 20–30 µs every 100 µs or so are common on a busy virtual machine (the
// vCPU is taken away); another goroutine's turn on the thread lasts far
// longer (it burns for a millisecond or more).
const gapMin = 100_000

func worker(seed uint64, until int64, spanKey, traceKey string, out *[]slice) {
	rng := rand.New(rand.NewPCG(seed, seed*7+1))
	base := context.Background()
	for nanotime() < until {
		var s slice
		s.labelled = true
		for s.span == [8]byte{} {
			for i := range s.span {
				s.span[i] = byte(rng.Uint32())
			}
		}
		for i := range s.trace {
			s.trace[i] = byte(rng.Uint32())
		}
		ctx := pprof.WithLabels(base, pprof.Labels(
			"a", "x", "span", "x", spanKey, hex.EncodeToString(s.span[:]),
			"span_idx", "x", traceKey, hex.EncodeToString(s.trace[:]), "zz", "x"))
		pprof.SetGoroutineLabels(ctx)
		s.tid0, s.start = syscall.Gettid(), nanotime()
		burn(int64(1+rng.IntN(5))*int64(time.Millisecond), &s)
		s.end, s.tid1 = nanotime(), syscall.Gettid()
		pprof.SetGoroutineLabels(base)
		*out = append(*out, s)
		runtime.Gosched()

		u := slice{tid0: syscall.Gettid(), start: nanotime()}
		burn(int64(1+rng.IntN(4))*int64(time.Millisecond), &u)
		u.end, u.tid1 = nanotime(), syscall.Gettid()
		*out = append(*out, u)
		runtime.Gosched()
	}
}

func main() {
	n := flag.Int("goroutines", 4, "burning goroutines")
	dur := flag.Duration("duration", 3*time.Second, "how long to burn")
	outPath := flag.String("out", "", "ground truth file")
	spanKey := flag.String("span-key", "span_id", "label key of the span id")
	traceKey := flag.String("trace-key", "trace_id", "label key of the trace id")
	flag.Parse()
	if *outPath == "" {
		fmt.Fprintln(os.Stderr, "golabels: -out is required")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(2)
	debug.SetGCPercent(-1)
	fmt.Printf("ready %d\n", os.Getpid())
	bufio.NewReader(os.Stdin).ReadString('\n')

	until := nanotime() + int64(*dur)
	slices := make([][]slice, *n)
	var wg sync.WaitGroup
	for i := range slices {
		slices[i] = make([]slice, 0, 2*int(*dur/time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker(uint64(i+1), until, *spanKey, *traceKey, &slices[i])
		}()
	}
	wg.Wait()

	f, err := os.Create(*outPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w := bufio.NewWriter(f)
	total := 0
	for _, ss := range slices {
		for _, s := range ss {
			if s.labelled {
				fmt.Fprintf(w, "L %d %d %d %d %x %x", s.tid0, s.tid1, s.start, s.end, s.span, s.trace)
			} else {
				fmt.Fprintf(w, "U %d %d %d %d - -", s.tid0, s.tid1, s.start, s.end)
			}
			if s.gapsLost {
				fmt.Fprint(w, " many")
			}
			for _, g := range s.gaps[:s.ngaps] {
				fmt.Fprintf(w, " %d-%d", g[0], g[1])
			}
			fmt.Fprintln(w)
			total++
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	f.Close()
	fmt.Printf("done %d\n", total)
}
