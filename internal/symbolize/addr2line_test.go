package symbolize

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/perfprof/perfprof/internal/testchild"
)

// Native programs for the addr2line agreement tests. Each prints the
// addresses of a few functions, then "ready", and waits on stdin.

const inlineCSource = `#include <stdio.h>
#include <unistd.h>

static inline __attribute__((always_inline)) long sq(long x)
{
	return x * x + (x >> 3);
}

static inline __attribute__((always_inline)) long acc(long n)
{
	long s = 0;
	for (long i = 0; i < n; i++)
		s += sq(i) ^ i; // call sq
	return s;
}

__attribute__((noinline)) long work(long n)
{
	long t = 0;
	for (long j = 0; j < n; j++)
		t += acc(j + n) * 3; // call acc
	return t;
}

int main(void)
{
	printf("work %p\n", (void *)work);
	printf("ready\n");
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	return (int)work(3);
}
`

const cxxSource = `#include <cstdio>
#include <unistd.h>
#include <vector>

namespace geo {
template <typename T> struct Vec {
	T x, y;
	T dot(const Vec &o) const { return x * o.x + y * o.y; }
};

template <typename T> __attribute__((noinline)) T total(const std::vector<Vec<T>> &v)
{
	T s = 0;
	for (const auto &a : v)
		s += a.dot(a);
	return s;
}

namespace detail {
__attribute__((noinline)) int scale(int k) { return k * 7 + 1; }
} // namespace detail
} // namespace geo

int main()
{
	std::vector<geo::Vec<int>> vi{{1, 2}, {3, 4}};
	std::vector<geo::Vec<double>> vd{{1.5, 2}, {3, 4}};
	std::printf("total_int %p\n", (void *)&geo::total<int>);
	std::printf("scale %p\n", (void *)&geo::detail::scale);
	std::printf("ready\n");
	std::fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	return geo::total(vi) + (int)geo::total(vd) + geo::detail::scale(2);
}
`

const rustSource = `use std::io::Read;

mod shapes {
    pub struct Circle {
        pub r: f64,
    }

    impl Circle {
        #[inline(never)]
        pub fn area(&self) -> f64 {
            3.14159 * self.r * self.r
        }
    }

    #[inline(never)]
    pub fn sum<T: Copy + std::ops::Add<Output = T>>(v: &[T], z: T) -> T {
        let mut s = z;
        for x in v {
            s = s + *x;
        }
        s
    }
}

fn main() {
    let c = shapes::Circle { r: 2.0 };
    println!("area {:p}", shapes::Circle::area as *const ());
    println!("ready");
    let mut b = [0u8; 1];
    while std::io::stdin().read(&mut b).map(|n| n > 0).unwrap_or(false) {}
    std::process::exit((c.area() as i32 + shapes::sum(&[1, 2, 3], 0)) & 1);
}
`

// nativeBuild is one program of the agreement test.
type nativeBuild struct {
	name string
	src  string // file name in the build directory
	code string
	cmd  []string // compiler and flags, before -o OUT SRC
}

var nativeBuilds = []nativeBuild{
	{"c-O2-g", "inl.c", inlineCSource, []string{"gcc", "-O2", "-g", "-fno-omit-frame-pointer"}},
	{"c-O0-g", "prog.c", cSource, []string{"gcc", "-O0", "-g", "-fno-omit-frame-pointer"}},
	{"c-nog", "prog.c", cSource, []string{"gcc", "-O1", "-fno-omit-frame-pointer"}},
	{"cxx-O1-g", "prog.cc", cxxSource, []string{"g++", "-O1", "-g", "-fno-omit-frame-pointer"}},
	{"rust", "rsprog.rs", rustSource, []string{"rustc", "-g", "-C", "opt-level=1", "-C", "force-frame-pointers=yes"}},
}

var (
	nativeOnce sync.Once
	nativeBins map[string]string // name → path; missing when not built
	nativeErr  error
	rustSkip   string // why the Rust program was not built
)

