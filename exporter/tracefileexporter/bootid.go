package tracefileexporter

import (
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// bootID is the collector run's boot_id (segment metadata), in dial9's
// form: four lowercase letters from the wall clock at first use, "-", the
// process id. Every exporter of the process writes the same one (the S3
// keys' boot= is read back from the metadata), and span
// instance ids (spanInstances) are unique under it.
var bootID = sync.OnceValue(func() string {
	return formatBootID(uint64(time.Now().UnixNano()), os.Getpid())
})

func formatBootID(ns uint64, pid int) string {
	var b [4]byte
	for i := range b {
		b[i] = 'a' + byte(ns%26)
		ns /= 26
	}
	return string(b[:]) + "-" + strconv.Itoa(max(pid, 0))
}

// spanInstances is the last span_instance_id given out in this process,
// shared by its exporters: ids start at 1 and are never recycled.
var spanInstances atomic.Uint64
