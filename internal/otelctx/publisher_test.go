package otelctx

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/testchild"
)

// The C publisher (internal/testchild/otelctx_c) is built with gcc in each
// of the ways a writer may expose otel_thread_ctx_v1, which are the cases a
// reader must handle.
type variant struct {
	name string
	lib  string   // shared library holding the thread context, "" if in the executable
	cc   []string // extra gcc flags for the library (or the executable)
	mode string   // "exe", "linked", "dlopen"
}

var variants = []variant{
	// Executable (PIE): the linker relaxes the access to local-exec.
	{name: "exe", mode: "exe"},
	{name: "exe-nopie", mode: "exe", cc: []string{"-no-pie", "-fno-pie"}},
	// A library loaded at start-up sits in static TLS.
	{name: "linked-gd", mode: "linked", lib: "libtc_gd.so"},
	{name: "linked-tlsdesc", mode: "linked", lib: "libtc_desc.so", cc: []string{"-mtls-dialect=gnu2"}},
	{name: "linked-ie", mode: "linked", lib: "libtc_ie.so", cc: []string{"-ftls-model=initial-exec"}},
	// A dlopen'ed library: general dynamic goes through the DTV; TLSDESC
	// gets glibc's surplus static TLS when there is room.
	{name: "dlopen-gd", mode: "dlopen", lib: "libtc_gd.so"},
	{name: "dlopen-tlsdesc", mode: "dlopen", lib: "libtc_desc.so", cc: []string{"-mtls-dialect=gnu2"}},
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func srcDir() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "testchild", "otelctx_c")
}

