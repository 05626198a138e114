// Command spin is the workload of the overhead harness (test/overhead): a
// program that does a fixed amount of work, so that its CPU time with and
// without a profiler attached can be compared.
//
// It prints "ready PID" once started, waits for a line on stdin (so that a
// profiler can attach first), does its work and exits. By default the work
// is CPU-bound and single-threaded: -work rounds of an integer hash loop.
// The work is spread over four //go:noinline functions under a recursive
// descent, so that sampled stacks are about ten frames deep, as in real
// programs. It allocates nothing while working, so the garbage collector
// stays idle and the CPU time depends on the work alone.
//
// With -pingpong N the work is context switches instead: two goroutines,
// each locked to its own OS thread, hand a one-byte token back and forth N
// times through a pair of pipes, with blocking read(2) and write(2) on the
// raw file descriptors (not Go's poller, which would park goroutines rather
// than threads). Every hand-off wakes the other thread and blocks the
// sender in pipe_read, so a round trip is two voluntary context switches,
// one per thread, each taken at the same ten-frame stack depth. Between
// hand-offs each thread hashes a small block -hop times (-hop 0: none), to
// bring the switch rate to that of a busy server rather than of a bare pipe
// benchmark.
//
// Both threads are pinned to one CPU (the last the process may use; -pin=false
// lets them float). On one CPU every hand-off is a plain switch on that CPU,
// half of them involuntary (the woken thread preempts the writer before it
// blocks), and the run time varies by about 1% from run to run; on two CPUs
// each hand-off is a cross-CPU wake-up out of idle, three to five times
// slower on a virtual machine and varying by ±15%. Pinned, the defaults
// (-hop 360) give about 23 000 round trips and 50 000 context switches per
// second on a 2-CPU virtual machine (27 000 voluntary, 3 000 of them the Go
// runtime's sysmon thread, and 24 000 involuntary), with 85% of the CPU
// time in user space; -hop 0 gives about 150 000 round trips and 400 000
// switches per second.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// blockLen is the number of words one round hashes.
const blockLen = 256

var sink uint64

func main() {
	work := flag.Int("work", 1000000, "rounds of work; a round hashes a 2 KiB block several times (about 2 µs of CPU here)")
	depth := flag.Int("depth", 6, "recursion depth above the work functions")
	pingpong := flag.Int("pingpong", 0, "instead of -work, hand a token between two threads this many round trips (two context switches each)")
	hop := flag.Int("hop", 360, "with -pingpong, hash a 32-word block this many times before each hand-off")
	pin := flag.Bool("pin", true, "with -pingpong, run both threads on one CPU")
	flag.Parse()
	if *work < 0 || *depth < 0 || *pingpong < 0 || *hop < 0 {
		fmt.Fprintln(os.Stderr, "spin: -work, -depth, -pingpong and -hop must not be negative")
		os.Exit(2)
	}
	if *pingpong > 0 {
		runPingpong(*pingpong, *depth, *hop, *pin)
		return
	}
	// Only the main goroutine works; one P keeps the runtime from
	// spreading it anywhere else.
	runtime.GOMAXPROCS(1)

	waitGo()

	var block [blockLen]uint64
	for i := range block {
		block[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	for i := 0; i < *work; i++ {
		sink ^= descend(*depth, &block, uint64(i))
	}
	fmt.Printf("done %x\n", sink)
}

// waitGo prints the ready line and waits for the go line on stdin.
func waitGo() {
	fmt.Printf("ready %d\n", os.Getpid())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintf(os.Stderr, "spin: waiting for the go line: %v\n", err)
		os.Exit(1)
	}
}

// runPingpong is the -pingpong workload. Both threads are started, locked
// and blocked on their pipe before the ready line, so that a profiler
// attaching then finds every thread that will work.
func runPingpong(n, depth, hop int, pin bool) {
	// Each locked goroutine keeps a P of its own: a thread returning from
	// read(2) finds an idle P at once, and the runtime's scheduler stays
	// out of the hand-off (it does not take a P from a blocked syscall
	// while there are idle ones and nothing to run).
	runtime.GOMAXPROCS(3)
	var ab, ba [2]int // ab: A writes, B reads; ba: B writes, A reads
	for _, p := range []*[2]int{&ab, &ba} {
		if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
			fmt.Fprintf(os.Stderr, "spin: pipe2: %v\n", err)
			os.Exit(1)
		}
	}
	cpu := -1
	if pin {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			fmt.Fprintf(os.Stderr, "spin: sched_getaffinity: %v\n", err)
			os.Exit(1)
		}
		for c := range 8 * int(unsafe.Sizeof(set)) {
			if set.IsSet(c) {
				cpu = c
			}
		}
	}
	var ready, done sync.WaitGroup
	ready.Add(2)
	done.Add(2)
	sums := make([]uint64, 2)
	for id := range 2 {
		go func() {
			runtime.LockOSThread() // and never unlock: the thread exits with the goroutine
			defer done.Done()
			if cpu >= 0 {
				var one unix.CPUSet
				one.Set(cpu)
				if err := unix.SchedSetaffinity(0, &one); err != nil { // this thread only
					fmt.Fprintf(os.Stderr, "spin: sched_setaffinity: %v\n", err)
					os.Exit(1)
				}
			}
			in, out := ba[0], ab[1] // A
			if id == 1 {
				in, out = ab[0], ba[1] // B
			}
			ready.Done()
			sums[id] = descendPingpong(depth, in, out, n, id == 0, hop)
		}()
	}
	ready.Wait()
	waitGo()
	// A starts: it waits for one token on ba like every other round.
	writeToken(ba[1])
	done.Wait()
	fmt.Printf("done %x\n", sums[0]+sums[1])
}

