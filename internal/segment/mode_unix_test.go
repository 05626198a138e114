//go:build unix

package segment

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func perm(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// withUmask sets the process umask for the rest of the test.
func withUmask(t *testing.T, mask int) {
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

// TestFileMode: segments (active, sealed, compressed) have the file mode,
// 0600 by default, and the directories made for them the mode with x where
// r is, whatever the umask; a directory that exists keeps its mode.
func TestFileMode(t *testing.T) {
	for _, tt := range []struct {
		name           string
		mode, umask    os.FileMode
		wantF, wantDir os.FileMode
	}{
		{"default", 0, 0o022, 0o600, 0o700},
		{"default, open umask", 0, 0, 0o600, 0o700},
		{"0640 under umask 077", 0o640, 0o077, 0o640, 0o750},
		{"0664", 0o664, 0o022, 0o664, 0o775},
	} {
		t.Run(tt.name, func(t *testing.T) {
			withUmask(t, int(tt.umask))
			for _, compress := range []bool{false, true} {
				dir := filepath.Join(t.TempDir(), "a", "b")
				r, err := New(Options{Dir: dir, Prefix: "seg", FileMode: tt.mode, Compress: compress})
				if err != nil {
					t.Fatal(err)
				}
				if err := writeBatch(r, rotBatch(0, 3, 100, 5e9)); err != nil {
					t.Fatal(err)
				}
				if got := perm(t, filepath.Join(dir, "seg.0.bin.active")); got != tt.wantF {
					t.Errorf("active segment: mode %#o, want %#o", got, tt.wantF)
				}
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
				sealed := "seg.0.bin"
				if compress {
					sealed += ".gz"
				}
				if got := perm(t, filepath.Join(dir, sealed)); got != tt.wantF {
					t.Errorf("%s: mode %#o, want %#o", sealed, got, tt.wantF)
				}
				for _, d := range []string{dir, filepath.Dir(dir)} {
					if got := perm(t, d); got != tt.wantDir {
						t.Errorf("directory %s: mode %#o, want %#o", d, got, tt.wantDir)
					}
				}
			}
		})
	}
}

// TestFileModeExisting: a directory that exists keeps its mode, and a .gz
// left by an interrupted compression, rewritten, gets the file mode.
func TestFileModeExisting(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, _ := crashedSegment(t, 2, 3)
	if err := os.WriteFile(filepath.Join(dir, "seg.2.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "seg.2.bin.gz"), []byte{0x1f, 0x8b}, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{Dir: dir, Prefix: "seg", Compress: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := perm(t, dir); got != 0o755 {
		t.Errorf("existing directory: mode %#o, want 0755 kept", got)
	}
	if got := perm(t, filepath.Join(dir, "seg.2.bin.gz")); got != 0o600 {
		t.Errorf("rewritten .gz: mode %#o, want 0600", got)
	}
}

func TestFileModeRefused(t *testing.T) {
	for _, m := range []os.FileMode{0o1600, 0o400, 0o200, 0o077, os.ModeSetuid | 0o600} {
		if _, err := New(Options{Dir: t.TempDir(), Prefix: "seg", FileMode: m}); err == nil {
			t.Errorf("mode %#o accepted", uint32(m))
		}
	}
}
