// Command spin is the workload of the overhead harness (test/overhead): a
// single-threaded, CPU-bound program that does a fixed amount of work, so
// that its CPU time with and without a profiler attached can be compared.
//
// It prints "ready PID" once started, waits for a line on stdin (so that a
// profiler can attach first), runs -work rounds of an integer hash loop and
// exits. The work is spread over four //go:noinline functions under a
// recursive descent, so that sampled stacks are about ten frames deep, as in
// real programs. It allocates nothing while working, so the garbage
// collector stays idle and the CPU time depends on the work alone.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
)

// blockLen is the number of words one round hashes.
const blockLen = 256

var sink uint64

func main() {
	work := flag.Int("work", 1000000, "rounds of work; a round hashes a 2 KiB block several times (about 2 µs of CPU here)")
	depth := flag.Int("depth", 6, "recursion depth above the work functions")
	flag.Parse()
	if *work < 0 || *depth < 0 {
		fmt.Fprintln(os.Stderr, "spin: -work and -depth must not be negative")
		os.Exit(2)
	}
	// Only the main goroutine works; one P keeps the runtime from
	// spreading it anywhere else.
	runtime.GOMAXPROCS(1)

	fmt.Printf("ready %d\n", os.Getpid())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintf(os.Stderr, "spin: waiting for the go line: %v\n", err)
		os.Exit(1)
	}

	var block [blockLen]uint64
	for i := range block {
		block[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	for i := 0; i < *work; i++ {
		sink ^= descend(*depth, &block, uint64(i))
	}
	fmt.Printf("done %x\n", sink)
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