// descendPingpong recurses n levels before the ping-pong loop, so that the
// stacks of the context switches are about as deep as the spin samples.
//
//go:noinline
func descendPingpong(n, in, out, trips int, first bool, hop int) uint64 {
	if n == 0 {
		return pingpongLoop(in, out, trips, first, hop)
	}
	return descendPingpong(n-1, in, out, trips, first, hop) + 1
}

// pingpongLoop does trips round trips: wait for the token on in, hash,
// pass it on out. The first thread ends after its last send, the other
// after its last receive and send, so both do trips hand-offs.
//
//go:noinline
func pingpongLoop(in, out, trips int, first bool, hop int) uint64 {
	var block [32]uint64
	for i := range block {
		block[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	var h uint64
	for i := 0; i < trips; i++ {
		readToken(in)
		for range hop {
			h = hashSmall(&block, h)
		}
		writeToken(out)
	}
	if first {
		readToken(in) // the last token back
	}
	return h
}

// hashSmall is the per-hop work: one FNV-1a-style pass over 32 words.
//
//go:noinline
func hashSmall(b *[32]uint64, h uint64) uint64 {
	h ^= 0xcbf29ce484222325
	for _, w := range b {
		h ^= w
		h *= 0x100000001b3
		h ^= h >> 29
	}
	return h
}

var tokenByte = [1]byte{'x'}

// readToken blocks in read(2) until the token is there.
//
//go:noinline
func readToken(fd int) {
	var b [1]byte
	for {
		n, err := syscall.Read(fd, b[:])
		if err == syscall.EINTR {
			continue
		}
		if n != 1 || err != nil {
			fmt.Fprintf(os.Stderr, "spin: read token: %d, %v\n", n, err)
			os.Exit(1)
		}
		return
	}
}

// writeToken passes the token on.
//
//go:noinline
func writeToken(fd int) {
	for {
		n, err := syscall.Write(fd, tokenByte[:])
		if err == syscall.EINTR {
			continue
		}
		if n != 1 || err != nil {
			fmt.Fprintf(os.Stderr, "spin: write token: %d, %v\n", n, err)
			os.Exit(1)
		}
		return
	}
}

// descend recurses n levels before doing one round, to give samples a
// realistic stack depth.
//
//go:noinline
func descend(n int, b *[blockLen]uint64, seed uint64) uint64 {
	if n == 0 {
		return round(b, seed)
	}
	return descend(n-1, b, seed+1) + 1
}

// round hashes the block, stirs it and folds it: three different leaves.
//
//go:noinline
func round(b *[blockLen]uint64, seed uint64) uint64 {
	h := hashBlock(b, seed)
	stir(b, h)
	return fold(b) ^ h
}

// hashBlock is an FNV-1a-style hash over the block's words, four passes.
//
//go:noinline
func hashBlock(b *[blockLen]uint64, seed uint64) uint64 {
	h := seed ^ 0xcbf29ce484222325
	for pass := 0; pass < 4; pass++ {
		for _, w := range b {
			h ^= w
			h *= 0x100000001b3
			h ^= h >> 29
		}
	}
	return h
}

// stir mixes h into every word with a multiply-xorshift step.
//
//go:noinline
func stir(b *[blockLen]uint64, h uint64) {
	for i := range b {
		x := b[i] ^ h
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 31
		b[i] = x
		h += 0x9e3779b97f4a7c15
	}
}

// fold reduces the block to one word.
//
//go:noinline
func fold(b *[blockLen]uint64) uint64 {
	var a, c uint64
	for i := 0; i < blockLen; i += 2 {
		a += b[i] * 0x94d049bb133111eb
		c ^= b[i+1] + (a >> 17)
	}
	return a ^ c
}
