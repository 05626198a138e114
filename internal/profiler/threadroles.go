package profiler

import (
	"path"
	"strings"
)

// Runtimes leave some threads unnamed: their comm is the process's. Node.js
// 20 names none of its threads, so a worker_threads Worker, a libuv
// threadpool thread and a V8 platform thread all read "node". Such a
// thread is named after what it runs: the function its stack starts in,
// just above libc's start_thread, when that is a role a runtime is known
// to give its threads.

// threadRoles are the start functions of the threads of runtimes that do
// not name them, by prefix of the demangled name, and the name given.
var threadRoles = []struct{ start, role string }{
	{"node::worker::Worker::StartThread(", "node:worker"},
	{"node::WorkerThreadsTaskRunner::DelayedTaskScheduler::", "node:V8DelayedTasks"},
	{"node::(anonymous namespace)::PlatformWorkerThread(", "node:V8Worker"},
	{"node::inspector::", "node:inspector"},
	{"node::Watchdog", "node:watchdog"},
}

// threadRole returns the role of a thread whose stack (leaf first) is
// stack, "" when it does not start in a known one. The frame-pointer walk
// reaches start_thread through code with frame pointers, as Node's is.
func threadRole(stack []*Location) string {
	for i := len(stack) - 1; i > 0; i-- {
		fn := outerFunction(stack[i])
		if fn != "start_thread" && fn != "clone3" && fn != "__clone3" {
			continue
		}
		entry := outerFunction(stack[i-1])
		for _, r := range threadRoles {
			if strings.HasPrefix(entry, r.start) {
				return r.role
			}
		}
		if m := stack[i-1].Mapping; entry == "worker" && m != nil && (path.Base(m.Path) == "node" || strings.Contains(m.Path, "libuv")) {
			return "node:libuv-worker" // libuv's threadpool: static void worker(void *)
		}
		return ""
	}
	return ""
}

// outerFunction names the function of a location (its outermost inlined
// frame), "" when unnamed.
func outerFunction(l *Location) string {
	if l == nil || len(l.Frames) == 0 {
		return ""
	}
	return l.Frames[len(l.Frames)-1].Function
}
