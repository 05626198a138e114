package wire

import (
	"bytes"
	"compress/gzip"
	"io"
	"math/rand/v2"
	"testing"
)

func randValue(rng *rand.Rand, t FieldType, depth int) Value {
	if t.IsOptional() {
		if rng.IntN(3) == 0 {
			return Value{Type: t.Base(), Absent: true}
		}
		t = t.Base()
	}
	str := func() string {
		return []string{"", "a", "main", "src/lib.rs:1:1", "ünïcode"}[rng.IntN(5)]
	}
	switch t {
	case I64:
		return I64Value(int64(rng.Uint64()))
	case F64:
		return F64Value(rng.NormFloat64())
	case Bool:
		return BoolValue(rng.IntN(2) == 0)
	case String:
		return StringValue(str())
	case Bytes:
		b := make([]byte, rng.IntN(5))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return BytesValue(b)
	case PooledString:
		return PooledStringValue(str())
	case PooledStackFrames, StackFrames:
		f := make([]uint64, rng.IntN(4))
		for i := range f {
			f[i] = uint64(rng.IntN(3)) << 40
		}
		return Value{Type: t, Frames: f}
	case Varint:
		return VarintValue(rng.Uint64() >> rng.IntN(64))
	case U8:
		return U8Value(uint8(rng.Uint32()))
	case U16:
		return U16Value(uint16(rng.Uint32()))
	case U32:
		return U32Value(rng.Uint32())
	case StringMap:
		m := make([]StringPair, rng.IntN(3))
		for i := range m {
			m[i] = StringPair{str(), str()}
		}
		return StringMapValue(m)
	case DynamicList:
		l := make([]Value, rng.IntN(4))
		for i := range l {
			l[i] = randValue(rng, randType(rng, depth), depth+1)
		}
		return ListValue(l)
	case DynamicMap:
		m := make([]MapEntry, rng.IntN(3))
		for i := range m {
			m[i] = MapEntry{randValue(rng, randType(rng, depth), depth+1), randValue(rng, randType(rng, depth), depth+1)}
		}
		return MapValue(m)
	}
	panic(t)
}

func randType(rng *rand.Rand, depth int) FieldType {
	n := 15
	if depth >= 3 {
		n = 13 // no more nesting
	}
	t := FieldType(1 + rng.IntN(n))
	if rng.IntN(4) == 0 {
		t = Optional(t)
	}
	return t
}

// TestRoundTrip writes random events of every field type, over several
// streams, and reads them back.
func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var schemas []*Schema
	for i := range 40 {
		s := &Schema{Name: "Ev" + string(rune('A'+i%26)) + string(rune('a'+i/26)), HasTimestamp: i%5 != 0}
		for j := range rng.IntN(6) {
			s.Fields = append(s.Fields, Field{Name: string(rune('a' + j)), Type: randType(rng, 0)})
		}
		schemas = append(schemas, s)
	}
	// Every type, optional and not, appears in at least one schema.
	all := &Schema{Name: "All", HasTimestamp: true}
	for ft := I64; ft <= DynamicMap; ft++ {
		all.Fields = append(all.Fields, Field{ft.String(), ft}, Field{"opt" + ft.String(), Optional(ft)})
	}
	schemas = append(schemas, all)

	var buf bytes.Buffer
	w := NewWriter(&buf)
	var want []Event
	ts := uint64(1 << 40)
	for i := range 5000 {
		if i%700 == 699 {
			must(t, w.Reset())
		}
		s := schemas[rng.IntN(len(schemas))]
		switch rng.IntN(10) {
		case 0:
			ts -= uint64(rng.IntN(1000))
		case 1:
			ts += 1 << 24
		default:
			ts += uint64(rng.IntN(2_000_000))
		}
		vals := make([]Value, len(s.Fields))
		for j, f := range s.Fields {
			vals[j] = randValue(rng, f.Type, 0)
		}
		must(t, w.Write(s, ts, vals...))
		ev := Event{Schema: s, Values: vals}
		if s.HasTimestamp {
			ev.Timestamp = ts
		}
		want = append(want, ev)
	}
	must(t, w.Flush())

	// Read through gzip too.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(buf.Bytes())
	zw.Close()
	for name, data := range map[string][]byte{"raw": buf.Bytes(), "gzip": gz.Bytes()} {
		r := NewReader(bytes.NewReader(data))
		var ev Event
		for i := range want {
			must(t, r.ReadEvent(&ev))
			if !ev.Equal(&want[i]) {
				t.Fatalf("%s: event %d:\n got %+v\nwant %+v", name, i, ev, want[i])
			}
		}
		if err := r.ReadEvent(&ev); err != io.EOF {
			t.Fatalf("%s: after last event: %v", name, err)
		}
		if st := r.Stats(); st.Headers != 8 {
			t.Errorf("%s: %d headers", name, st.Headers)
		}
	}
}

// TestReadAllocs checks that decoding into a reused Event does not allocate
// in steady state.
func TestReadAllocs(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	stack := []uint64{1, 2, 3}
	for i := range 2000 {
		must(t, w.WriteCpuSample(CpuSampleEvent{Timestamp: uint64(i) * 1000, Tid: 7, ThreadName: Some("t"), Callchain: stack}))
		must(t, w.WritePollStart(PollStartEvent{Timestamp: uint64(i)*1000 + 1, SpawnLoc: "x"}))
	}
	must(t, w.Flush())
	r := NewReader(bytes.NewReader(buf.Bytes()))
	var ev Event
	for range 10 {
		must(t, r.ReadEvent(&ev))
	}
	if n := testing.AllocsPerRun(1000, func() { must(t, r.ReadEvent(&ev)) }); n != 0 {
		t.Errorf("%v allocations per event", n)
	}
}

func FuzzReader(f *testing.F) {
	f.Add(golden(f))
	// A cut through a realistic trace: several streams, pools, resets and
	// the symbol table, ending inside a frame.
	prefix := mixedTrace(f)[:16<<10]
	f.Add(prefix)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data))
		var ev Event
		for {
			err := r.ReadEvent(&ev)
			if err == io.EOF {
				return
			}
			if err != nil {
				if _, ok := err.(*FormatError); !ok {
					t.Fatalf("error of type %T: %v", err, err)
				}
				if r.ReadEvent(&ev) != err {
					t.Fatal("error not sticky")
				}
				return
			}
		}
	})
}
