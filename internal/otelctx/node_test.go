package otelctx

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/testchild"
)

// heap is a forged address space: words at addresses, everything else
// unreadable.
type heap map[uint64]uint64

func (h heap) ReadAt(p []byte, off int64) (int, error) {
	for i := 0; i < len(p); i += 8 {
		w, ok := h[uint64(off)+uint64(i)]
		if !ok {
			return i, fmt.Errorf("read %#x: %w", uint64(off)+uint64(i), io.ErrUnexpectedEOF)
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], w)
		copy(p[i:], b[:])
	}
	return len(p), nil
}

func smiWord(v int64) uint64 { return uint64(v) << 32 }

// Addresses of the forged objects; heap objects are tagged (| 1).
const (
	fStruct    = 0x1000
	fCPED      = 0x2000
	fFrame     = 0x3000
	fTable     = 0x4000
	fHandle    = 0x5000
	fStorage   = 0x6000
	fWrapper   = 0x7000
	fRecord    = 0x8000
	fUndefined = 0x9000 | 1
	fOther     = 0xa000 | 1 // another storage in the frame
	fSlot      = 32
	fHash      = 5
)

// nodeHeap forges a thread running a context: its frame maps another
// storage and the published one, both in the same bucket of a table of
// two buckets, the published one second.
func nodeHeap() heap {
	h := heap{
		fStruct + 0:   fCPED,
		fStruct + 8:   fHandle,
		fStruct + 16:  uint64(fHash) | uint64(fSlot)<<32, // hash, then the slot offset byte
		fStruct + 24:  fUndefined,
		fCPED:         fFrame | 1,
		fFrame + 24:   fTable | 1,
		fHandle:       fStorage | 1,
		fWrapper + 24: 0, // where Node 22 kept it
		fWrapper + 32: fRecord,
	}
	const buckets = 2
	words := []uint64{0xdead, 0, smiWord(2), smiWord(0), smiWord(buckets)}
	// Bucket heads: bucket 1 (hash 5 & 1) starts at entry 0.
	words = append(words, smiWord(-1), smiWord(0))
	// Entries: 0 is the other storage, chained to 1, the published one.
	words = append(words, fOther, 0x1111|1, smiWord(1))
	words = append(words, fStorage|1, fWrapper|1, smiWord(-1))
	for len(words) < 5+buckets+3*2*buckets {
		words = append(words, 0)
	}
	words[1] = smiWord(int64(len(words) - 2)) // FixedArray length: elements after the header
	for i, w := range words {
		h[fTable+uint64(8*i)] = w
	}
	return h
}

func TestNodeRecord(t *testing.T) {
	tableWord := func(i int) uint64 { return fTable + uint64(8*i) }
	tests := []struct {
		name  string
		forge func(heap)
		want  error // nil: the record
	}{
		{"running a context", func(heap) {}, nil},
		{"gate closed", func(h heap) { h[fStruct] = 0 }, ErrNoContext},
		{"no frame", func(h heap) { h[fCPED] = fUndefined }, ErrNoContext},
		{"detached: the storage maps to undefined", func(h heap) { h[tableWord(5+2+3+1)] = fUndefined }, ErrNoContext},
		{"storage not in the frame", func(h heap) { h[tableWord(5+2+3)] = 0xbbbb | 1 }, ErrNoContext},
		{"record released", func(h heap) { h[fWrapper+32] = 0 }, ErrNoContext},
		{"Node 22's slot offset on Node 24's wrapper", func(h heap) { h[fStruct+16] = fHash | 24<<32 }, ErrNoContext},
		{"slot offset not a word", func(h heap) { h[fStruct+16] = fHash | 20<<32 }, ErrNodeWalk},
		{"mid-rehash: the element count forwards to a new table", func(h heap) { h[tableWord(2)] = 0xcccc | 1 }, ErrNodeWalk},
		{"bucket count not a power of two", func(h heap) { h[tableWord(4)] = smiWord(3) }, ErrNodeWalk},
		{"more elements than the buckets hold", func(h heap) { h[tableWord(2)] = smiWord(9) }, ErrNodeWalk},
		{"table shorter than its buckets say", func(h heap) { h[tableWord(1)] = smiWord(4) }, ErrNodeWalk},
		{"frame not a heap object", func(h heap) { h[fCPED] = smiWord(7) }, ErrNodeWalk},
		{"chain that loops", func(h heap) { h[tableWord(5+2+2)] = smiWord(0); h[tableWord(5+2+3)] = 0xbbbb | 1 }, ErrNodeWalk},
		{"unreadable wrapper", func(h heap) { delete(h, fWrapper+32) }, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := nodeHeap()
			tt.forge(h)
			got, err := NodeRecord(h, fStruct)
			if tt.want == nil {
				if err != nil || got != fRecord {
					t.Fatalf("record %#x, %v; want %#x", got, err, fRecord)
				}
				return
			}
			if !errors.Is(err, tt.want) || got != 0 {
				t.Fatalf("record %#x, %v; want none, %v", got, err, tt.want)
			}
		})
	}
}

