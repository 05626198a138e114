package testchild

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// DebianCargoRegistry is where Debian's librust-*-dev packages put crate
// sources; the Rust children build against it offline.
const DebianCargoRegistry = "/usr/share/cargo/registry"

// TokioCtx builds, once per test binary, the tokio workload of
// internal/testchild/tokioctx (a tokio service publishing each task's span
// as an OTEP 4947 thread context) with cargo, offline, against Debian's
// packaged crates (librust-tokio-dev), and returns its path. The cargo
// target directory is kept in the user's cache directory, so later runs
// only relink. Without cargo or the crates the test skips, or fails with
// PERFPROF_REQUIRE_RUNTIMES=1.
func TokioCtx(tb testing.TB) string {
	tb.Helper()
	cargo, err := exec.LookPath("cargo")
	if err != nil {
		home, _ := os.UserHomeDir()
		if p := filepath.Join(home, ".cargo", "bin", "cargo"); fileExists(p) {
			cargo = p
		} else {
			NeedRuntime(tb, "cargo not installed: %v", err)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(DebianCargoRegistry, "tokio-1.*")); len(m) == 0 {
		NeedRuntime(tb, "Debian's tokio crate is not in %s: apt-get install librust-tokio-dev", DebianCargoRegistry)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	const key = "\x00tokioctx"
	if p, ok := built[key]; ok {
		return p
	}
	ensureBuildDir(tb)
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "tokioctx")
	dir := filepath.Join(buildDir, "tokioctx-src")
	// Build a copy: cargo writes Cargo.lock (the versions Debian has) next
	// to Cargo.toml.
	copyFiles(tb, src, dir, "Cargo.toml", "build.rs", "ctx.c", "src/main.rs")
	config := "[source.crates-io]\nreplace-with = \"debian\"\n\n[source.debian]\ndirectory = \"" + DebianCargoRegistry + "\"\n\n[net]\noffline = true\n"
	writeFile(tb, filepath.Join(dir, ".cargo", "config.toml"), []byte(config))
	target := filepath.Join(buildDir, "tokioctx-target")
	if cache, err := os.UserCacheDir(); err == nil {
		target = filepath.Join(cache, "perfprof", "tokioctx-target")
	}
	cmd := exec.Command(cargo, "build", "--release", "--offline", "--quiet")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CARGO_TARGET_DIR="+target, "RUSTUP_AUTO_INSTALL=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("cargo build tokioctx: %v\n%s", err, strings.TrimSpace(string(b)))
	}
	out := filepath.Join(buildDir, "tokioctx")
	b, err := os.ReadFile(filepath.Join(target, "release", "tokioctx"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(out, b, 0o755); err != nil {
		tb.Fatal(err)
	}
	built[key] = out
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
