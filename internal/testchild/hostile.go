package testchild

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// HostileName is the executable name of the program Hostile builds.
const HostileName = "perfprof-hostile"

// HostileDepth is how deep the lexical blocks of hostile_nested's forged
// DWARF nest.
const HostileDepth = 100_000

// Hostile builds, once per test binary, the C program of
// internal/testchild/hostile (see hostile.c) into a directory of its own,
// and returns its path and that of the libjvm.so to run it with
// ("BIN LIBJVM"). Its DWARF is forged: hostile_nested is a subprogram of
// HostileDepth nested lexical blocks; it is stripped of its symbol table,
// and its .gnu_debuglink names perfprof-hostile.debug, which is a symbolic
// link to /dev/zero beside the binary and a FIFO in .debug/ beside it.
func Hostile(tb testing.TB) (bin, libjvm string) {
	tb.Helper()
	for _, tool := range []string{"gcc", "objcopy"} {
		if _, err := exec.LookPath(tool); err != nil {
			NeedRuntime(tb, "%s not installed: %v", tool, err)
		}
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	const key, libKey = "\x00hostile", "\x00hostile-libjvm"
	if p, ok := built[key]; ok {
		return p, built[libKey]
	}
	ensureBuildDir(tb)
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "hostile", "hostile.c")
	dir := filepath.Join(buildDir, "hostile")
	if err := os.MkdirAll(filepath.Join(dir, ".debug"), 0o755); err != nil {
		tb.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if b, err := exec.Command("gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", plain, src).CombinedOutput(); err != nil {
		tb.Fatalf("gcc %s: %v\n%s", src, err, b)
	}
	lo, hi := symbolRange(tb, plain, "hostile_nested")
	// Stripped of its symbol table (objcopy keeps .symtab unless told to
	// strip all), its line table kept.
	stripped := filepath.Join(dir, "stripped")
	if b, err := exec.Command("objcopy", "--strip-all", "--keep-section=.debug_line", plain, stripped).CombinedOutput(); err != nil {
		tb.Fatalf("objcopy --strip-all: %v\n%s", err, b)
	}
	var w DWARFWriter
	ForgeNestedBlocks(&w, "hostile_nested", lo, hi, HostileDepth)
	abbrev, info := w.Sections()
	forged := filepath.Join(dir, "forged")
	ReplaceDWARF(tb, stripped, forged, abbrev, info)

	// objcopy reads the debug file to put its CRC in the link: a real
	// file first, replaced by the traps once the link is in.
	out := filepath.Join(dir, HostileName)
	debug := filepath.Join(dir, HostileName+".debug")
	if err := os.WriteFile(debug, []byte("debug"), 0o644); err != nil {
		tb.Fatal(err)
	}
	if b, err := exec.Command("objcopy", "--add-gnu-debuglink="+debug, forged, out).CombinedOutput(); err != nil {
		tb.Fatalf("objcopy --add-gnu-debuglink: %v\n%s", err, b)
	}
	if err := os.Remove(debug); err != nil {
		tb.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", debug); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, ".debug", HostileName+".debug"), 0o644); err != nil {
		tb.Fatal(err)
	}
	libjvm = filepath.Join(dir, "libjvm.so")
	if err := os.WriteFile(libjvm, make([]byte, 4096), 0o644); err != nil {
		tb.Fatal(err)
	}
	built[key], built[libKey] = out, libjvm
	return out, libjvm
}

// ForgedGo builds, once per test binary, the burner (see
// internal/testchild/burner) with its DWARF replaced by forged Go runtime
// types (ForgeGoRuntimeTypes), named name, and returns its path.
func ForgedGo(tb testing.TB, name string) string {
	tb.Helper()
	if _, err := exec.LookPath("objcopy"); err != nil {
		NeedRuntime(tb, "objcopy not installed: %v", err)
	}
	burner := Build(tb, "burner")
	buildMu.Lock()
	defer buildMu.Unlock()
	key := "\x00forged-go\x00" + name
	if p, ok := built[key]; ok {
		return p
	}
	var w DWARFWriter
	ForgeGoRuntimeTypes(&w)
	abbrev, info := w.Sections()
	out := filepath.Join(buildDir, name)
	ReplaceDWARF(tb, burner, out, abbrev, info)
	built[key] = out
	return out
}

// symbolRange returns the address range of the function symbol name in
// the ELF file bin.
func symbolRange(tb testing.TB, bin, name string) (lo, hi uint64) {
	tb.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		tb.Fatalf("symbols of %s: %v", bin, err)
	}
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			return s.Value, s.Value + s.Size
		}
	}
	tb.Fatalf("%s: no function %s", bin, name)
	return 0, 0
}
