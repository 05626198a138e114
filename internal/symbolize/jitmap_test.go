package symbolize

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// jitSource maps anonymous executable memory, copies a tiny function into
// it, and describes it in /tmp/perf-PID.map like a JIT: two symbols out of
// address order at first, a third one appended when asked on stdin.
const jitSource = `#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int ret42(void) { return 42; }

int main(void)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char *code = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE | PROT_EXEC,
	                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED)
		return 1;
	memcpy(code, (void *)ret42, 16);
	char path[64];
	snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
	FILE *f = fopen(path, "w");
	if (f == NULL)
		return 1;
	fprintf(f, "%lx %zx jit_second\n", (unsigned long)(code + page), page);
	fprintf(f, "%lx 40 jit_first\n", (unsigned long)code);
	fflush(f);
	printf("code %p\npage %#zx\nready\n", (void *)code, page);
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0) {
		fprintf(f, "0x%lx 0x20 LazyCompile:*third /app/x.js:3\n", (unsigned long)(code + 2 * page));
		fflush(f);
		printf("appended\n");
		fflush(stdout);
	}
	fclose(f);
	unlink(path);
	return 0;
}
`

func TestLookupJIT(t *testing.T) {
	bin := compileC(t, t.TempDir(), "jit.c", jitSource, "jit", "-O1")
	var pid int
	t.Cleanup(func() {
		if pid != 0 {
			os.Remove(fmt.Sprintf("/tmp/perf-%d.map", pid))
		}
	})
	ch := launch(t, exec.Command(bin))
	pid = ch.pid
	ch.waitReady(nil)
	code, page := ch.addrs["code"], ch.addrs["page"]
	if code == 0 || page == 0 {
		t.Fatalf("child printed %v", ch.addrs)
	}

	p, _ := openProcess(t, pid, Options{})
	check := func(pc uint64, want string) {
		t.Helper()
		loc := p.Lookup(pc)
		got := ""
		if len(loc.Frames) == 1 {
			got = loc.Frames[0].Function
		}
		if got != want {
			t.Errorf("Lookup(%#x) = %q (%d frames), want %q", pc, got, len(loc.Frames), want)
		}
		if loc.Mapping == nil || loc.Mapping.Path != "" {
			t.Errorf("Lookup(%#x): mapping %v, want the anonymous one", pc, loc.Mapping)
		}
	}
	check(code+4, "jit_first")
	check(code+page+100, "jit_second")
	check(code+0x40, "")     // past jit_first
	check(code+2*page+4, "") // not written yet

	if _, err := ch.stdin.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if !ch.stdout.Scan() || ch.stdout.Text() != "appended" {
		t.Fatal("child did not append")
	}
	time.Sleep(jitRecheckInterval + 100*time.Millisecond)
	check(code+2*page+4, "LazyCompile:*third /app/x.js:3")
	check(code+4, "jit_first")
}

func TestJITMapAdd(t *testing.T) {
	type sym = jitSym
	tests := []struct {
		name string
		add  []sym
		want []sym
	}{
		{"in order", []sym{{0, 10, "a"}, {10, 20, "b"}}, []sym{{0, 10, "a"}, {10, 20, "b"}}},
		{"out of order", []sym{{10, 20, "b"}, {0, 10, "a"}, {30, 40, "d"}, {20, 25, "c"}},
			[]sym{{0, 10, "a"}, {10, 20, "b"}, {20, 25, "c"}, {30, 40, "d"}}},
		{"same range replaced", []sym{{0, 10, "a"}, {0, 10, "b"}}, []sym{{0, 10, "b"}}},
		{"inside splits", []sym{{0, 30, "a"}, {10, 20, "b"}}, []sym{{0, 10, "a"}, {10, 20, "b"}, {20, 30, "a"}}},
		{"covers several", []sym{{0, 10, "a"}, {10, 20, "b"}, {20, 30, "c"}, {5, 25, "d"}},
			[]sym{{0, 5, "a"}, {5, 25, "d"}, {25, 30, "c"}}},
		{"covers all", []sym{{10, 20, "a"}, {20, 30, "b"}, {0, 40, "c"}}, []sym{{0, 40, "c"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var j jitMap
			for _, s := range tt.add {
				j.add(s)
			}
			if fmt.Sprint(j.syms) != fmt.Sprint(tt.want) {
				t.Errorf("got %v, want %v", j.syms, tt.want)
			}
		})
	}
}

func TestJITMapParse(t *testing.T) {
	// A partial last line is left for the next read; junk is skipped.
	in := "1000 10 a\nnot a line\n0x2000 0x10 b c d\n3000 0 zero\n4000 10 partial"
	var j jitMap
	n, err := j.parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(strings.LastIndexByte(in, '\n') + 1); n != want {
		t.Errorf("parsed %d bytes, want %d", n, want)
	}
	want := []jitSym{{0x1000, 0x1010, "a"}, {0x2000, 0x2010, "b c d"}}
	if fmt.Sprint(j.syms) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", j.syms, want)
	}
}
