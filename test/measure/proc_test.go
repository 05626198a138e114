package measure

import (
	"os"
	"testing"
	"time"
)

// TestStatCPU burns 150 ms of CPU in this process (by its threads'
// schedstat, so that a busy machine only makes it take longer): utime+stime
// from /proc/PID/stat must grow by the same, give or take its 10 ms ticks
// (utime and stime are each truncated to one) and the reads between.
func TestStatCPU(t *testing.T) {
	pid := os.Getpid()
	before, err := StatCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	task0, err := TaskCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	var task1 time.Duration
	x, deadline := uint64(1), time.Now().Add(30*time.Second)
	for task1-task0 < 150*time.Millisecond && time.Now().Before(deadline) {
		for i := 0; i < 100000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
		if task1, err = TaskCPU(pid); err != nil {
			t.Fatal(err)
		}
	}
	sink = x
	after, err := StatCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	got, want := after-before, task1-task0
	if want < 150*time.Millisecond {
		t.Fatalf("burnt only %v of CPU in 30 s", want)
	}
	if got < want-30*time.Millisecond || got > want+30*time.Millisecond {
		t.Errorf("StatCPU grew by %v while the threads' schedstat grew by %v", got, want)
	}
}

var sink uint64

func TestReadMemory(t *testing.T) {
	buf := make([]byte, 32<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	m, err := ReadMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	sink = uint64(buf[len(buf)-1])
	if m.RSS == 0 || m.RSSAnon < 32<<10 || m.HWM < m.RSS || m.RSSAnon+m.RSSFile+m.RSSShmem != m.RSS {
		t.Errorf("implausible %+v KiB after touching 32 MiB: want RSS = RssAnon + RssFile + RssShmem ≤ VmHWM, RssAnon ≥ 32 MiB", m)
	}
	if _, err := ReadMemory(-1); err == nil {
		t.Error("ReadMemory(-1): no error")
	}
}
