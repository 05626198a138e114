package testchild

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// OTelCtxPublisher builds, once per test binary, the C program of
// internal/testchild/otelctx_c that publishes an OTEP 4719 process context
// (service.name "otelctx-publisher") and an OTEP 4947 thread context, and
// returns its path. Run it as "PATH attach memfd TRUTHFILE"; see
// publisher.c for its modes and output.
func OTelCtxPublisher(tb testing.TB) string {
	tb.Helper()
	return gccOnce(tb, "otelctx-publisher", func(src, out string) []string {
		return []string{"-O2", "-Wall", "-pthread", "-I", src, "-o", out,
			filepath.Join(src, "publisher.c"), filepath.Join(src, "threadctx.c"),
			"-Wl,--export-dynamic-symbol=otel_thread_ctx_v1"}
	})
}

// gccOnce builds, once per test binary, the program gcc makes with the
// arguments args gives for the sources in internal/testchild/otelctx_c
// (src) and the output out, and returns its path; it skips the test (or
// fails it under PERFPROF_REQUIRE_RUNTIMES=1) without gcc.
func gccOnce(tb testing.TB, name string, args func(src, out string) []string) string {
	tb.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		NeedRuntime(tb, "gcc not installed: %v", err)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	key := "\x00" + name
	if p, ok := built[key]; ok {
		return p
	}
	ensureBuildDir(tb)
	_, self, _, _ := runtime.Caller(0)
	out := filepath.Join(buildDir, name)
	argv := args(filepath.Join(filepath.Dir(self), "otelctx_c"), out)
	if b, err := exec.Command("gcc", argv...).CombinedOutput(); err != nil {
		tb.Fatalf("gcc %s: %v\n%s", strings.Join(argv, " "), err, b)
	}
	built[key] = out
	return out
}

// OTelCtxPublisherDlopen builds, once per test binary, the same publisher
// with its thread context in a shared library that it dlopens (general
// dynamic TLS: a reader must walk each thread's DTV), and returns the
// program and the library. Run it as "PROGRAM MODE PCTX TRUTHFILE LIBRARY".
func OTelCtxPublisherDlopen(tb testing.TB) (bin, lib string) {
	tb.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		NeedRuntime(tb, "gcc not installed: %v", err)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	const key, libKey = "\x00otelctx-publisher-dlopen", "\x00otelctx-publisher-dlopen-lib"
	if p, ok := built[key]; ok {
		return p, built[libKey]
	}
	ensureBuildDir(tb)
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "otelctx_c")
	bin = filepath.Join(buildDir, "otelctx-publisher-dlopen")
	lib = filepath.Join(buildDir, "libotelctx-threadctx.so")
	for _, args := range [][]string{
		{"-O2", "-Wall", "-fPIC", "-shared", "-I", src, "-o", lib, filepath.Join(src, "threadctx.c")},
		{"-O2", "-Wall", "-pthread", "-DTHREADCTX_DLOPEN", "-I", src, "-o", bin, filepath.Join(src, "publisher.c"), "-ldl"},
	} {
		if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			tb.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	built[key], built[libKey] = bin, lib
	return bin, lib
}

// NoFP builds, once per test binary, a program of internal/testchild/nofp
// without frame pointers, as its toolchain builds by default at -O2 (Rust:
// the release profile): "c" (nofp.c, with libz), "cxx", "rust", "signal"
// or "vdso". It skips the test (NeedRuntime) when the toolchain or
// zlib.h is missing.
func NoFP(tb testing.TB, name string) string {
	tb.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := "\x00nofp-" + name
	if p, ok := built[key]; ok {
		return p
	}
	ensureBuildDir(tb)
	out := filepath.Join(buildDir, "nofp-"+name)
	cmd, err := NoFPCommand(name, out)
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		NeedRuntime(tb, "%v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, b)
	}
	built[key] = out
	return out
}

// NoFPCommand is the command with which NoFP builds the program name into
// out, for a tool outside the tests (make cost). extraFlags go last, where
// they override: "-fno-omit-frame-pointer" builds the same C program with
// frame pointers, for comparison. When the toolchain or zlib.h is missing
// the error wraps exec.ErrNotFound or fs.ErrNotExist.
func NoFPCommand(name, out string, extraFlags ...string) (*exec.Cmd, error) {
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(self), "nofp")
	var tool string
	var args []string
	c := []string{"-x", "c", "-O2", "-fomit-frame-pointer", "-pthread"}
	switch name {
	case "c":
		if _, err := os.Stat("/usr/include/zlib.h"); err != nil {
			return nil, fmt.Errorf("no zlib.h (zlib1g-dev): %w", err)
		}
		tool, args = "gcc", append(c, filepath.Join(dir, "nofp.c"), "-lz")
	case "signal", "vdso":
		tool, args = "gcc", append(c, filepath.Join(dir, name+".c"))
	case "cxx":
		tool, args = "g++", []string{"-x", "c++", "-O2", "-pthread", filepath.Join(dir, "nofp.cc")}
	case "rust":
		tool, args = "rustc", []string{"-C", "opt-level=3", filepath.Join(dir, "nofp.rs")}
	default:
		return nil, fmt.Errorf("no nofp program %q", name)
	}
	if _, err := exec.LookPath(tool); err != nil {
		return nil, fmt.Errorf("%s not installed: %w", tool, err)
	}
	args = append(append(args, extraFlags...), "-o", out)
	return exec.Command(tool, args...), nil
}

// ChurnName is the executable name of the Churn program, by which a test
// selects its processes as targets.
const ChurnName = "perfprof-churn"

// Churn builds, once per test binary, the C program of
// internal/testchild/churn that starts and ends processes of itself many
// times a second, reusing their pids, and returns its path. See churn.c
// for its modes and output.
func Churn(tb testing.TB) string {
	tb.Helper()
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "churn", "churn.c")
	if _, err := exec.LookPath("gcc"); err != nil {
		NeedRuntime(tb, "gcc not installed: %v", err)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	const key = "\x00churn"
	if p, ok := built[key]; ok {
		return p
	}
	ensureBuildDir(tb)
	out := filepath.Join(buildDir, ChurnName)
	if b, err := exec.Command("gcc", "-O1", "-fno-omit-frame-pointer", "-pthread", "-o", out, src).CombinedOutput(); err != nil {
		tb.Fatalf("gcc %s: %v\n%s", src, err, b)
	}
	built[key] = out
	return out
}

// NodeForge builds, once per test binary, the C program of
// internal/testchild/otelctx_c/nodeforge.c, which publishes its spans as a
// Node.js 24 thread does (schema nodejs_v1_dev) with V8's objects forged
// in its own memory, well formed or malformed as its variant says, and
// returns its path. Run it as "PATH VARIANT"; see nodeforge.c for the
// variants, the functions that give the truth of each sample, and its
// output.
func NodeForge(tb testing.TB) string {
	tb.Helper()
	return gccOnce(tb, "nodeforge", func(src, out string) []string {
		// -fno-ipa-icf: the truth functions must stay apart even where
		// their code is the same.
		return []string{"-O2", "-Wall", "-fno-ipa-icf", "-I", src, "-o", out,
			filepath.Join(src, "nodeforge.c"), "-Wl,--export-dynamic-symbol=otel_thread_ctx_nodejs_v1"}
	})
}
