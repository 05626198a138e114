package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestParseMaps(t *testing.T) {
	const maps = `55d1c2a00000-55d1c2a01000 r--p 00000000 fe:01 1049122                    /usr/bin/prog
55d1c2a01000-55d1c2a02000 r-xp 00001000 fe:01 1049122                    /usr/bin/prog
7f1c3c600000-7f1c3c628000 r--p 00000000 103:02 3158                      /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c3c628000-7f1c3c7bd000 r-xp 00028000 103:02 3158                      /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c3c800000-7f1c3c801000 r-xp 00002000 00:1f 77                         /tmp/my dir/lib x.so (deleted)
7f1c3c900000-7f1c3c910000 rwxp 00000000 00:00 0 
7ffd4c5e7000-7ffd4c5e9000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
`
	got, err := parseMaps([]byte(maps))
	if err != nil {
		t.Fatal(err)
	}
	want := []*Mapping{
		{Start: 0x55d1c2a01000, Limit: 0x55d1c2a02000, Offset: 0x1000, Path: "/usr/bin/prog", Dev: 0xfe01, Inode: 1049122},
		{Start: 0x7f1c3c628000, Limit: 0x7f1c3c7bd000, Offset: 0x28000, Path: "/usr/lib/x86_64-linux-gnu/libc.so.6", Dev: 0x10302, Inode: 3158},
		{Start: 0x7f1c3c800000, Limit: 0x7f1c3c801000, Offset: 0x2000, Path: "/tmp/my dir/lib x.so", Deleted: true, Dev: 0x1f, Inode: 77},
		{Start: 0x7f1c3c900000, Limit: 0x7f1c3c910000},
		{Start: 0x7ffd4c5e7000, Limit: 0x7ffd4c5e9000, Path: "[vdso]"},
		{Start: 0xffffffffff600000, Limit: 0xffffffffff601000, Path: "[vsyscall]"},
	}
	if !reflect.DeepEqual(got, want) {
		for i := range max(len(got), len(want)) {
			var g, w *Mapping
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("mapping %d:\n got %+v\nwant %+v", i, g, w)
			}
		}
	}

	for _, bad := range []string{
		"55d1c2a00000 r-xp 00000000 fe:01 1 /x\n",
		"55d1c2a00000-55d1c2a01000 r-xp 00000000 fe:01\n",
		"zz-55d1c2a01000 r-xp 00000000 fe:01 1 /x\n",
		"2000-1000 r-xp 00000000 fe:01 1 /x\n",
		"1000-2000 r-x 00000000 fe:01 1 /x\n",
		"1000-2000 r-xp 0000q000 fe:01 1 /x\n",
		"1000-2000 r-xp 00000000 fe01 1 /x\n",
		"1000-2000 r-xp 00000000 fe:01 -1 /x\n",
	} {
		if _, err := parseMaps([]byte(bad)); err == nil {
			t.Errorf("parseMaps(%q) succeeded", bad)
		}
	}
	if m, err := parseMaps(nil); err != nil || len(m) != 0 {
		t.Errorf("parseMaps(nil) = %v, %v", m, err)
	}
}

func FuzzParseMaps(f *testing.F) {
	f.Add([]byte("55d1c2a01000-55d1c2a02000 r-xp 00001000 fe:01 1049122   /usr/bin/prog\n"))
	f.Add([]byte("1-2 --xp 0 0:0 0\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		maps, err := parseMaps(data)
		if err != nil {
			return
		}
		for _, m := range maps {
			if m.Limit < m.Start {
				t.Errorf("mapping %v ends before it starts", m)
			}
		}
	})
}

func TestSymtab(t *testing.T) {
	fn := func(name string, value, size uint64, bind elf.SymBind) elf.Symbol {
		return elf.Symbol{Name: name, Value: value, Size: size, Info: elf.ST_INFO(bind, elf.STT_FUNC), Section: 1}
	}
	syms := []elf.Symbol{
		fn("outer", 0x1000, 0x100, elf.STB_GLOBAL),
		fn("inner", 0x1040, 0x10, elf.STB_LOCAL), // nested in outer
		fn("__nanosleep", 0x2000, 0x20, elf.STB_GLOBAL),
		fn("nanosleep", 0x2000, 0x20, elf.STB_WEAK),
		fn("__libc_nanosleep", 0x2000, 0x20, elf.STB_GLOBAL),
		fn("label", 0x3000, 0, elf.STB_LOCAL), // no size: up to the next symbol
		fn("sized", 0x3100, 0x10, elf.STB_GLOBAL),
		fn("ifunc", 0x4000, 0x10, elf.STB_GLOBAL),
		fn("undef", 0, 0, elf.STB_GLOBAL),
		{Name: "data", Value: 0x5000, Size: 0x100, Info: elf.ST_INFO(elf.STB_GLOBAL, elf.STT_OBJECT), Section: 1},
		{Name: "import", Value: 0x6000, Info: elf.ST_INFO(elf.STB_GLOBAL, elf.STT_FUNC), Section: elf.SHN_UNDEF},
	}
	syms[7].Info = elf.ST_INFO(elf.STB_GLOBAL, elf.STT_GNU_IFUNC)
	loads := []elf.ProgHeader{{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Vaddr: 0x1000, Memsz: 0x5000}}
	st := newSymtab(syms, loads)
	for _, tc := range []struct {
		addr uint64
		want string // "" for unresolved
	}{
		{0xfff, ""},
		{0x1000, "outer"},
		{0x1040, "inner"},
		{0x104f, "inner"},
		{0x1050, "outer"}, // past inner, still in outer
		{0x10ff, "outer"},
		{0x1100, ""},                 // past outer's size
		{0x2010, "__libc_nanosleep"}, // global, as few underscores, longest
		{0x2020, ""},
		{0x3000, "label"},
		{0x30ff, "label"},
		{0x3100, "sized"},
		{0x3110, ""},
		{0x4008, "ifunc"},
		{0x5000, ""},
		{0x6000, ""},
	} {
		s, ok := st.lookup(tc.addr)
		if ok != (tc.want != "") || s.name != tc.want {
			t.Errorf("lookup(%#x) = %q, %v; want %q", tc.addr, s.name, ok, tc.want)
		}
	}
	if newSymtab(syms[8:], loads) != nil {
		t.Error("a table of no functions is not nil")
	}
}

