package measure

import (
	"os"
	"testing"
	"time"
)

// TestStatCPU burns 150 ms of CPU in this process: utime+stime from
// /proc/PID/stat must grow by about that (10 ms ticks; the scheduler may
// take a little more), and agree with the live threads' schedstat sums.
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
	start, x := time.Now(), uint64(1)
	for time.Since(start) < 150*time.Millisecond {
		for i := 0; i < 1000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink = x
	after, err := StatCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	task1, err := TaskCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	got, want := after-before, task1-task0
	if got < 100*time.Millisecond || got > want+50*time.Millisecond {
		t.Errorf("StatCPU grew by %v over a 150 ms burn; the threads' schedstat by %v", got, want)
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
