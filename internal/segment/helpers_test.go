package segment

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/wire"
)

var rotTestSchema = &wire.Schema{Name: "RotTest", HasTimestamp: true, Fields: []wire.Field{
	{Name: "seq", Type: wire.Varint}, {Name: "loc", Type: wire.PooledString}, {Name: "payload", Type: wire.Bytes}}}

// rotBatch returns a batch function writing events seq..seq+k-1 with
// payloads of size bytes each.
func rotBatch(seq uint64, k, size int, ts uint64) func(w *wire.Writer) error {
	return func(w *wire.Writer) error {
		for i := range k {
			p := make([]byte, size)
			for j := range p {
				p[j] = byte(int(seq) + i + j*7)
			}
			err := w.Write(rotTestSchema, ts+uint64(i), wire.Value{Type: wire.Varint, U: seq + uint64(i)},
				wire.Value{Type: wire.PooledString, S: fmt.Sprintf("loc%d", i%3)}, wire.Value{Type: wire.Bytes, B: p})
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// writeBatch writes one batch with fn, which needs no per-segment state.
func writeBatch(r *Rotator, fn func(w *wire.Writer) error) error {
	return r.WriteSegmentBatch(func(w *wire.Writer, _ bool) error { return fn(w) })
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// readSegment reads a whole segment, checks its start (§A.10) and returns
// the seq and timestamp of its RotTest events. Errors are reported.
func readSegment(t *testing.T, path string, meta map[string]string) (seqs, tss []uint64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd := wire.NewReader(f)
	var evs []*wire.Event
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: after %d events: %v", path, len(evs), err)
		}
		evs = append(evs, ev)
	}
	if len(evs) < 3 || evs[0].Name() != wire.NameClockSync || evs[1].Name() != wire.NameSegmentMetadata ||
		evs[2].Name() != wire.NameClockSync {
		t.Fatalf("%s: segment does not start with ClockSync, SegmentMetadata, ClockSync", path)
	}
	if st := rd.Stats(); st.Headers < 2 {
		t.Errorf("%s: %d stream headers, want ≥ 2", path, st.Headers)
	}
	if wire.LayoutOf(evs[0].Schema).ClockSync(evs[0]).RealtimeNs == 0 {
		t.Errorf("%s: ClockSync without realtime", path)
	}
	got := map[string]string{}
	for _, p := range wire.LayoutOf(evs[1].Schema).SegmentMetadata(evs[1]).Entries {
		got[p.Key] = p.Value
	}
	for k, v := range meta {
		if got[k] != v {
			t.Errorf("%s: metadata %s = %q, want %q", path, k, got[k], v)
		}
	}
	for _, ev := range evs[3:] {
		if ev.Name() != "RotTest" {
			continue
		}
		s, _ := ev.Uint("seq")
		seqs = append(seqs, s)
		tss = append(tss, ev.Timestamp)
	}
	return seqs, tss
}

// segments lists the files in dir, sorted by segment number.
func segments(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.SortFunc(names, func(a, b string) int { return segNum(a) - segNum(b) })
	return names
}

func segNum(name string) int {
	var n int
	fmt.Sscanf(strings.TrimPrefix(name, "seg."), "%d", &n)
	return n
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