// buildPublishers compiles every variant once per test binary and returns
// the directory holding them.
func buildPublishers(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		testchild.NeedRuntime(t, "gcc not installed: %v", err)
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "perfprof-otelctx-")
		if buildErr != nil {
			return
		}
		src := srcDir()
		gcc := func(args ...string) error {
			args = append([]string{"-O2", "-Wall", "-pthread", "-I", src}, args...)
			out, err := exec.Command("gcc", args...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return nil
		}
		pub, tc := filepath.Join(src, "publisher.c"), filepath.Join(src, "threadctx.c")
		var errs []error
		libs := map[string]bool{}
		for _, v := range variants {
			out := filepath.Join(buildDir, "pub-"+v.name)
			switch v.mode {
			case "exe":
				errs = append(errs, gcc(append(v.cc, "-o", out, pub, tc, "-Wl,--export-dynamic-symbol="+SymbolName)...))
			case "linked", "dlopen":
				if !libs[v.lib] {
					libs[v.lib] = true
					errs = append(errs, gcc(append(v.cc, "-fPIC", "-shared", "-o", filepath.Join(buildDir, v.lib), tc)...))
				}
				if v.mode == "linked" {
					errs = append(errs, gcc("-o", out, pub, "-L", buildDir, "-l:"+v.lib, "-Wl,-rpath,"+buildDir))
				} else {
					errs = append(errs, gcc("-DTHREADCTX_DLOPEN", "-o", out, pub, "-ldl"))
				}
			}
		}
		buildErr = errors.Join(errs...)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

// publisher is a running C publisher.
type publisher struct {
	child *testchild.Child
	pid   int
	tp    uint64 // its thread pointer, as it reads it (arch_prctl)
	va    uint64 // the address of its otel_thread_ctx_v1
	spans [2]span
	truth []byte // the shared truth page
}

type span struct {
	traceID, spanID, route, user string
}

// active returns the span index the publisher last made active (-1: none).
// Meaningful while it is stopped.
func (p *publisher) active() int {
	return int(int32(uint32(p.truth[8]) | uint32(p.truth[9])<<8 | uint32(p.truth[10])<<16 | uint32(p.truth[11])<<24))
}

func startPublisher(t testing.TB, v variant, mode, pctx string) *publisher {
	t.Helper()
	dir := buildPublishers(t)
	truthPath := filepath.Join(t.TempDir(), "truth")
	args := []string{mode, pctx, truthPath}
	if v.mode == "dlopen" {
		args = append(args, filepath.Join(dir, v.lib))
	}
	c := testchild.Start(t, filepath.Join(dir, "pub-"+v.name), args...)
	p := &publisher{child: c}
	if len(c.Ready) != 3 {
		t.Fatalf("ready line: %v", c.Ready)
	}
	p.pid, p.tp, p.va = c.Ready[0], uint64(c.Ready[1]), uint64(c.Ready[2])
	for i := range 2 {
		f := strings.Fields(c.Line(t, 5*time.Second))
		if len(f) != 6 || f[0] != "span" || f[1] != strconv.Itoa(i) {
			t.Fatalf("span line %d: %q", i, f)
		}
		p.spans[i] = span{traceID: f[2], spanID: f[3], route: f[4], user: f[5]}
	}
	if l := c.Line(t, 5*time.Second); l != "started" {
		t.Fatalf("want started, got %q", l)
	}
	f, err := os.Open(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p.truth, err = syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(p.truth) })
	if mode == "attach" || mode == "rewrite" {
		// Wait for the first switch: until then no span is attached.
		deadline := time.Now().Add(5 * time.Second)
		for p.active() < 0 {
			if time.Now().After(deadline) {
				t.Fatal("publisher made no span active in 5 s")
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	return p
}

// stop stops the publisher with SIGSTOP and waits until it is stopped.
func (p *publisher) stop(t testing.TB) {
	t.Helper()
	if err := syscall.Kill(p.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the parenthesized command name.
		if s := string(b); strings.HasPrefix(s[strings.LastIndexByte(s, ')')+2:], "T") {
			return
		}
		time.Sleep(20 * time.Microsecond)
	}
	t.Fatal("publisher did not stop in 5 s")
}

func (p *publisher) cont(t testing.TB) {
	t.Helper()
	if err := syscall.Kill(p.pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

func TestProcessContextFromPublisher(t *testing.T) {
	p := startPublisher(t, variants[0], "detach", "memfd")
	r, err := ProcessContext(p.pid)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.ServiceName(); got != "otelctx-publisher" {
		t.Errorf("service.name %q", got)
	}
	if got, want := r.Attributes["service.instance.id"], fmt.Sprintf("publisher-%d", p.pid); got != want {
		t.Errorf("service.instance.id %v, want %v", got, want)
	}
	if got := r.Attributes["process.pid"]; got != int64(p.pid) {
		t.Errorf("process.pid %v (%T)", got, got)
	}
	if got := r.SchemaVersion(); got != "tls_v1" {
		t.Errorf("schema version %q", got)
	}
	if got := r.KeyMap(); len(got) != 2 || got[0] != "http.route" || got[1] != "user.name" {
		t.Errorf("key map %q", got)
	}
	if r.PublishedAt == 0 || !isContextMapping(r.Mapping) {
		t.Errorf("published at %d in %q", r.PublishedAt, r.Mapping)
	}
	t.Logf("read from %s at %#x: %v", r.Mapping, r.Addr, r.Attributes)
}

func TestProcessContextNotPublished(t *testing.T) {
	p := startPublisher(t, variants[0], "detach", "none")
	_, err := ProcessContext(p.pid)
	if !errors.Is(err, ErrNotPublished) {
		t.Fatalf("want ErrNotPublished, got %v", err)
	}
	// Our own process publishes nothing either.
	if _, err := ProcessContext(os.Getpid()); !errors.Is(err, ErrNotPublished) {
		t.Fatalf("self: want ErrNotPublished, got %v", err)
	}
}

// While the publisher rewrites its context every ~20 µs, every read either
// succeeds with one of the two payloads or reports ErrUpdating: never a torn
// payload.
func TestProcessContextUnderUpdates(t *testing.T) {
	p := startPublisher(t, variants[0], "attach", "churn")
	var ok, updating int
	versions := map[any]int{}
	for range 2000 {
		r, err := ProcessContext(p.pid)
		if errors.Is(err, ErrUpdating) {
			updating++
			continue
		}
		if err != nil {
			t.Fatalf("read %d: %v", ok+updating, err)
		}
		if r.ServiceName() != "otelctx-publisher" || len(r.KeyMap()) != 2 {
			t.Fatalf("torn read: %v %v", r.Attributes, r.Extra)
		}
		versions[r.Attributes["service.version"]]++
		ok++
	}
	t.Logf("%d reads, %d gave up on updates; versions %v", ok+updating, updating, versions)
	if ok < 1000 || versions["1"] == 0 || versions["2"] == 0 {
		t.Errorf("too few good reads (%d) or a version never seen: %v", ok, versions)
	}
}

func TestLocateTLSAndThreadPointer(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			p := startPublisher(t, v, "attach", "memfd")
			tp, err := ThreadPointer(p.pid, p.pid)
			if err != nil {
				t.Fatal(err)
			}
			if tp != p.tp {
				t.Fatalf("thread pointer %#x, publisher says %#x", tp, p.tp)
			}
			loc, err := LocateTLS(p.pid)
			if err != nil {
				t.Fatal(err)
			}
			mem, err := openMemory(p.pid)
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			addr, err := loc.Address(mem, tp)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %+v", v.name, loc)
			if addr != p.va {
				t.Fatalf("variable at %#x, publisher says %#x (%+v)", addr, p.va, loc)
			}
		})
	}
}

// The publisher switches spans every millisecond; stopped at random
// moments, the span read must be the one it says is active.
func TestThreadContextMatchesPublisher(t *testing.T) {
	for _, v := range variants {
		for _, mode := range []string{"attach", "rewrite"} {
			t.Run(v.name+"/"+mode, func(t *testing.T) {
				p := startPublisher(t, v, mode, "memfd")
				proc, err := Open(p.pid)
				if err != nil {
					t.Fatal(err)
				}
				defer proc.Close()
				const n = 300
				var right, invalid int
				var wrong []string
				for i := range n {
					time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
					p.stop(t)
					want := p.active()
					c, err := proc.ThreadContext(p.pid)
					p.cont(t)
					switch {
					case errors.Is(err, ErrNotValid) || errors.Is(err, ErrNoContext):
						// Stopped in the middle of a switch.
						invalid++
						continue
					case err != nil:
						t.Fatalf("read %d: %v", i, err)
					}
					if want < 0 {
						wrong = append(wrong, fmt.Sprintf("read %d: span %s while none is active", i, c.SpanIDString()))
						continue
					}
					s := p.spans[want]
					if c.TraceIDString() != s.traceID || c.SpanIDString() != s.spanID || c.TraceFlags != 1 {
						wrong = append(wrong, fmt.Sprintf("read %d: %s/%s, active %d is %s/%s", i, c.TraceIDString(), c.SpanIDString(), want, s.traceID, s.spanID))
						continue
					}
					if len(c.Attrs) != 2 || c.Attrs[0] != (Attr{0, "http.route", s.route}) || c.Attrs[1] != (Attr{1, "user.name", s.user}) {
						wrong = append(wrong, fmt.Sprintf("read %d: attributes %+v", i, c.Attrs))
						continue
					}
					right++
				}
				t.Logf("%d/%d right, %d caught mid-switch, %d wrong", right, n, invalid, len(wrong))
				if right < n*99/100 {
					t.Errorf("only %d/%d reads right: %v", right, n, wrong)
				}
			})
		}
	}
}

func TestThreadContextTornRecordRefused(t *testing.T) {
	for _, v := range []variant{variants[0], variants[5]} {
		t.Run(v.name, func(t *testing.T) {
			p := startPublisher(t, v, "tear", "memfd")
			// The publisher tears its record right after "started".
			deadline := time.Now().Add(5 * time.Second)
			for p.active() != -2 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			_, err := ThreadContext(p.pid, p.pid)
			if !errors.Is(err, ErrNotValid) {
				t.Fatalf("want ErrNotValid, got %v", err)
			}
		})
	}
}

func TestThreadContextDetached(t *testing.T) {
	p := startPublisher(t, variants[0], "detach", "memfd")
	if _, err := ThreadContext(p.pid, p.pid); !errors.Is(err, ErrNoContext) {
		t.Fatalf("want ErrNoContext, got %v", err)
	}
}

func TestThreadContextNotPublished(t *testing.T) {
	cmd := exec.Command(testchild.LookTool(t, "sleep"), "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	testchild.WaitExec(t, cmd.Process.Pid, "sleep")
	if _, err := ThreadContext(cmd.Process.Pid, cmd.Process.Pid); !errors.Is(err, ErrNotPublished) {
		t.Fatalf("want ErrNotPublished, got %v", err)
	}
	if _, err := LocateTLS(cmd.Process.Pid); !errors.Is(err, ErrNotPublished) {
		t.Fatalf("LocateTLS: want ErrNotPublished, got %v", err)
	}
}

// Threads other than the main one: their thread pointers are on glibc's
// other list, and a dlopen'ed library's TLS block is allocated per thread.
func TestThreadContextOtherThreads(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			p := startPublisher(t, v, "threads", "memfd")
			type thread struct {
				tid, k int
				tp, va uint64
			}
			var threads []thread
			for range 2 {
				f := strings.Fields(p.child.Line(t, 5*time.Second))
				if len(f) != 5 || f[0] != "thread" {
					t.Fatalf("thread line %q", f)
				}
				var th thread
				var err [4]error
				th.k, err[0] = strconv.Atoi(f[1])
				th.tid, err[1] = strconv.Atoi(f[2])
				th.tp, err[2] = strconv.ParseUint(f[3], 10, 64)
				th.va, err[3] = strconv.ParseUint(f[4], 10, 64)
				if e := errors.Join(err[:]...); e != nil {
					t.Fatal(e)
				}
				threads = append(threads, th)
			}
			proc, err := Open(p.pid)
			if err != nil {
				t.Fatal(err)
			}
			defer proc.Close()
			p.stop(t)
			defer p.cont(t)
			for _, th := range threads {
				tp, err := proc.ThreadPointer(th.tid)
				if err != nil {
					t.Fatal(err)
				}
				if tp != th.tp {
					t.Fatalf("thread %d: thread pointer %#x, it says %#x", th.tid, tp, th.tp)
				}
				if va, err := proc.TLS().Address(proc.mem, tp); err != nil || va != th.va {
					t.Fatalf("thread %d: variable at %#x (%v), it says %#x", th.tid, va, err, th.va)
				}
				c, err := proc.ThreadContext(th.tid)
				if err != nil {
					t.Fatal(err)
				}
				if s := p.spans[th.k]; c.SpanIDString() != s.spanID || c.TraceIDString() != s.traceID {
					t.Fatalf("thread %d: span %s, want %s", th.tid, c.SpanIDString(), s.spanID)
				}
			}
			// The main thread attached nothing.
			if _, err := proc.ThreadContext(p.pid); !errors.Is(err, ErrNoContext) {
				t.Fatalf("main thread: want ErrNoContext, got %v", err)
			}
		})
	}
}

