package perf_test

import (
	"debug/elf"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/testchild"
)

// readAll runs Read in the background, handing each record to fn under a
// lock that the test takes with the returned function.
func readAll(t *testing.T, s *perf.Session, fn func(*perf.Record)) (locked func(func()), stop func()) {
	var mu sync.Mutex
	done := make(chan error, 1)
	go func() {
		done <- s.Read(func(r *perf.Record) {
			mu.Lock()
			fn(r)
			mu.Unlock()
		})
	}()
	return func(f func()) { mu.Lock(); f(); mu.Unlock() }, func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Read: %v", err)
		}
	}
}

// await waits (up to 30 s) until cond holds, checked with the reader's
// lock held.
func await(t *testing.T, locked func(func()), what string, cond func() bool) {
	t.Helper()
	testchild.WaitFor(t, 30*time.Second, what, func() (ok bool) {
		locked(func() { ok = cond() })
		return ok
	})
}

// Threads created after Attach inherit the events: their samples arrive.
func TestThreadsCreatedAfterAttachAreSampled(t *testing.T) {
	bin := testchild.Build(t, "burner")
	child := testchild.Start(t, bin, "-alpha", "0.2", "-beta", "0", "-spawn", "6")
	s, err := perf.Open(perf.Options{Frequency: 499})
	testchild.RequirePerf(t, err)
	byTid := map[uint32]int{}
	forks := map[uint32]bool{}
	locked, stop := readAll(t, s, func(r *perf.Record) {
		switch r.Type {
		case perf.RecordSample:
			byTid[r.Sample.Tid]++
		case perf.RecordFork:
			forks[r.Task.Tid] = true
		}
	})
	defer stop()
	if err := s.Attach(child.Pid); err != nil {
		t.Fatal(err)
	}
	old, err := perf.Threads(child.Pid)
	if err != nil {
		t.Fatal(err)
	}
	child.Send(t, "go")
	line := child.Line(t, 5*time.Second)
	f := strings.Fields(line)
	if len(f) != 7 || f[0] != "spawned" {
		t.Fatalf("unexpected line %q", line)
	}
	await(t, locked, "10 samples of each burning thread", func() bool {
		for _, ts := range f[1:] {
			if tid, _ := strconv.Atoi(ts); byTid[uint32(tid)] < 10 {
				return false
			}
		}
		return true
	})
	s.Refresh()
	// The Go runtime may run a new goroutine on an idle thread that
	// existed at Attach; the threads that did not are the ones inherited.
	existed := map[int]bool{}
	for _, tid := range old {
		existed[tid] = true
	}
	locked(func() {
		fresh := 0
		for _, ts := range f[1:] {
			tid, _ := strconv.Atoi(ts)
			if byTid[uint32(tid)] < 10 {
				t.Errorf("thread %d (new: %t) has %d samples", tid, !existed[tid], byTid[uint32(tid)])
			}
			if !existed[tid] {
				fresh++
				if !forks[uint32(tid)] {
					t.Errorf("no FORK record for new thread %d", tid)
				}
			}
		}
		t.Logf("%d of 6 burning threads were created after Attach", fresh)
		if fresh == 0 {
			t.Errorf("no thread was created after Attach; the test proves nothing")
		}
	})
}

// With KernelStacks, a thread busy in a syscall has kernel frames before
// its user frames.
func TestKernelStacks(t *testing.T) {
	bin := testchild.Build(t, "burner")
	child := testchild.Start(t, bin, "-kernel", "-alpha", "1", "-beta", "0")
	s, err := perf.Open(perf.Options{Frequency: 999, KernelStacks: true})
	testchild.RequirePerf(t, err)
	var samples, kernel, both int
	locked, stop := readAll(t, s, func(r *perf.Record) {
		if r.Type != perf.RecordSample || r.Sample.Tid != uint32(child.Ready[1]) {
			return
		}
		samples++
		var k, u int
		perf.Frames(r.Sample.Callchain, func(_ uint64, isKernel bool) {
			if isKernel {
				k++
			} else {
				u++
			}
		})
		if k > 0 {
			kernel++
			if u > 0 {
				both++
			}
		}
	})
	defer stop()
	if err := s.Attach(child.Pid); err != nil {
		t.Fatal(err)
	}
	await(t, locked, "200 samples of the /dev/zero reader", func() bool { return samples >= 200 })
	locked(func() {
		t.Logf("%d samples of the /dev/zero reader, %d with kernel frames, %d with kernel and user frames", samples, kernel, both)
		if samples < 100 || kernel < samples/2 || both < kernel*9/10 {
			t.Errorf("want most samples of a thread reading /dev/zero in the kernel with user frames below")
		}
	})
}

