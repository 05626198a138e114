package unwind

import (
	"encoding/binary"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/testchild"
)

const ehframeC = `volatile unsigned long sink;
__attribute__((noinline)) unsigned long leaf(unsigned long x) {
	for (unsigned long i = 0; i < 1000; i++) x = x * 3 + 1;
	return x;
}
__attribute__((noinline)) unsigned long mid(unsigned long n) {
	unsigned long s = leaf(n);
	sink += s;
	return s + 1;
}
int main(void) { sink = mid(sink); return 0; }
`

// buildC builds ehframeC into bin with gcc and flags.
func buildC(t *testing.T, bin string, flags ...string) string {
	t.Helper()
	gcc := exec.Command("gcc", append(flags, "-x", "c", "-o", bin, "-")...)
	gcc.Stdin = strings.NewReader(ehframeC)
	if out, err := gcc.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// TestEHFrameCFA checks the CFA rows read from gcc's .eh_frame: a leaf
// without a frame has its return address at [rsp] throughout; a function
// with a frame only at its first instruction.
func TestEHFrameCFA(t *testing.T) {
	testchild.LookTool(t, "gcc")
	bin := buildC(t, filepath.Join(t.TempDir(), "x"), "-O2", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer")
	ef, tab := tableOf(t, bin)
	syms, _ := ef.Symbols()
	found := 0
	for _, s := range syms {
		switch s.Name {
		case "leaf":
			found++
			for pc := s.Value; pc < s.Value+s.Size; pc++ {
				if yes, known := tab.AtSP(pc); !yes || !known {
					t.Fatalf("leaf+%#x: atSP %v known %v, want true true", pc-s.Value, yes, known)
				}
			}
		case "mid":
			found++
			if yes, known := tab.AtSP(s.Value); !yes || !known {
				t.Fatalf("mid entry: atSP %v known %v", yes, known)
			}
			if yes, known := tab.AtSP(s.Value + 1); yes || !known { // after push %rbp (1 byte)
				t.Fatalf("mid+1: atSP %v known %v, want false true", yes, known)
			}
		}
	}
	if found != 2 {
		t.Fatalf("found %d of leaf, mid", found)
	}
	if yes, known := tab.AtSP(1); yes || known {
		t.Fatal("address 1 is known")
	}
}

// TestParseEHFrameGarbage feeds damaged sections: no panic, no table from
// nothing.
func TestParseEHFrameGarbage(t *testing.T) {
	for _, d := range [][]byte{
		nil,
		{0xff, 0xff, 0xff, 0xff},
		{8, 0, 0, 0, 0, 0, 0, 0, 1, 'z'},
		{16, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 0x10, 0xff},
		{12, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	} {
		tab, _ := compileEHFrame(d, 0x1000, binary.LittleEndian)
		if tab != nil && len(tab.rows) > 0 {
			t.Errorf("%x: table from garbage", d)
		}
	}
}