func TestFindNote(t *testing.T) {
	note := func(name string, typ uint32, desc []byte) []byte {
		var b bytes.Buffer
		binary.Write(&b, binary.LittleEndian, [3]uint32{uint32(len(name) + 1), uint32(len(desc)), typ})
		b.WriteString(name + "\x00")
		for b.Len()%4 != 0 {
			b.WriteByte(0)
		}
		b.Write(desc)
		for b.Len()%4 != 0 {
			b.WriteByte(0)
		}
		return b.Bytes()
	}
	d := append(note("GNU", 1, []byte{1, 2, 3, 4, 5}), note("GNU", 3, []byte{0xab, 0xcd, 0xef})...)
	if got, ok := findNote(d, binary.LittleEndian, "GNU", 3); !ok || !bytes.Equal(got, []byte{0xab, 0xcd, 0xef}) {
		t.Errorf("findNote = %x, %v", got, ok)
	}
	if _, ok := findNote(d, binary.LittleEndian, "Go", 4); ok {
		t.Error("found a note that is not there")
	}
	for i := range d {
		findNote(d[:i], binary.LittleEndian, "GNU", 3) // must not panic
	}
	huge := note("GNU", 3, nil)
	binary.LittleEndian.PutUint32(huge[4:], 0xffffffff)
	if _, ok := findNote(huge, binary.LittleEndian, "GNU", 3); ok {
		t.Error("found a note with an impossible size")
	}
}

func TestParseKallsyms(t *testing.T) {
	const kallsyms = "ffffffff81000000 T _text\n" +
		"ffffffff81000100 t helper\n" +
		"ffffffff81000100 T helper_alias\n" +
		"ffffffff82000000 D some_data\n" +
		"ffffffff81000200 W weak_fn\n" +
		"ffffffffc0a01000 t mod_fn\t[mymod]\n"
	dir := t.TempDir()
	path := filepath.Join(dir, "kallsyms")
	if err := os.WriteFile(path, []byte(kallsyms), 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := loadKernel(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pc   uint64
		want string
	}{
		{0xffffffff80ffffff, ""},
		{0xffffffff81000000, "_text"},
		{0xffffffff810000ff, "_text"},
		{0xffffffff81000180, "helper"},
		{0xffffffff81000200, "weak_fn"},
		{0xffffffffc0a01010, "mod_fn"},
		{0xffffffffc0a01000 + lastKernelSymbolSize, ""},
	} {
		f, ok := k.Lookup(tc.pc)
		if ok != (tc.want != "") || f.Function != tc.want || f.SystemName != tc.want {
			t.Errorf("Lookup(%#x) = %+v, %v; want %q", tc.pc, f, ok, tc.want)
		}
	}

	hidden := filepath.Join(dir, "hidden")
	if err := os.WriteFile(hidden, []byte("0000000000000000 T _text\n0000000000000000 t helper\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k, err = loadKernel(hidden)
	if !errors.Is(err, ErrKernelAddressesHidden) || k == nil {
		t.Fatalf("loadKernel(hidden) = %v, %v", k, err)
	}
	if _, ok := k.Lookup(0xffffffff81000000); ok {
		t.Error("a hidden kernel resolved an address")
	}

	if err := os.WriteFile(hidden, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadKernel(hidden); err == nil || errors.Is(err, ErrKernelAddressesHidden) {
		t.Errorf("loadKernel(garbage) = %v", err)
	}
}

// TestCorruptELF feeds damaged copies of the test binaries through the whole
// path (headers, parse, lookups): no panic, whatever comes out.
func TestCorruptELF(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, variant := range []string{"c-g", "go-strip"} {
		orig, err := os.ReadFile(build(t, variant))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 60 {
			data := bytes.Clone(orig)
			switch i % 3 {
			case 0: // truncated
				data = data[:r.IntN(len(data))]
			case 1: // bytes overwritten in the headers and tables at the end
				for range 50 {
					data[r.IntN(len(data))] = byte(r.Uint32())
				}
				for range 20 {
					data[len(data)-1-r.IntN(min(len(data), 8192))] = byte(r.Uint32())
				}
			case 2: // a block zeroed or smeared
				at := r.IntN(len(data))
				n := min(len(data)-at, 1+r.IntN(4096))
				for j := range n {
					data[at+j] = byte(j * i)
				}
			}
			c := NewCache(Options{})
			b, err := openELF("corrupt", bytes.NewReader(data))
			if err != nil {
				continue
			}
			c.insert(b)
			for range 200 {
				b.lookup(r.Uint64N(0x600000), c)
			}
			m := &Mapping{Start: 0x10000, Limit: 0x20000, Offset: 0x1000}
			b.bias(m)
			c.Close()
		}
	}
}

func FuzzOpenELF(f *testing.F) {
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	for _, variant := range []string{"c-g", "c-nog"} {
		data, err := os.ReadFile(build(f, variant))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := openELF("fuzz", bytes.NewReader(data))
		if err != nil {
			return
		}
		c := NewCache(Options{})
		c.insert(b)
		for pc := uint64(0); pc < 0x1000; pc += 0x40 {
			b.lookup(pc, c)
		}
		c.Close()
	})
}
