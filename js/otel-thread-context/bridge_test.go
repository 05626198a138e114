// Package otelthreadcontext runs the tests of the npm package
// @perfprof/otel-thread-context (this directory) from go test, so that
// make test runs them: node --test on Node.js 24, and the fallback test
// where AsyncContextFrame is missing (the machine's Node.js 20, and Node.js
// 24 with --no-async-context-frame).
package otelthreadcontext

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/testchild"
)

func pkgDir(t *testing.T) string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Dir(self)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@datadog", "pprof")); err != nil {
		testchild.NeedRuntime(t, "the package's dependencies are not installed in %s: run make node-deps (make test does): %v", dir, err)
	}
	return dir
}

// nodeTest runs node --test on files (relative to the package) and fails
// with its output unless every test passed.
func nodeTest(t *testing.T, dir, node string, env []string, files ...string) {
	t.Helper()
	cmd := exec.Command(node, append([]string{"--test", "--test-reporter=spec"}, files...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	done := make(chan struct{})
	timer := time.AfterFunc(5*time.Minute, func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	close(done)
	t.Logf("%s --test %s:\n%s", node, strings.Join(files, " "), out)
	if err != nil {
		t.Fatalf("node --test: %v", err)
	}
	if !strings.Contains(string(out), "ℹ fail 0") {
		t.Fatalf("node --test did not report 0 failures")
	}
}

// TestPackageNode24 runs the package's own tests (test/*.test.js) on
// Node.js 24.
func TestPackageNode24(t *testing.T) {
	node := testchild.Node24(t)
	dir := pkgDir(t)
	files, err := filepath.Glob(filepath.Join(dir, "test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no tests in %s/test: %v", dir, err)
	}
	for i, f := range files {
		files[i], _ = filepath.Rel(dir, f)
	}
	nodeTest(t, dir, node, nil, files...)
}

// TestFallbackNoAsyncContextFrame runs the fallback test on Node.js 24
// with AsyncContextFrame turned off.
func TestFallbackNoAsyncContextFrame(t *testing.T) {
	node := testchild.Node24(t)
	dir := pkgDir(t)
	nodeTest(t, dir, node, []string{"NODE_OPTIONS=--no-async-context-frame"}, filepath.Join("test", "fallback", "off.test.js"))
}

// TestFallbackMachineNode runs the fallback test on the machine's own
// Node.js (20), which has no AsyncContextFrame.
func TestFallbackMachineNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testchild.NeedRuntime(t, "no node on PATH: %v", err)
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", node, err)
	}
	v := strings.TrimSpace(string(out))
	major, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(v, "v"), ".", 2)[0])
	if major >= 22 {
		t.Skipf("the machine's Node.js is %s, which may have AsyncContextFrame: TestFallbackNoAsyncContextFrame covers the fallback", v)
	}
	dir := pkgDir(t)
	nodeTest(t, dir, node, nil, filepath.Join("test", "fallback", "off.test.js"))
}
