package goruntime

import (
	"debug/dwarf"
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/limits"
)

// Abbreviations of the DWARF typeWriter writes.
const (
	abbrevUnit    = 1 + iota // DW_TAG_compile_unit: name
	abbrevStruct             // DW_TAG_structure_type, with members: name, byte_size
	abbrevMember             // DW_TAG_member: name, type, data_member_location
	abbrevTypedef            // DW_TAG_typedef: name, type
	abbrevPointer            // DW_TAG_pointer_type: type
	abbrevBase               // DW_TAG_base_type: name, byte_size
)

// typeAbbrevs is the .debug_abbrev of typeWriter's DIEs.
var typeAbbrevs = []byte{
	abbrevUnit, 0x11, 1, 0x03, 0x08, 0, 0, // name: string
	abbrevStruct, 0x13, 1, 0x03, 0x08, 0x0b, 0x0f, 0, 0, // name, byte_size: udata
	abbrevMember, 0x0d, 0, 0x03, 0x08, 0x49, 0x13, 0x38, 0x0f, 0, 0, // name, type: ref4, data_member_location: udata
	abbrevTypedef, 0x16, 0, 0x03, 0x08, 0x49, 0x13, 0, 0,
	abbrevPointer, 0x0f, 0, 0x49, 0x13, 0, 0,
	abbrevBase, 0x24, 0, 0x03, 0x08, 0x0b, 0x0f, 0x3e, 0x0b, 0, 0, // name, byte_size, encoding: data1
	0,
}

// typeWriter writes the .debug_info of one DWARF 4 unit of types, as a
// target could forge it. References name their DIE by a label, defined
// before or after.
type typeWriter struct {
	body   []byte
	labels map[string]uint32 // offsets from the unit header
	refs   map[int]string    // where in body a reference to a label goes
}

const unitHeaderLen = 4 + 2 + 4 + 1 // length, version, abbrev offset, address size

func newTypeWriter(unit string) *typeWriter {
	w := &typeWriter{labels: map[string]uint32{}, refs: map[int]string{}}
	w.body = append(w.body, abbrevUnit)
	w.str(unit)
	return w
}

func (w *typeWriter) str(s string) { w.body = append(append(w.body, s...), 0) }

func (w *typeWriter) ref(label string) {
	w.refs[len(w.body)] = label
	w.body = append(w.body, 0, 0, 0, 0)
}

// def labels the DIE written next.
func (w *typeWriter) def(label string) { w.labels[label] = uint32(unitHeaderLen + len(w.body)) }

func (w *typeWriter) structType(label, name string, size uint64, members ...member) {
	w.def(label)
	w.body = append(w.body, abbrevStruct)
	w.str(name)
	w.body = binary.AppendUvarint(w.body, size)
	for _, m := range members {
		w.body = append(w.body, abbrevMember)
		w.str(m.name)
		w.ref(m.typ)
		w.body = binary.AppendUvarint(w.body, m.off)
	}
	w.body = append(w.body, 0)
}

type member struct {
	name, typ string
	off       uint64
}

func (w *typeWriter) typedef(label, name, typ string) {
	w.def(label)
	w.body = append(w.body, abbrevTypedef)
	w.str(name)
	w.ref(typ)
}

func (w *typeWriter) pointer(label, typ string) {
	w.def(label)
	w.body = append(w.body, abbrevPointer)
	w.ref(typ)
}

func (w *typeWriter) base(label, name string, size uint64) {
	w.def(label)
	w.body = append(w.body, abbrevBase)
	w.str(name)
	w.body = binary.AppendUvarint(w.body, size)
	w.body = append(w.body, 0x07) // DW_ATE_unsigned
}

// info returns the unit's .debug_info.
func (w *typeWriter) info(tb testing.TB) []byte {
	body := append(w.body, 0) // the end of the unit's children
	for at, label := range w.refs {
		off, ok := w.labels[label]
		if !ok {
			tb.Fatalf("no DIE labelled %q", label)
		}
		binary.LittleEndian.PutUint32(body[at:], off)
	}
	b := binary.LittleEndian.AppendUint32(nil, uint32(unitHeaderLen-4+len(body)))
	b = binary.LittleEndian.AppendUint16(b, 4)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = append(b, 8)
	return append(b, body...)
}

// runtimeTypes writes runtime.g and runtime.m, g.labels of type labels
// (written by the caller).
func runtimeTypes(w *typeWriter, labels string) {
	w.base("uint64", "uint64", 8)
	w.pointer("*m", "m")
	w.pointer("*g", "g")
	w.structType("g", "runtime.g", 400, member{"m", "*m", 48}, member{"goid", "uint64", 152}, member{"labels", labels, 352})
	w.structType("m", "runtime.m", 400, member{"curg", "*g", 184})
}

// readForged reads the layout of the DWARF of w, failing the test if it
// takes more than a few seconds (debug/dwarf looping over a cycle).
func readForged(t *testing.T, w *typeWriter) (Layout, error) {
	d, err := dwarf.New(typeAbbrevs, nil, nil, w.info(t), nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   Layout
		err error
	}
	done := make(chan result, 1)
	go func() {
		var l Layout
		err := l.readDWARF(d)
		done <- result{l, err}
	}()
	select {
	case r := <-done:
		return r.l, r.err
	case <-time.After(20 * time.Second):
		t.Fatal("reading the layout does not end")
		return Layout{}, nil
	}
}

