// Command goalloc is the Go workload of the unwinding tests: goroutines
// that are not locked to threads (GOMAXPROCS=2) build, sort and drop
// slices and maps under a few levels of their own calls, so that the
// garbage collector runs all the time: its workers and the allocating
// goroutines' assists run on the system stack (runtime.systemstack), whose
// frames a stack walk must link back to the goroutine's.
//
// It prints "ready PID" and works until killed.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sort"
)

var sink int

//go:noinline
func level3(i int) int {
	m := make(map[int][]byte, 64)
	for k := 0; k < 64; k++ {
		m[k] = make([]byte, 256+k)
	}
	v := make([]int, 0, 512)
	for k := 0; k < 512; k++ {
		v = append(v, (k*7919+i)%1000)
	}
	sort.Ints(v)
	return v[3] + len(m)
}

//go:noinline
func level2(i int) int { s := level3(i); sink += s; return s ^ 3 }

//go:noinline
func level1(i int) int { s := level2(i); sink ^= s; return s + 1 }

func worker() {
	for i := 0; ; i++ {
		sink += level1(i)
	}
}

func main() {
	runtime.GOMAXPROCS(2)
	for g := 0; g < 3; g++ {
		go worker()
	}
	fmt.Printf("ready %d\n", os.Getpid())
	worker()
}