// nodeStruct locates the Node.js discovery struct of pid's main thread:
// the memory it is read from (closed with the test), its address, and the
// variable as LocateTLSSymbol found it.
func nodeStruct(t *testing.T, pid int) (*memory, uint64, TLSVar) {
	t.Helper()
	v, err := LocateTLSSymbol(pid, NodeTLSSymbol)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := ThreadPointer(pid, pid)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := openMemory(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	addr, err := v.Address(mem, tp)
	if err != nil {
		t.Fatal(err)
	}
	return mem, addr, v
}

// TestNodeRecordLive walks a real Node.js 24 thread, stopped inside a span
// that @datadog/pprof 5.20.0 (the writer dd-trace uses) runs as a thread
// context, to the record the writer built: its trace id, span id, flags
// and attributes. Then, with the thread blocked after run() returned
// (where Node.js 24's frame maps the storage to undefined), the walk finds
// no context.
func TestNodeRecordLive(t *testing.T) {
	node := testchild.Node24(t)
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(self), "testdata", "nodectx")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@datadog", "pprof")); err != nil {
		testchild.NeedRuntime(t, "@datadog/pprof is not installed in %s: run make node-deps (make test does): %v", dir, err)
	}
	flags := t.TempDir()
	child := testchild.Start(t, node, filepath.Join(dir, "writer.js"), flags)

	mem, addr, v := nodeStruct(t, child.Pid)
	t.Logf("%s: %+v, at %#x", NodeTLSSymbol, v, addr)

	rec, err := NodeRecord(mem, addr)
	if err != nil {
		t.Fatalf("in run(): %v", err)
	}
	b := make([]byte, RecordHeaderSize+64)
	if _, err := mem.ReadAt(b[:RecordHeaderSize], int64(rec)); err != nil {
		t.Fatal(err)
	}
	size, err := RecordSize(b[:RecordHeaderSize])
	if err != nil || size > len(b) {
		t.Fatalf("record size %d: %v", size, err)
	}
	if _, err := mem.ReadAt(b[RecordHeaderSize:size], int64(rec)+RecordHeaderSize); err != nil {
		t.Fatal(err)
	}
	c, err := ParseRecord(b[:size], []string{"http.route", "service.version"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("record at %#x: %+v", rec, c)
	if hex.EncodeToString(c.TraceID[:]) != "0102030405060708090a0b0c0d0e0f10" || hex.EncodeToString(c.SpanID[:]) != "a1a2a3a4a5a6a7a8" || c.TraceFlags != 1 {
		t.Errorf("record %+v, want the writer's trace and span ids and flags 1", c)
	}
	if len(c.Attrs) != 2 || c.Attrs[0].Name != "http.route" || c.Attrs[0].Value != "GET /checkout" || c.Attrs[1].Value != "v1" {
		t.Errorf("attributes %+v, want http.route=GET /checkout, service.version=v1", c.Attrs)
	}

	if err := os.WriteFile(filepath.Join(flags, "out"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if line := child.Line(t, 10*time.Second); line != "out" {
		t.Fatalf("writer: %q", line)
	}
	if rec, err := NodeRecord(mem, addr); !errors.Is(err, ErrNoContext) {
		t.Errorf("after run(): record %#x, %v; want no context", rec, err)
	}
	if err := os.WriteFile(filepath.Join(flags, "done"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
