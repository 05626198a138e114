package otelctx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The Node.js thread context (schema nodejs_v1_dev, design doc 01861 of
// the OpenTelemetry eBPF profiler; docs/nodejs-thread-context.md): a
// thread of a Node.js process does not point at its record. It publishes a
// discovery struct, otel_thread_ctx_nodejs_v1, from which a reader walks
// V8's heap: the isolate's continuation-preserved embedder data slot holds
// the active AsyncContextFrame, a JS Map from AsyncLocalStorage instances
// to their values; the published storage's value is a wrapper object whose
// first embedder slot points at an OTEP 4947 record.
//
// NodeRecord is that walk in user space, the reference for the eBPF one.

// Schema versions of the process context that select the Node.js walk.
const (
	SchemaNodeDev = "nodejs_v1_dev"
	SchemaNode    = "nodejs_v1"
)

// NodeTLSSymbol is the thread-local discovery struct of a Node.js process.
const NodeTLSSymbol = "otel_thread_ctx_nodejs_v1"

// NodeStructSize is the size of the discovery struct.
const NodeStructSize = 32

// The discovery struct (64-bit).
const (
	nodeOffCPEDSlot   = 0  // u64: address of the isolate's CPED slot; 0: do not read
	nodeOffALSHandle  = 8  // u64: a global handle; *it is the storage's tagged address
	nodeOffALSHash    = 16 // i32: the storage's identity hash
	nodeOffRecordSlot = 20 // u8: offset of the record pointer in the wrapper
	nodeOffUndefined  = 24 // u64: the isolate's tagged undefined
)

// V8's layout in the builds the schema covers (64-bit, no pointer
// compression, no sandbox): fixed by the schema, not published.
const (
	v8TaggedSize       = 8
	v8JSMapTableOffset = 24 // JSMap: map, properties, elements, table
	v8FixedArrayHeader = 16 // map, length
	v8MapEntrySize     = 3  // key, value, chain
	v8HeapObjectTag    = 1
)

// nodeMaxChain bounds the entries a bucket's chain walk visits, as the
// eBPF walk must: a frame holds a handful of storages, each bucket one or
// two of them.
const nodeMaxChain = 16

// nodeMaxBuckets bounds the hash table a walk accepts: tables of frames
// are small, and a count past it is not one.
const nodeMaxBuckets = 1 << 10

// ErrNodeWalk wraps why a Node.js walk found no record although the thread
// published its struct: the table was being rehashed, a count or index was
// out of its bounds, a word was not tagged as it must be. It is counted;
// the sample gets no link.
var ErrNodeWalk = errors.New("node.js context walk failed")

// NodeRecord walks a thread's Node.js discovery struct at structAddr in
// mem to the address of its OTEP 4947 record. ErrNoContext: the thread
// runs no context (gate closed, no frame, the storage not in the frame or
// detached, no record). ErrNodeWalk: the walk did not validate; nothing it
// read is used. Read errors are returned wrapped.
func NodeRecord(mem io.ReaderAt, structAddr uint64) (uint64, error) {
	var s [NodeStructSize]byte
	if _, err := mem.ReadAt(s[:], int64(structAddr)); err != nil {
		return 0, fmt.Errorf("read node.js discovery struct: %w", err)
	}
	cped := binary.LittleEndian.Uint64(s[nodeOffCPEDSlot:])
	if cped == 0 {
		return 0, ErrNoContext // not published, torn down, or closed for now
	}
	handle := binary.LittleEndian.Uint64(s[nodeOffALSHandle:])
	hash := int32(binary.LittleEndian.Uint32(s[nodeOffALSHash:]))
	slot := uint64(s[nodeOffRecordSlot])
	undefined := binary.LittleEndian.Uint64(s[nodeOffUndefined:])
	if slot == 0 || slot%v8TaggedSize != 0 {
		return 0, fmt.Errorf("%w: record slot offset %d", ErrNodeWalk, slot)
	}
	frame, err := readU64(mem, cped)
	if err != nil {
		return 0, err
	}
	if frame == undefined {
		return 0, ErrNoContext // no frame active: the loop is idle
	}
	if !isHeapObject(frame) {
		return 0, fmt.Errorf("%w: frame %#x is not a heap object", ErrNodeWalk, frame)
	}
	table, err := readU64(mem, untag(frame)+v8JSMapTableOffset)
	if err != nil {
		return 0, err
	}
	if !isHeapObject(table) {
		return 0, fmt.Errorf("%w: table %#x is not a heap object", ErrNodeWalk, table)
	}
	key, err := readU64(mem, handle)
	if err != nil {
		return 0, err
	}
	value, err := lookupOrderedHashMap(mem, untag(table), key, hash)
	if err != nil {
		return 0, err
	}
	// Checked before following it: outside a run() the frame maps the
	// storage to undefined.
	if value == undefined {
		return 0, ErrNoContext
	}
	if !isHeapObject(value) {
		return 0, fmt.Errorf("%w: value %#x is not a heap object", ErrNodeWalk, value)
	}
	record, err := readU64(mem, untag(value)+slot)
	if err != nil {
		return 0, err
	}
	if record == 0 {
		return 0, ErrNoContext // the wrapper's record was released
	}
	return record, nil
}

// lookupOrderedHashMap returns the value of key in V8's OrderedHashMap at
// table (untagged): a FixedArray of element count, deleted count and
// bucket count (Smis), the bucket heads, then the entries (key, value,
// chain). Every count and index is checked against the array's length,
// and the chain walk is bounded (a chain that goes on past the bound
// fails); a table whose element count is a pointer (a rehash forwarded
// it) fails rather than being followed.
func lookupOrderedHashMap(mem io.ReaderAt, table, key uint64, hash int32) (uint64, error) {
	var hdr [5 * 8]byte // map, length, elements, deleted, buckets
	if _, err := mem.ReadAt(hdr[:], int64(table)); err != nil {
		return 0, err
	}
	word := func(i int) uint64 { return binary.LittleEndian.Uint64(hdr[8*i:]) }
	length, ok1 := smi(word(1))
	elements, ok2 := smi(word(2))
	deleted, ok3 := smi(word(3))
	buckets, ok4 := smi(word(4))
	switch {
	case !ok2:
		return 0, fmt.Errorf("%w: table being rehashed (element count %#x)", ErrNodeWalk, word(2))
	case !ok1 || !ok3 || !ok4:
		return 0, fmt.Errorf("%w: table counts are not small integers", ErrNodeWalk)
	case buckets <= 0 || buckets > nodeMaxBuckets || buckets&(buckets-1) != 0:
		return 0, fmt.Errorf("%w: %d buckets", ErrNodeWalk, buckets)
	case elements < 0 || deleted < 0 || elements+deleted > 2*buckets:
		return 0, fmt.Errorf("%w: %d elements and %d deleted in %d buckets", ErrNodeWalk, elements, deleted, buckets)
	case length < 3+buckets+v8MapEntrySize*2*buckets:
		return 0, fmt.Errorf("%w: table of %d elements too short for %d buckets", ErrNodeWalk, length, buckets)
	}
	elem := func(i int64) (uint64, error) { return readU64(mem, table+v8FixedArrayHeader+uint64(i)*v8TaggedSize) }
	used := elements + deleted
	head, err := elem(3 + int64(hash)&(buckets-1))
	if err != nil {
		return 0, err
	}
	e, ok := smi(head)
	for steps := 0; ok && e >= 0 && e < used && steps < nodeMaxChain; steps++ {
		base := 3 + buckets + v8MapEntrySize*e
		k, err := elem(base)
		if err != nil {
			return 0, err
		}
		if k == key {
			return elem(base + 1)
		}
		next, err := elem(base + 2)
		if err != nil {
			return 0, err
		}
		e, ok = smi(next)
	}
	if ok && e >= 0 && e < used {
		// The chain goes on past the bound (it loops, or is longer
		// than a frame's): the walk gave up, as the eBPF one does
		// (counted as NodeChain there).
		return 0, fmt.Errorf("%w: bucket chain longer than %d entries", ErrNodeWalk, nodeMaxChain)
	}
	return 0, ErrNoContext // the storage has no value in this frame
}

func isHeapObject(w uint64) bool { return w&3 == v8HeapObjectTag }

func untag(w uint64) uint64 { return w &^ 3 }

// smi decodes a small integer (its tag bit 0, the value in the upper 32
// bits); false for a heap object.
func smi(w uint64) (int64, bool) {
	if w&1 != 0 {
		return 0, false
	}
	return int64(w) >> 32, true
}
