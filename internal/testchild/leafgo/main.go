// Command leafgo burns CPU in a frameless Go leaf (main.leaf) called from
// main.mid, for the leaf-caller recovery test of internal/perf.
package main

import "fmt"

var sink uint64

// leaf has no locals and calls nothing: the compiler gives it no frame.
//
//go:noinline
func leaf(x uint64) uint64 {
	for i := 0; i < 2000000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

//go:noinline
func mid(n uint64) uint64 {
	s := leaf(n)
	sink += s
	return s + 1
}

func main() {
	fmt.Println("ready")
	for {
		sink += mid(sink)
	}
}
