package profiler_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/testchild"
)

// jitReuser does to its code memory what a JIT's garbage collector does:
// each round it maps executable memory at the same address, copies a burn
// loop there, writes a perf map line that names it for the round, runs it
// for a while and unmaps it. It prints the CLOCK_REALTIME bounds of each
// round.
const jitReuser = `
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) static long burn(long n)
{
	long x = 1;
	for (long i = 0; i < n; i++)
		x = x * 6364136223846793005L + i;
	return x;
}

static long now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	int rounds = atoi(argv[1]);
	long ms = atol(argv[2]);
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	char path[64];
	snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
	FILE *f = fopen(path, "w");
	if (f == NULL)
		return 1;
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	getchar(); /* profiling started */
	void *at = NULL;
	volatile long sink = 0;
	for (int r = 0; r < rounds; r++) {
		unsigned char *code = mmap(at, page, PROT_READ | PROT_WRITE | PROT_EXEC,
		                           MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED_NOREPLACE : 0), -1, 0);
		if (code == MAP_FAILED || (at && (void *)code != at))
			return 2;
		at = code;
		memcpy(code, (void *)burn, 128);
		fprintf(f, "%lx 80 jit_round_%d\n", (unsigned long)code, r);
		fflush(f);
		long (*fn)(long) = (long (*)(long))code;
		long start = now(), end = start + ms * 1000000L;
		while (now() < end)
			sink += fn(20000);
		printf("round %d %ld %ld\n", r, start, now());
		fflush(stdout);
		munmap(code, page);
	}
	fclose(f);
	unlink(path);
	printf("done\n");
	fflush(stdout);
	getchar();
	return 0;
}
`

// TestJITAddressReuse profiles a process that reuses the same address for
// new JIT code each round: every sample must be named by the map line of
// its round, not by the first line read for the address.
func TestJITAddressReuse(t *testing.T) {
	const rounds, roundMs = 6, 400
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "reuse.c"), filepath.Join(dir, "reuse")
	if err := os.WriteFile(src, []byte(jitReuser), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O1", "-fno-stack-protector", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	child := testchild.Start(t, bin, strconv.Itoa(rounds), strconv.Itoa(roundMs))
	t.Cleanup(func() { os.Remove(fmt.Sprintf("/tmp/perf-%d.map", child.Pid)) })
	p, err := profiler.Open(profiler.Options{
		Pids:      []int{child.Pid},
		Perf:      perf.Options{Frequency: 999},
		Symbolize: true,
	})
	testchild.RequirePerf(t, err)
	child.Send(t, "go")

	type round struct{ start, end int64 }
	var bounds []round
	var snaps []profiler.Snapshot
	for len(bounds) < rounds {
		line := child.Line(t, 5*time.Second)
		var r int
		var b round
		if _, err := fmt.Sscanf(line, "round %d %d %d", &r, &b.start, &b.end); err != nil || r != len(bounds) {
			t.Fatalf("child said %q", line)
		}
		bounds = append(bounds, b)
		// Reports while the rounds go on, as the receiver takes them.
		snaps = append(snaps, p.Take(false)...)
	}
	if line := child.Line(t, 5*time.Second); line != "done" {
		t.Fatalf("child said %q", line)
	}
	final, err := p.Close()
	if err != nil {
		t.Fatal(err)
	}
	snaps = append(snaps, final...)

	// A sample within margin of a round's bounds may be taken while the
	// map changes; the poller reads it every 20 ms, later on a busy
	// machine.
	const margin = int64(40 * time.Millisecond)
	inRound, named := make([]int, rounds), make([]int, rounds)
	wrong := map[string]int{}
	for _, sn := range snaps {
		if sn.Pid != child.Pid {
			continue
		}
		for _, s := range sn.Samples {
			r := -1
			for i, b := range bounds {
				if t := int64(s.Time); t > b.start+margin && t < b.end-margin {
					r = i
				}
			}
			if r < 0 || s.Stack < 0 || len(sn.Stacks[s.Stack]) == 0 {
				continue
			}
			leaf := sn.Stacks[s.Stack][0]
			if leaf.Mapping != nil && !strings.HasPrefix(leaf.Mapping.Path, "[anon") && leaf.Mapping.Path != "" {
				continue // in the program, between calls of the JIT code
			}
			inRound[r]++
			name := ""
			if len(leaf.Frames) > 0 {
				name = leaf.Frames[0].Function
			}
			if name == fmt.Sprintf("jit_round_%d", r) {
				named[r]++
			} else {
				wrong[fmt.Sprintf("round %d named %q", r, name)]++
			}
		}
	}
	st := p.Stats()
	t.Logf("JIT frames: %d, named by a line replaced since: %d, by a line read after the sample: %d, unnamed: %d", st.JIT.Frames, st.JIT.Older, st.JIT.Later, st.JIT.Unnamed)
	for r := range rounds {
		t.Logf("round %d: %d of %d JIT samples named jit_round_%d", r, named[r], inRound[r], r)
		if inRound[r] < roundMs/4 {
			t.Errorf("round %d: only %d samples in JIT code", r, inRound[r])
			continue
		}
		if float64(named[r]) < 0.97*float64(inRound[r]) {
			t.Errorf("round %d: %d of %d samples named right", r, named[r], inRound[r])
		}
	}
	if len(wrong) > 0 {
		t.Logf("misnamed: %v", wrong)
	}
	if st.JIT.Older == 0 {
		t.Errorf("no frame was named by a replaced line: the rounds did not reuse the address across reports")
	}
}
