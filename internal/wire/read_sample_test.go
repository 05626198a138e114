package wire

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// sampleReader is what both readers offer the loader.
type sampleReader interface {
	ReadEvent(*Event) error
	ReadSample(*Event, *CpuSampleRead) (bool, error)
}

// readSamples reads every event of rd, CPU samples in their typed form:
// through ReadSample if fast, else through ReadEvent and the Layout. It
// returns what it read, how many samples the fast path gave, and the
// error that ended the read.
func readSamples(rd sampleReader, fast bool) (out []any, fastN int, err error) {
	layouts := map[*Schema]*Layout{}
	var ev Event
	var cs CpuSampleRead
	for {
		sample := false
		if fast {
			sample, err = rd.ReadSample(&ev, &cs)
		} else {
			err = rd.ReadEvent(&ev)
		}
		if err != nil {
			return out, fastN, err
		}
		l := layouts[ev.Schema]
		if l == nil {
			l = LayoutOf(ev.Schema)
			layouts[ev.Schema] = l
		}
		switch {
		case sample:
			fastN++
		case l.Kind == KindCpuSample:
			l.CpuSample(&ev, &cs.E, &cs.X)
			cs.StackID, cs.Pooled = l.StackID(&ev)
			sample = true
		}
		if sample {
			c := cs
			c.E.Callchain = slices.Clone(cs.E.Callchain)
			out = append(out, ev.Schema.Name, c)
		} else {
			out = append(out, ev.Name(), ev.Timestamp, showValues(ev.Values))
		}
	}
}

// showValues prints what values hold, not the memory they keep for reuse.
func showValues(vs []Value) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "%v ", v.Type)
		switch {
		case v.Absent:
			b.WriteString("absent")
		case v.Type == String || v.Type == PooledString:
			fmt.Fprintf(&b, "%q", v.S)
		case v.Type == StackFrames || v.Type == PooledStackFrames:
			fmt.Fprint(&b, v.Frames)
		case v.Type == Bytes:
			fmt.Fprintf(&b, "%x", v.B)
		case v.Type == StringMap:
			fmt.Fprint(&b, v.Map)
		case v.Type == DynamicList || v.Type == DynamicMap:
			fmt.Fprint(&b, v.List, v.Entries)
		default:
			fmt.Fprint(&b, v.U)
		}
		b.WriteString("; ")
	}
	return b.String()
}

// sampleTrace is a small TRC file of CPU samples of each schema the fast
// path reads or declines, between other events, over two streams.
func sampleTrace(t testing.TB) []byte {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	stack := []uint64{0x401000, 0x402000}
	foreign := &Schema{Name: NameCpuSample, HasTimestamp: true, Fields: []Field{{FieldCallchain, PooledStackFrames},
		{FieldTid, I64}, {FieldWorkerID, U16}, {FieldThreadState, Optional(U32)}, {FieldPid, Varint}}}
	withBool := &Schema{Name: NameCpuSample, HasTimestamp: true, Fields: []Field{{FieldCallchain, StackFrames},
		{FieldSource, Bool}}}
	for i := range uint64(2) {
		ts := 1e9 + i*1e6
		must(t, w.WriteContextAttributeSet(ContextAttributeSet{ID: 1 << 35, Attributes: []StringPair{{"http.route", "GET /"}}}))
		must(t, w.WriteCpuSampleExt(CpuSampleEvent{Timestamp: ts, WorkerID: 1, Tid: 1001, ThreadName: Some("w"),
			Callchain: stack, CPU: Some[uint64](2)},
			CpuSampleExt{TraceID: Some("0102030405060708090a0b0c0d0e0f10"), SpanID: Some("1112131415161718"),
				SpanRootName: Some("GET /"), ValueNs: Some[uint64](1 << 40), ThreadState: Some[uint8](ThreadRunnable),
				Pid: Some[uint32](9), CPUTimeDeltaNs: Some[uint64](7000), LinkSource: Some("thread_context"),
				ContextSetID: Some[uint64](1 << 35)}))
		must(t, w.WriteCpuSampleExt(CpuSampleEvent{Timestamp: ts + 1, WorkerID: 1 << 40, Source: 1, Callchain: nil},
			CpuSampleExt{SpanRootName: Some("GET /")}))
		must(t, w.WritePollStart(PollStartEvent{Timestamp: ts + 2, WorkerID: 1, TaskID: 7, SpawnLoc: "a.rs:1"}))
		must(t, w.WriteCpuSample(CpuSampleEvent{Timestamp: ts + 1<<25, WorkerID: 2, Tid: 1002, Callchain: stack[1:]}))
		must(t, w.Write(foreign, ts+1<<25+1, PooledStackValue(stack), I64Value(-1), U16Value(7), U32Value(300),
			VarintValue(1<<33)))
		must(t, w.Write(withBool, ts+1<<25+2, StackValue(stack), BoolValue(true)))
		must(t, w.Reset())
	}
	must(t, w.Flush())
	return buf.Bytes()
}

// TestReadSampleMatchesReadEvent: what ReadSample reads, samples and
// errors included, is what ReadEvent and the Layout read, on whole,
// truncated and corrupted files of both layouts.
func TestReadSampleMatchesReadEvent(t *testing.T) {
	trc := func(b []byte) func() sampleReader {
		return func() sampleReader { return NewReader(bytes.NewReader(b)) }
	}
	legacy := func(b []byte) func() sampleReader {
		return func() sampleReader {
			rd, err := NewLegacyEventReader(bytes.NewReader(b))
			if err != nil {
				return NewReader(bytes.NewReader(nil)) // both fail alike
			}
			return rd
		}
	}
	small := sampleTrace(t)
	rng := rand.New(rand.NewPCG(3, 4))
	recs := make([]LegacyRecord, 2000)
	for i := range recs {
		recs[i] = randLegacyRecord(rng, LegacyMaxVersion)
	}
	leg := writeLegacy(t, LegacyMaxVersion, recs)
	inputs := map[string]func() sampleReader{"samples": trc(small), "mixed": trc(mixedTrace(t)), "golden": trc(golden(t)),
		"legacy": legacy(leg)}
	for cut := range len(small) {
		inputs[fmt.Sprintf("samples cut at %d", cut)] = trc(small[:cut])
	}
	for i := range 300 {
		c := bytes.Clone(small)
		c[rng.IntN(len(c))] = byte(rng.IntN(4))
		inputs[fmt.Sprintf("samples corrupted %d", i)] = trc(c)
	}
	for i := range 50 {
		inputs[fmt.Sprintf("legacy cut %d", i)] = legacy(leg[:rng.IntN(len(leg))])
	}
	fastN := map[string]int{}
	for name, open := range inputs {
		want, _, wantErr := readSamples(open(), false)
		got, n, err := readSamples(open(), true)
		fastN[name] = n
		if fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Errorf("%s: ReadSample ends with %v, ReadEvent with %v", name, err, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			i := 0
			for i < min(len(got), len(want)) && reflect.DeepEqual(got[i], want[i]) {
				i++
			}
			t.Errorf("%s: ReadSample read %d items, ReadEvent and Layout %d; first difference at %d:\n%+v\n%+v",
				name, len(got), len(want), i, got[i:min(i+1, len(got))], want[i:min(i+1, len(want))])
		}
	}
	// The fast path reads the samples of perfprof's, the built-in and the
	// foreign schema, not the one with a bool, and legacy samples.
	if fastN["samples"] != 8 || fastN["mixed"] == 0 || fastN["legacy"] == 0 {
		t.Errorf("fast path read %d, %d and %d samples", fastN["samples"], fastN["mixed"], fastN["legacy"])
	}
}