// buildNative builds the native programs once, in parallel. The Rust one is
// left out, with a reason in rustSkip, when rustc is not installed.
func buildNative(tb testing.TB) map[string]string {
	tb.Helper()
	nativeOnce.Do(func() {
		dir := filepath.Join(buildDir, "native")
		nativeBins = map[string]string{}
		if nativeErr = os.MkdirAll(dir, 0o755); nativeErr != nil {
			return
		}
		cmds := map[string]*exec.Cmd{}
		for _, nb := range nativeBuilds {
			args := slicesClone(nb.cmd)
			if args[0] == "rustc" {
				rustc, err := exec.LookPath("rustc")
				if err != nil {
					rustc = "/root/.cargo/bin/rustc"
					if _, err := os.Stat(rustc); err != nil {
						rustSkip = "rustc not installed"
						continue
					}
				}
				args[0] = rustc
			}
			src := filepath.Join(dir, nb.src)
			if err := os.WriteFile(src, []byte(nb.code), 0o644); err != nil {
				nativeErr = err
				return
			}
			out := filepath.Join(dir, nb.name)
			cmds[nb.name] = exec.Command(args[0], append(args[1:], "-o", out, src)...)
			cmds[nb.name].Dir = dir
			nativeBins[nb.name] = out
		}
		nativeErr = runBuilds(cmds)
	})
	if nativeErr != nil {
		tb.Fatal(nativeErr)
	}
	return nativeBins
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// sampleAddrs returns up to max addresses, spread evenly over the bytes of
// the sized function symbols of symFile in executable sections.
func sampleAddrs(tb testing.TB, symFile string, max int) []uint64 {
	tb.Helper()
	ef, err := elf.Open(symFile)
	if err != nil {
		tb.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil || len(syms) == 0 {
		syms, err = ef.DynamicSymbols()
		if err != nil {
			tb.Fatal(err)
		}
	}
	seen := map[uint64]bool{}
	var all []uint64
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Value == 0 || seen[s.Value] ||
			int(s.Section) >= len(ef.Sections) || ef.Sections[s.Section].Flags&elf.SHF_EXECINSTR == 0 {
			continue
		}
		seen[s.Value] = true
		for off := range s.Size {
			all = append(all, s.Value+off)
		}
	}
	if len(all) <= max {
		return all
	}
	out := make([]uint64, 0, max)
	for i := range max {
		out = append(out, all[i*len(all)/max])
	}
	return out
}

// addr2lineInlined runs one addr2line -a -f -i -C for addrs in bin and
// returns the frames of each, innermost first.
func addr2lineInlined(tb testing.TB, bin string, addrs []uint64) [][]Frame {
	tb.Helper()
	out, err := exec.Command(testchild.LookTool(tb, "addr2line"), inlinedArgs(bin, addrs)...).Output()
	if err != nil {
		tb.Fatalf("addr2line: %v", err)
	}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	res, err := parseInlined(lines, addrs, func(l string) string { return l }, binutilsPos)
	if err != nil {
		tb.Fatalf("addr2line %v", err)
	}
	return res
}

// sameFrames compares frames by function name and file basename and line at
// every level.
//
// One narrow normalization: for an address with neither DWARF function nor
// line row, binutils names as file the STT_FILE symbol that precedes the
// function symbol in .symtab (elf_find_function). For Rust that is the
// codegen unit, "rustc_demangle.c5a78273c295e539-cgu.0", which is no source
// file; we leave File empty there. So a frame of ours without file and line
// matches an addr2line frame without line whose file is a Rust codegen unit.
func sameFrames(got, want []Frame) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.File == "" && g.Line == 0 && w.Line == 0 && rustCGU.MatchString(w.File) {
			w.File = ""
		}
		if g.Function != w.Function || g.Line != w.Line || base(g.File) != base(w.File) {
			return false
		}
	}
	return true
}

// rustCGU matches the name rustc gives a codegen unit: CRATE.HASH-cgu.N.
var rustCGU = regexp.MustCompile(`^[A-Za-z0-9_]+\.[0-9a-f]{16}-cgu\.[0-9]+$`)

func base(f string) string {
	if f == "" {
		return ""
	}
	return filepath.Base(f)
}

func fmtFrames(fs []Frame) string {
	var b strings.Builder
	for i, f := range fs {
		if i > 0 {
			b.WriteString(" <- ")
		}
		fmt.Fprintf(&b, "%s@%s:%d", f.Function, base(f.File), f.Line)
	}
	return b.String()
}

