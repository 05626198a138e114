package testchild

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Forge returns a copy of the binary bin with sections changed by objcopy,
// as a hostile target could ship it: secs maps a section's name to its new
// bytes (an existing section is replaced, another added), and the sections
// named in remove are left out. Without objcopy the test ends through
// Unavailable.
func Forge(tb testing.TB, bin string, secs map[string][]byte, remove ...string) string {
	tb.Helper()
	LookTool(tb, "objcopy")
	ef, err := elf.Open(bin)
	if err != nil {
		tb.Fatal(err)
	}
	defer ef.Close()
	dir := tb.TempDir()
	var args []string
	for _, name := range remove {
		args = append(args, "--remove-section="+name)
	}
	for name, b := range secs {
		f := filepath.Join(dir, "section"+strings.ReplaceAll(name, "/", "_"))
		if err := os.WriteFile(f, b, 0o644); err != nil {
			tb.Fatal(err)
		}
		op := "--add-section="
		if ef.Section(name) != nil {
			op = "--update-section="
		}
		args = append(args, op+name+"="+f)
	}
	out := filepath.Join(dir, filepath.Base(bin)+".forged")
	if b, err := exec.Command("objcopy", append(args, bin, out)...).CombinedOutput(); err != nil {
		tb.Fatalf("objcopy: %v\n%s", err, b)
	}
	return out
}

// ZDebug returns a section in GNU's compressed format (.zdebug_*: "ZLIB",
// the size inflated, big endian, then a zlib stream) that inflates to n
// zero bytes: a thousandth of that on disk.
func ZDebug(tb testing.TB, n int) []byte {
	tb.Helper()
	var b bytes.Buffer
	b.WriteString("ZLIB")
	binary.Write(&b, binary.BigEndian, uint64(n))
	w, err := zlib.NewWriterLevel(&b, zlib.BestCompression)
	if err != nil {
		tb.Fatal(err)
	}
	zero := make([]byte, 1<<20)
	for n > 0 {
		k := min(n, len(zero))
		w.Write(zero[:k])
		n -= k
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}
