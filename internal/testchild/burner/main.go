// Command burner is a test workload: two OS threads burn CPU in two known
// functions, each with its own duty cycle, until killed or -duration ends.
// It prints "ready PID TIDA TIDB" once both threads run.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
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

// sleepGamma blocks its thread in nanosleep(2) directly, not through the Go
// scheduler, so that the thread's stack at switch-out holds this function.
//
//go:noinline
func sleepGamma(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}

//go:noinline
func burnHog(d time.Duration) { burnAlpha(d) }

// pinTo keeps the calling thread on one CPU.
func pinTo(cpu int) {
	if cpu < 0 {
		return
	}
	var set [16]uint64
	set[cpu/64] |= 1 << (cpu % 64)
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, uintptr(len(set)*8), uintptr(unsafe.Pointer(&set[0]))); e != 0 {
		panic(e)
	}
}

var pinCPU = -1

// worker burns for duty×10 ms out of every 10 ms on its own OS thread.
func worker(burn func(time.Duration), duty float64, tid chan<- int, wg *sync.WaitGroup, stop <-chan struct{}) {
	defer wg.Done()
	runtime.LockOSThread()
	pinTo(pinCPU)
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

// readZero spends its time in the kernel, copying zeroes to user space.
//
//go:noinline
func readZero(d time.Duration) {
	f, err := os.Open("/dev/zero")
	if err != nil {
		panic(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<16)
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if _, err := f.Read(buf); err != nil {
			panic(err)
		}
	}
}

// mapExec maps a file executable, as a dynamic loader or JIT does, so that
// the kernel reports a new MMAP2 record with the file's build id.
func mapExec(path string) {
	f, err := os.Open(path)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_EXEC, syscall.MAP_PRIVATE); err != nil {
		panic(err)
	}
}

func main() {
	alpha := flag.Float64("alpha", 1.0, "duty cycle of the burnAlpha thread (0..1)")
	beta := flag.Float64("beta", 0.5, "duty cycle of the burnBeta thread (0..1)")
	duration := flag.Duration("duration", time.Minute, "how long to run")
	kernel := flag.Bool("kernel", false, "the alpha thread reads /dev/zero instead (kernel time)")
	spawn := flag.Int("spawn", 0, "on a line on stdin, start this many more burnBeta threads and print \"spawned TID...\"")
	mmapPath := flag.String("mmap", "", "on a line on stdin, map this file executable and print \"mapped\"")
	burnSleep := flag.String("burnsleep", "", "B,S: the alpha thread burns B in burnAlpha, then sleeps S in sleepGamma (nanosleep), in a loop")
	hogs := flag.Int("hogs", 0, "extra threads burning all the time in burnHog")
	flag.IntVar(&pinCPU, "pin", -1, "keep every worker thread on this CPU")
	flag.Parse()

	var wg sync.WaitGroup
	stop := make(chan struct{})
	ta, tb := make(chan int, 1), make(chan int, 1)
	first := burnAlpha
	if *kernel {
		first = readZero
	}
	if *burnSleep != "" {
		b, sl, ok := strings.Cut(*burnSleep, ",")
		bd, err1 := time.ParseDuration(b)
		sd, err2 := time.ParseDuration(sl)
		if !ok || err1 != nil || err2 != nil {
			panic("bad -burnsleep " + *burnSleep)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			pinTo(pinCPU)
			ta <- syscall.Gettid()
			for {
				select {
				case <-stop:
					return
				default:
				}
				burnAlpha(bd)
				sleepGamma(sd)
			}
		}()
	} else {
		wg.Add(1)
		go worker(first, *alpha, ta, &wg, stop)
	}
	for i := 0; i < *hogs; i++ {
		wg.Add(1)
		go worker(burnHog, 1, make(chan int, 1), &wg, stop)
	}
	wg.Add(1)
	go worker(burnBeta, *beta, tb, &wg, stop)
	fmt.Printf("ready %d %d %d\n", os.Getpid(), <-ta, <-tb)
	if *spawn > 0 || *mmapPath != "" {
		go func() {
			var line string
			fmt.Scanln(&line)
			if *mmapPath != "" {
				mapExec(*mmapPath)
				fmt.Println("mapped")
			}
			if *spawn > 0 {
				tids := make(chan int, *spawn)
				for i := 0; i < *spawn; i++ {
					wg.Add(1)
					go worker(burnBeta, 1.0/float64(*spawn), tids, &wg, stop)
				}
				out := "spawned"
				for i := 0; i < *spawn; i++ {
					out += fmt.Sprintf(" %d", <-tids)
				}
				fmt.Println(out)
			}
		}()
	}
	time.Sleep(*duration)
	close(stop)
	wg.Wait()
}