// A file mapped executable while sampling yields an MMAP2 record with the
// file's GNU build id.
func TestMmap2CarriesBuildID(t *testing.T) {
	lib := "/usr/bin/true"
	want := gnuBuildID(t, lib)
	bin := testchild.Build(t, "burner")
	child := testchild.Start(t, bin, "-alpha", "0.1", "-beta", "0", "-mmap", lib)
	s, err := perf.Open(perf.Options{Frequency: 99})
	testchild.RequirePerf(t, err)
	var got []string
	locked, stop := readAll(t, s, func(r *perf.Record) {
		if r.Type == perf.RecordMmap2 && strings.HasSuffix(string(r.Mmap2.Filename), "/true") {
			got = append(got, hex.EncodeToString(r.Mmap2.BuildID))
		}
	})
	defer stop()
	if err := s.Attach(child.Pid); err != nil {
		t.Fatal(err)
	}
	child.Send(t, "go")
	if l := child.Line(t, 5*time.Second); l != "mapped" {
		t.Fatalf("child said %q", l)
	}
	await(t, locked, "the MMAP2 record of "+lib, func() bool { return len(got) > 0 })
	locked(func() {
		if len(got) != 1 || got[0] != want {
			t.Errorf("MMAP2 build ids for %s: %v, want [%s]", lib, got, want)
		}
	})
}

func gnuBuildID(t *testing.T, path string) string {
	f, err := elf.Open(path)
	if err != nil {
		testchild.Unavailable(t, "no ELF at %s: %v", path, err)
	}
	defer f.Close()
	sec := f.Section(".note.gnu.build-id")
	if sec == nil {
		testchild.Unavailable(t, "%s has no build id", path)
	}
	d, err := sec.Data()
	if err != nil || len(d) < 16 {
		t.Fatalf("read build id note: %v", err)
	}
	namesz := int(f.ByteOrder.Uint32(d))
	descsz := int(f.ByteOrder.Uint32(d[4:]))
	off := 12 + (namesz+3)&^3
	return hex.EncodeToString(d[off : off+descsz])
}

// A ring that overflows while nobody reads reports the loss instead of
// hiding it.
func TestLostRecordsAreCounted(t *testing.T) {
	bin := testchild.Build(t, "burner")
	child := testchild.Start(t, bin, "-alpha", "1", "-beta", "1")
	s, err := perf.Open(perf.Options{Frequency: 10000, RingPages: 1})
	testchild.RequirePerf(t, err)
	if err := s.Attach(child.Pid); err != nil {
		t.Fatal(err)
	}
	// Nobody reads for a while: the point. A 4 KiB ring fills in
	// milliseconds.
	time.Sleep(500 * time.Millisecond)
	var lostRecords uint64
	locked, stop := readAll(t, s, func(r *perf.Record) {
		if r.Type == perf.RecordLost {
			lostRecords += r.Lost
		}
	})
	await(t, locked, "a LOST record", func() bool { return lostRecords > 0 })
	stop()
	locked(func() {
		st := s.Stats()
		t.Logf("stats %+v, lost in records %d", st, lostRecords)
		if lostRecords == 0 || st.Lost != lostRecords {
			t.Errorf("lost %d in records, %d in Stats; want equal and above 0", lostRecords, st.Lost)
		}
	})
}
