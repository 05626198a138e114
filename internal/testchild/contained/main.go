// Command contained is the workload of the container tests
// (testchild.StartContainer): it reports what a process sees of itself
// inside a container, the facts a profiler outside must map to its own view.
//
// It prints, one per line:
//
//	ready PID               its pid in its own pid namespace
//	container.id ID         what the OpenTelemetry Go SDK's container detector
//	                        (resource.WithContainer) reads from /proc/self/cgroup
//	                        ("container.id" alone when it finds none)
//	tids TID...             with -threads N: the ids, in its own pid namespace,
//	                        of N threads named worker-0 … worker-N-1, in that
//	                        order, each kept blocked, locked to its goroutine
//
// and then waits until its standard input ends.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"go.opentelemetry.io/otel/sdk/resource"
	"golang.org/x/sys/unix"
)

// init keeps the main goroutine on the main thread, so that no worker
// locks (and renames) the thread whose name is the process's.
func init() { runtime.LockOSThread() }

func main() {
	threads := flag.Int("threads", 0, "start this many named threads and print their ids")
	flag.Parse()
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(out, "ready %d\n", os.Getpid())

	res, err := resource.New(context.Background(), resource.WithContainer())
	if err != nil {
		fmt.Fprintln(os.Stderr, "contained: detect container:", err)
		os.Exit(1)
	}
	id := ""
	for _, kv := range res.Attributes() {
		if kv.Key == "container.id" {
			id = kv.Value.AsString()
		}
	}
	fmt.Fprintln(out, strings.TrimSpace("container.id "+id))

	if *threads > 0 {
		tids := make([]chan int, *threads)
		for i := range tids {
			tids[i] = make(chan int)
			go worker(i, tids[i])
		}
		line := "tids"
		for _, tid := range tids {
			line += fmt.Sprintf(" %d", <-tid)
		}
		fmt.Fprintln(out, line)
	}
	out.Flush()
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// worker names its thread worker-i, sends its id and blocks forever. The
// thread stays locked to the goroutine, so it is not reused or ended.
func worker(i int, tids chan<- int) {
	runtime.LockOSThread()
	name, err := unix.BytePtrFromString(fmt.Sprintf("worker-%d", i))
	if err == nil {
		err = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "contained: name thread:", err)
		os.Exit(1)
	}
	tids <- unix.Gettid()
	select {}
}