// euAddr2lineInlined runs elfutils' eu-addr2line -a -f -i -C for addrs in
// bin, the second, independent oracle, and returns the frames of each,
// innermost first. It returns nil with the reason when eu-addr2line is not
// installed (the Makefile's test prerequisites install it); the test installs
// nothing itself.
func euAddr2lineInlined(tb testing.TB, bin string, addrs []uint64) ([][]Frame, string) {
	tb.Helper()
	eu, err := exec.LookPath("eu-addr2line")
	if err != nil {
		return nil, "eu-addr2line not installed (apt-get install elfutils): second oracle skipped"
	}
	out, err := exec.Command(eu, inlinedArgs(bin, addrs)...).Output()
	if err != nil {
		return nil, fmt.Sprintf("eu-addr2line: %v: second oracle skipped", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	// "sq inlined at inl.c:13:10 in acc" for inlined frames.
	fn := func(l string) string {
		fn, _, _ := strings.Cut(l, " inlined at ")
		return fn
	}
	// FILE:LINE[:COLUMN], ??:0 when unknown.
	pos := func(pos string) string {
		if j := strings.LastIndexByte(pos, ':'); j >= 0 {
			if k := strings.LastIndexByte(pos[:j], ':'); k >= 0 {
				if _, err := strconv.Atoi(pos[k+1 : j]); err == nil {
					return pos[:j] // drop the column
				}
			}
		}
		return pos
	}
	res, err := parseInlined(lines, addrs, fn, pos)
	if err != nil {
		return nil, fmt.Sprintf("eu-addr2line %v: second oracle skipped", err)
	}
	return res, ""
}

// agreement resolves addrs (ELF vaddrs of the file mapped at path) in
// process p and compares with addr2line (binutils) on refFile, and with
// eu-addr2line (elfutils) when it is installed; names only when namesOnly.
// An address agrees when our frames match either oracle: each has bugs of
// its own (binutils 2.40 names the wrong file for some DWARF 5 rows of
// glibc, where objdump --dwarf=decodedline, elfutils and we agree; and among
// aliases at one address binutils takes the last in .symtab, where perf and
// elfutils take the first, as we do). eu-addr2line does not demangle Rust
// v0 names, so for Rust it rarely helps. It logs the disagreements and
// returns the share that agrees.
func agreement(t *testing.T, p *Process, pid int, path, refFile string, addrs []uint64, namesOnly bool) float64 {
	t.Helper()
	bias := loadBias(t, pid, path)
	want := addr2lineInlined(t, refFile, addrs)
	want2, why := euAddr2lineInlined(t, refFile, addrs)
	if why != "" {
		t.Log(why)
	}
	same := func(got, want []Frame) bool {
		if namesOnly {
			return len(got) > 0 && len(want) > 0 && got[0].Function == want[0].Function
		}
		return sameFrames(got, want)
	}
	// As a report does: the units of all the addresses are decoded in
	// one pass over .debug_info.
	pcs := make([]uint64, len(addrs))
	for i, a := range addrs {
		pcs[i] = a + bias
	}
	p.Prepare(pcs)
	agree, onlyEU, logged := 0, 0, 0
	for i, a := range addrs {
		got := p.Lookup(a + bias).Frames
		if same(got, want[i]) {
			agree++
			continue
		}
		if want2 != nil && same(got, want2[i]) {
			agree++
			if onlyEU++; onlyEU <= 10 {
				t.Logf("%#x: %s agrees with eu-addr2line, not with addr2line %s", a, fmtFrames(got), fmtFrames(want[i]))
			}
			continue
		}
		if logged++; logged <= 20 {
			eu := "-"
			if want2 != nil {
				eu = fmtFrames(want2[i])
			}
			t.Logf("%#x: got %s, addr2line %s, eu-addr2line %s", a, fmtFrames(got), fmtFrames(want[i]), eu)
		}
	}
	t.Logf("%d of %d addresses agree with addr2line, %d more with eu-addr2line only", agree-onlyEU, len(addrs), onlyEU)
	return float64(agree) / float64(len(addrs))
}

// TestAddr2lineAgreement resolves a few hundred addresses of each native
// program (and of its libc) and requires that ≥ 99% agree with
// addr2line -f -i -C (binutils), or with eu-addr2line -f -i -C (elfutils)
// when it is installed, at every inline level.
func TestAddr2lineAgreement(t *testing.T) {
	bins := buildNative(t)
	for _, nb := range nativeBuilds {
		t.Run(nb.name, func(t *testing.T) {
			bin, ok := bins[nb.name]
			if !ok {
				testchild.NeedRuntime(t, "%s", rustSkip)
			}
			ch := start(t, bin)
			p, _ := openProcess(t, ch.pid, Options{})
			addrs := sampleAddrs(t, bin, 500)
			r := agreement(t, p, ch.pid, bin, bin, addrs, false)
			t.Logf("%s: %.2f%% of %d addresses agree with addr2line", nb.name, 100*r, len(addrs))
			want := 0.99
			if r < want {
				t.Errorf("%s: %.2f%% agreement, want ≥ %.0f%%", nb.name, 100*r, 100*want)
			}
		})
	}

	t.Run("libc", func(t *testing.T) {
		ch := start(t, bins["c-O0-g"])
		p, _ := openProcess(t, ch.pid, Options{})
		var libc *Mapping
		for _, m := range p.Mappings() {
			if strings.HasPrefix(filepath.Base(m.Path), "libc.so") {
				libc = m
			}
		}
		if libc == nil {
			t.Fatal("no libc mapping")
		}
		ref, namesOnly := libc.Path, true
		if id := libc.BuildID; len(id) > 2 {
			dbg := filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
			if _, err := os.Stat(dbg); err == nil {
				ref, namesOnly = dbg, false
			}
		}
		if namesOnly {
			t.Logf("no debug file for libc %s: comparing names only, with addr2line on libc itself", libc.BuildID)
		}
		addrs := sampleAddrs(t, ref, 500)
		r := agreement(t, p, ch.pid, libc.Path, ref, addrs, namesOnly)
		t.Logf("libc (%s, reference %s): %.2f%% of %d addresses agree with addr2line", libc.Path, ref, 100*r, len(addrs))
		if r < 0.99 {
			t.Errorf("libc: %.2f%% agreement, want ≥ 99%%", 100*r)
		}
	})
}

// TestInlinedC: somewhere in work, sq is inlined into acc, inlined into
// work; the frames come innermost first with the call lines.
func TestInlinedC(t *testing.T) {
	bin := buildNative(t)["c-O2-g"]
	ch := start(t, bin)
	p, _ := openProcess(t, ch.pid, Options{})
	callSq, callAcc := inlineCallLines(t)
	found := 0
	for off := range uint64(200) {
		fr := p.Lookup(ch.addr(t, "work") + off).Frames
		if len(fr) != 3 || fr[0].Function != "sq" {
			continue
		}
		found++
		if fr[1].Function != "acc" || fr[1].Line != callSq || fr[2].Function != "work" || fr[2].Line != callAcc ||
			base(fr[1].File) != "inl.c" || base(fr[2].File) != "inl.c" {
			t.Errorf("work+%d: %s, want sq <- acc@inl.c:%d <- work@inl.c:%d", off, fmtFrames(fr), callSq, callAcc)
		}
	}
	if found == 0 {
		t.Fatal("no address of work resolves to sq inlined into acc inlined into work")
	}
}

// TestDemangle: C++ and Rust names are demangled, SystemName stays mangled.
func TestDemangle(t *testing.T) {
	bins := buildNative(t)
	check := func(bin, fn string, ok func(Frame) bool) {
		ch := start(t, bin)
		p, _ := openProcess(t, ch.pid, Options{})
		fr := p.Lookup(ch.addr(t, fn)).Frames
		if len(fr) == 0 || !ok(fr[len(fr)-1]) {
			t.Errorf("%s in %s: %+v", fn, bin, fr)
		}
	}
	check(bins["cxx-O1-g"], "total_int", func(f Frame) bool {
		return strings.HasPrefix(f.Function, "int geo::total<int>(std::vector<geo::Vec<int>") &&
			strings.HasPrefix(f.SystemName, "_ZN3geo5totalIiEE")
	})
	check(bins["cxx-O1-g"], "scale", func(f Frame) bool {
		return f.Function == "geo::detail::scale(int)" && f.SystemName == "_ZN3geo6detail5scaleEi"
	})
	if bin, ok := bins["rust"]; ok {
		check(bin, "area", func(f Frame) bool {
			return strings.Contains(f.Function, "shapes::Circle") && strings.HasSuffix(f.Function, "::area") &&
				!strings.Contains(f.Function, "::h") && (strings.HasPrefix(f.SystemName, "_ZN") || strings.HasPrefix(f.SystemName, "_R"))
		})
	} else {
		t.Log(rustSkip)
	}
	for mangled, want := range map[string]string{
		"_ZN4core3ptr13drop_in_place17h0123456789abcdefE": "core::ptr::drop_in_place",
		"_RNvCs1234_7mycrate3foo":                         "mycrate::foo",
		"burn_a":                                          "burn_a",
		// Fixed in our copy of the v0 demangler (as c++filt -i prints them):
		// nested closures, a unit type argument, a variant constructor.
	} {
		if got := demangleName(mangled); got != want {
			t.Errorf("demangleName(%q) = %q, want %q", mangled, got, want)
		}
	}
}
