package symbolize

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/testchild"
	"golang.org/x/sys/unix"
)

// TestSeparateDebugFile: a binary stripped of its DWARF
// (objcopy --strip-debug --add-gnu-debuglink) gets file:line and inlined
// frames back from its debug file (objcopy --only-keep-debug), found next to
// it, in its .debug/ directory, under debugDir/DIR/, or by build id under
// debugDir/.build-id/; a debug file whose CRC does not match the debuglink
// is not used.
func TestSeparateDebugFile(t *testing.T) {
	for _, tool := range []string{"gcc", "objcopy"} {
		testchild.LookTool(t, tool)
	}
	dir := t.TempDir()
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	full := compileC(t, dir, "inl.c", inlineCSource, "full", "-O2", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id")
	// The debuglink names the debug file by its base name, prog.debug.
	debug := filepath.Join(dir, "prog.debug")
	stripped := filepath.Join(dir, "stripped")
	run("objcopy", "--only-keep-debug", full, debug)
	run("objcopy", "--strip-debug", "--add-gnu-debuglink="+debug, full, stripped)

	ef, err := elf.Open(stripped)
	if err != nil {
		t.Fatal(err)
	}
	id := buildID(ef)
	if ef.Section(".debug_info") != nil || ef.Section(".debug_line") != nil {
		t.Fatal("stripped binary still has DWARF")
	}
	ef.Close()
	if len(id) < 3 {
		t.Fatalf("no build id in %s", stripped)
	}

	callSq, callAcc := inlineCallLines(t)
	// inlined reports whether bin, run as a child, resolves an address of
	// work to sq inlined into acc inlined into work, with file and lines.
	inlined := func(t *testing.T, bin string) bool {
		t.Helper()
		ch := start(t, bin)
		p, _ := openProcess(t, ch.pid, Options{})
		found := false
		for off := range uint64(200) {
			fr := p.Lookup(ch.addr(t, "work") + off).Frames
			if len(fr) == 3 && fr[0].Function == "sq" && base(fr[0].File) == "inl.c" && fr[0].Line > 0 &&
				fr[1].Function == "acc" && fr[1].Line == callSq && base(fr[1].File) == "inl.c" &&
				fr[2].Function == "work" && fr[2].Line == callAcc && base(fr[2].File) == "inl.c" {
				found = true
			}
		}
		// Without the debug file only .symtab names work, without a line.
		if fr := p.Lookup(ch.addr(t, "work")).Frames; !found && (len(fr) != 1 || fr[0].Function != "work" || fr[0].Line != 0) {
			t.Errorf("without the debug file: %s, want work without line", fmtFrames(fr))
		}
		return found
	}

	// layout copies the stripped binary to BASE/bin/prog and the debug file
	// (or a corrupted copy of it) to BASE/REL ("BASE" in REL is replaced by
	// BASE), points debugDir at BASE/debug, and returns the binary.
	layout := func(t *testing.T, rel string, corrupt bool) string {
		t.Helper()
		base := t.TempDir()
		old := debugDir
		debugDir = filepath.Join(base, "debug")
		t.Cleanup(func() { debugDir = old })
		bin := filepath.Join(base, "bin", "prog")
		rel = strings.ReplaceAll(rel, "BASE", base)
		for _, c := range []struct{ from, to string }{{stripped, bin}, {debug, filepath.Join(base, rel)}} {
			data, err := os.ReadFile(c.from)
			if err != nil {
				t.Fatal(err)
			}
			if corrupt && c.from == debug {
				data = append(data, 0) // still an ELF file, but another CRC
			}
			if err := os.MkdirAll(filepath.Dir(c.to), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(c.to, data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return bin
	}

	for _, tc := range []struct {
		name, rel string
		corrupt   bool
		want      bool
	}{
		{"next-to-binary", "bin/prog.debug", false, true},
		{"dot-debug-dir", "bin/.debug/prog.debug", false, true},
		{"build-id", "debug/.build-id/" + id[:2] + "/" + id[2:] + ".debug", false, true},
		{"debugdir-path", "debug/BASE/bin/prog.debug", false, true},
		{"wrong-crc", "bin/prog.debug", true, false},
		{"none", "elsewhere/prog.debug", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := layout(t, tc.rel, tc.corrupt)
			if got := inlined(t, bin); got != tc.want {
				t.Errorf("debug file %s: inlined frames with lines = %v, want %v", tc.rel, got, tc.want)
			}
		})
	}
}

// TestDebugLinkHostileFiles: the file a binary's .gnu_debuglink names is
// the target's to make. A FIFO there (which blocked the open until a writer
// came) or a link to /dev/zero (whose CRC never ended) is passed over at
// once, and so is a FIFO at the build-id path.
func TestDebugLinkHostileFiles(t *testing.T) {
	for _, tool := range []string{"gcc", "objcopy"} {
		testchild.LookTool(t, tool)
	}
	dir := t.TempDir()
	full := compileC(t, dir, "inl.c", inlineCSource, "full", "-O2", "-g", "-Wl,--build-id")
	stripped := filepath.Join(dir, "stripped")
	if out, err := exec.Command("objcopy", "--strip-debug", "--add-gnu-debuglink="+full, full, stripped).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	ef, err := elf.Open(stripped)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	id := buildID(ef)
	// The debuglink names "full", looked for next to the binary: the real
	// one is moved away, a hostile file takes its place.
	if err := os.Rename(full, filepath.Join(dir, "elsewhere")); err != nil {
		t.Fatal(err)
	}
	old := debugDir
	debugDir = filepath.Join(dir, "debug")
	t.Cleanup(func() { debugDir = old })
	byID := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(byID), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(byID, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, mk := range map[string]func(string) error{
		"fifo":      func(p string) error { return unix.Mkfifo(p, 0o644) },
		"/dev/zero": func(p string) error { return os.Symlink("/dev/zero", p) },
	} {
		t.Run(strings.TrimPrefix(name, "/dev/"), func(t *testing.T) {
			link := filepath.Join(dir, "full")
			os.Remove(link)
			if err := mk(link); err != nil {
				t.Fatal(err)
			}
			done := make(chan bool, 1)
			rec := limits.NewRecorder(nil)
			go func() {
				df, f := openDebugFile(ef, id, 0, stripped, rec)
				if f != nil {
					f.Close()
				}
				done <- df != nil
			}()
			select {
			case found := <-done:
				if found {
					t.Errorf("a %s was taken as the debug file", name)
				}
				// The FIFO at the build-id path, and the file the link names.
				if n := rec.Counts()[limits.FileRefused]; n != 2 {
					t.Errorf("%d debug files refused, want 2 counted", n)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("looking for the debug file still waits on a %s after 5 s", name)
			}
		})
	}
}
