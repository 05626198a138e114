// Command perfprof-demo is the workload `make run` profiles: a small
// service whose goroutines burn CPU in functions with telling names, so
// that a profile of it reads like one of a real program.
//
//	parseRequests   tokenizes synthetic request lines         (~40% of CPU)
//	checksumBlocks  runs CRC-32 and FNV-1a over data blocks   (~35%)
//	sortBatches     sorts batches of records                  (~25%)
//
// It runs until SIGINT or SIGTERM, or for -duration.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"
)

var sink int

//go:noinline
func tokenize(line []byte) int {
	return len(bytes.Fields(line))
}

//go:noinline
func parseRequests(lines [][]byte) {
	for _, l := range lines {
		sink += tokenize(l)
	}
}

//go:noinline
func crcBlock(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

//go:noinline
func fnvBlock(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

//go:noinline
func checksumBlocks(blocks [][]byte) {
	for _, b := range blocks {
		sink += int(crcBlock(b)) + int(fnvBlock(b))
	}
}

type record struct {
	key   uint64
	value string
}

//go:noinline
func sortBatches(rng *rand.Rand, n int) {
	batch := make([]record, n)
	for i := range batch {
		batch[i] = record{key: rng.Uint64(), value: "v"}
	}
	sort.Slice(batch, func(i, j int) bool { return batch[i].key < batch[j].key })
	sink += int(batch[0].key & 1)
}

// loop runs work for share×10 ms of every 10 ms.
func loop(share float64, work func()) {
	on := time.Duration(share * float64(10*time.Millisecond))
	for {
		start := time.Now()
		for time.Since(start) < on {
			work()
		}
		time.Sleep(10*time.Millisecond - on)
	}
}

func main() {
	duration := flag.Duration("duration", 0, "stop after this long (0: run until interrupted)")
	flag.Parse()

	rng := rand.New(rand.NewSource(1))
	lines := make([][]byte, 256)
	for i := range lines {
		lines[i] = []byte(fmt.Sprintf("GET /api/v1/items/%d?limit=%d HTTP/1.1 host=example user-agent=demo", rng.Intn(1e6), rng.Intn(100)))
	}
	blocks := make([][]byte, 16)
	for i := range blocks {
		blocks[i] = make([]byte, 16<<10)
		rng.Read(blocks[i])
	}

	go loop(0.40, func() { parseRequests(lines) })
	go loop(0.35, func() { checksumBlocks(blocks) })
	sortRng := rand.New(rand.NewSource(2))
	go loop(0.25, func() { sortBatches(sortRng, 2048) })
	fmt.Fprintf(os.Stderr, "perfprof-demo: pid %d burning CPU in parseRequests, checksumBlocks, sortBatches\n", os.Getpid())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	var timeout <-chan time.Time
	if *duration > 0 {
		timeout = time.After(*duration)
	}
	select {
	case <-sig:
	case <-timeout:
	}
}
