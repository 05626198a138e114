// Command burner is a test workload: two OS threads burn CPU in two known
// functions, each with its own duty cycle, until killed or -duration ends.
// It prints "ready PID TIDA TIDB" once both threads run.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
)

var sink uint64

//go:noinline
func burnAlpha(d time.Duration) {
	end := time.Now().Add(d)
	x := uint64(1)
	for time.Now().Before(end) {
		for i := 0; i < 2000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink += x
}

//go:noinline
func burnBeta(d time.Duration) {
	end := time.Now().Add(d)
	x := uint64(3)
	for time.Now().Before(end) {
		for i := 0; i < 2000; i++ {
			x = x*2862933555777941757 + 3037000493
		}
	}
	sink += x
}

// worker burns for duty×10 ms out of every 10 ms on its own OS thread.
func worker(burn func(time.Duration), duty float64, tid chan<- int, wg *sync.WaitGroup, stop <-chan struct{}) {
	defer wg.Done()
	runtime.LockOSThread()
	tid <- syscall.Gettid()
	on := time.Duration(duty * float64(10*time.Millisecond))
	for {
		select {
		case <-stop:
			return
		default:
		}
		burn(on)
		if off := 10*time.Millisecond - on; off > 0 {
			time.Sleep(off)
		}
	}
}

func main() {
	alpha := flag.Float64("alpha", 1.0, "duty cycle of the burnAlpha thread (0..1)")
	beta := flag.Float64("beta", 0.5, "duty cycle of the burnBeta thread (0..1)")
	duration := flag.Duration("duration", time.Minute, "how long to run")
	flag.Parse()

	var wg sync.WaitGroup
	stop := make(chan struct{})
	ta, tb := make(chan int, 1), make(chan int, 1)
	wg.Add(2)
	go worker(burnAlpha, *alpha, ta, &wg, stop)
	go worker(burnBeta, *beta, tb, &wg, stop)
	fmt.Printf("ready %d %d %d\n", os.Getpid(), <-ta, <-tb)
	time.Sleep(*duration)
	close(stop)
	wg.Wait()
}