// BenchmarkThreadContext measures one user-space read of a stopped thread's
// context (thread pointer cached): the dtv walk for dynamic TLS, the
// pointer, the header, the attributes.
func BenchmarkThreadContext(b *testing.B) {
	for _, v := range []variant{variants[0], variants[5]} {
		b.Run(v.name, func(b *testing.B) {
			p := startPublisher(b, v, "attach", "memfd")
			proc, err := Open(p.pid)
			if err != nil {
				b.Fatal(err)
			}
			defer proc.Close()
			p.stop(b)
			defer p.cont(b)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := proc.ThreadContext(p.pid); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestLocateTLSSkipsKnownFiles: a second LocateTLS of a process opens only
// the files not known to lack the symbol: the publisher's object that
// defines it, not its executable's libc and ld.so again; and it finds the
// same variable.
func TestLocateTLSSkipsKnownFiles(t *testing.T) {
	v := variants[2] // linked-gd: the executable, the library, libc, ld.so
	p := startPublisher(t, v, "attach", "memfd")
	lacksTLS.mu.Lock()
	lacksTLS.m = nil // as in a new collector
	lacksTLS.mu.Unlock()
	n0 := objectsOpened.Load()
	first, err := LocateTLS(p.pid)
	if err != nil {
		t.Fatal(err)
	}
	n1 := objectsOpened.Load()
	second, err := LocateTLS(p.pid)
	if err != nil {
		t.Fatal(err)
	}
	n2 := objectsOpened.Load()
	t.Logf("%s: first LocateTLS opened %d files, the second %d", v.name, n1-n0, n2-n1)
	if second != first {
		t.Fatalf("second LocateTLS %+v, first %+v", second, first)
	}
	if n2-n1 >= n1-n0 || n2-n1 > 1 {
		t.Errorf("the second LocateTLS opened %d files (the first %d): want only the one that defines %s", n2-n1, n1-n0, SymbolName)
	}
	if _, err := LocateTLS(os.Getpid()); !errors.Is(err, ErrNotPublished) {
		t.Fatalf("self: want ErrNotPublished, got %v", err)
	}
	n3 := objectsOpened.Load()
	if _, err := LocateTLS(os.Getpid()); !errors.Is(err, ErrNotPublished) {
		t.Fatalf("self again: want ErrNotPublished, got %v", err)
	}
	if n := objectsOpened.Load() - n3; n != 0 {
		t.Errorf("a second LocateTLS of a process that publishes nothing opened %d files, want 0", n)
	}
}