// labelMapTypes writes pprof's labelMap as Go 1.25 does: a struct
// holding a label.Set, a struct holding a slice of labels.
func labelMapTypes(w *typeWriter) {
	w.base("string", "string", 16)
	w.structType("label", "internal/runtime/pprof/label.Label", 32, member{"Key", "string", 0}, member{"Value", "string", 16})
	w.pointer("*label", "label")
	w.structType("[]label", "[]internal/runtime/pprof/label.Label", 24, member{"array", "*label", 0}, member{"len", "uint64", 8})
	w.structType("set", "internal/runtime/pprof/label.Set", 24, member{"List", "[]label", 0})
	w.structType("labelMap", "runtime/pprof.labelMap", 24, member{"Set", "set", 0})
	w.pointer("*labelMap", "labelMap")
}

func TestReadForgedDWARF(t *testing.T) {
	w := newTypeWriter("runtime")
	w.pointer("unsafe.Pointer", "uint64")
	runtimeTypes(w, "unsafe.Pointer")
	l, err := readForged(t, w)
	if err != nil {
		t.Fatal(err)
	}
	if l.GM != 48 || l.GGoid != 152 || l.GLabels != 352 || l.MCurg != 184 || l.Labels != LabelsNone {
		t.Errorf("layout %+v", l)
	}
	w = newTypeWriter("runtime")
	labelMapTypes(w)
	runtimeTypes(w, "*labelMap")
	if l, err = readForged(t, w); err != nil {
		t.Fatal(err)
	}
	if l.Labels != LabelsSlice || l.LabelSize != 32 || l.LabelKey != 0 || l.LabelValue != 16 {
		t.Errorf("label layout %+v", l)
	}
}

// A typedef that names itself, alone or through another: debug/dwarf
// sizes it by recursion, and overflows the stack (a fatal error) without
// the scan; the typedefs of labelMap looped in underlying.
func TestTypedefCycle(t *testing.T) {
	for _, n := range []int{1, 2, 40} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			w := newTypeWriter("runtime")
			for i := range n {
				w.typedef(fmt.Sprint("t", i), fmt.Sprint("runtime.t", i), fmt.Sprint("t", (i+1)%n))
			}
			runtimeTypes(w, "t0")
			_, err := readForged(t, w)
			if k, ok := limits.KindOf(err); !ok || k != limits.TypeCycle {
				t.Fatalf("err %v, want a %v", err, limits.TypeCycle)
			}
		})
	}
}

// A chain of 100 000 types: debug/dwarf reads it by recursion, one level
// per type, 1 to 1.6 KB of stack each. The scan's budget keeps it within
// 32 MB; the test lowers the most a goroutine's stack may grow to 64 MB,
// which a chain that long overflows without the budget (as a chain of a
// million types overflows the default 1 GB). A chain of typedefs longer
// than maxTypeChain is refused too: debug/dwarf sizes it by recursion.
func TestDeepTypes(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(64 << 20))
	for _, tc := range []struct {
		name string
		n    int
		link func(w *typeWriter, label, next string)
	}{
		{"pointers", 100_000, func(w *typeWriter, label, next string) { w.pointer(label, next) }},
		{"structs", 100_000, func(w *typeWriter, label, next string) {
			w.structType(label, label, 8, member{"x", next, 0})
		}},
		{"typedefs", maxTypeChain + 1, func(w *typeWriter, label, next string) { w.typedef(label, label, next) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newTypeWriter("runtime")
			for i := range tc.n {
				tc.link(w, fmt.Sprint("t", i), fmt.Sprint("t", i+1))
			}
			w.base(fmt.Sprint("t", tc.n), "uint64", 8)
			runtimeTypes(w, "t0")
			start := time.Now()
			_, err := readForged(t, w)
			if k, ok := limits.KindOf(err); !ok || k != limits.TypeCycle {
				t.Fatalf("err %v, want a %v", err, limits.TypeCycle)
			}
			t.Logf("refused in %v: %v", time.Since(start), err)
		})
	}
}

// underlying stops on a typedef that names itself, even one the scan did
// not see.
func TestUnderlyingCycle(t *testing.T) {
	td := &dwarf.TypedefType{}
	td.Type = td
	done := make(chan dwarf.Type, 1)
	go func() { done <- underlying(td) }()
	select {
	case u := <-done:
		if u != nil {
			t.Errorf("underlying = %v, want nil", u)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("underlying loops over a typedef that names itself")
	}
}

// FuzzGoRuntimeLayout reads the runtime types of forged DWARF: whatever
// the bytes, reading ends, without a panic or a stack overflow.
func FuzzGoRuntimeLayout(f *testing.F) {
	w := newTypeWriter("runtime")
	w.pointer("unsafe.Pointer", "uint64")
	runtimeTypes(w, "unsafe.Pointer")
	f.Add(typeAbbrevs, w.info(f))
	w = newTypeWriter("runtime")
	w.typedef("t0", "runtime.t0", "t1")
	w.typedef("t1", "runtime.t1", "t0")
	runtimeTypes(w, "t0")
	f.Add(typeAbbrevs, w.info(f))
	w = newTypeWriter("runtime")
	labelMapTypes(w)
	runtimeTypes(w, "*labelMap")
	f.Add(typeAbbrevs, w.info(f))
	f.Fuzz(func(t *testing.T, abbrev, info []byte) {
		d, err := dwarf.New(abbrev, nil, nil, info, nil, nil, nil, nil)
		if err != nil {
			return
		}
		var l Layout
		l.readDWARF(d)
	})
}
