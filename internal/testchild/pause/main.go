// Command pause is the sandbox of testchild.StartPod: pid 1 of a pod's
// shared pid namespace, as Kubernetes' pause container is. It prints
// "ready PID" (1, in its namespace), reaps the orphans the namespace hands
// it, and otherwise sleeps until it is killed. As a namespace's init it gets
// no signal it has not asked for, so it asks for none but SIGCHLD.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	fmt.Printf("ready %d\n", os.Getpid())
	for range children {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
