package tracefileexporter

import (
	"encoding/binary"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/wire"
	"github.com/perfprof/perfprof/pkg/pprofiledict"
)

// The context attributes of samples (http.route, ...: the attributes of
// the thread context record a sample was read in) go into a segment as
// ContextAttributeSet events, each written once before the first sample
// that refers to it by id (docs/trace-conventions.md). A set is what the
// samples of one span share, so a sample costs its id, not its strings.

// Bounds of the sets a segment's table remembers: past either, the table
// starts over and the sets it forgot are written again, under new ids,
// when a sample needs them. A client's attributes can be unique per request
// (dd-trace's datadog.local_root_span_id is); the table must not grow for
// the life of a segment with them.
const (
	maxContextSets     = 1 << 14
	maxContextSetBytes = 4 << 20
)

// contextSets numbers the context attribute sets written in the active
// segment. Ids count up from 0 in each segment and are not reused in it.
type contextSets struct {
	ids   map[string]uint64 // by key (see setKey)
	bytes int               // of the keys in ids
	next  uint64
	key   []byte // scratch of setKey
	attrs []wire.StringPair
}

// newSegment forgets the sets of the segment that was active: a segment
// is readable on its own.
func (c *contextSets) newSegment() {
	c.forget()
	c.next = 0
}

// forget forgets the sets written, keeping the numbering: after a batch
// that failed (its sets are not in the segment) or when the table is full.
func (c *contextSets) forget() {
	clear(c.ids)
	c.bytes = 0
}

// assign gives every sample group of b with context attributes the id of
// its set, and writes the sets the segment lacks. It returns how many
// attributes were left out (past convention.ContextAttrsMax a sample, or a
// key repeated).
func (c *contextSets) assign(w *wire.Writer, b *batch) (leftOut int64, err error) {
	for i := range b.groups {
		g := &b.groups[i]
		g.set = wire.Opt[uint64]{}
		if len(g.ctx) == 0 {
			continue
		}
		var n int
		c.attrs, n = boundContext(c.attrs[:0], g.ctx)
		leftOut += int64(n)
		if len(c.attrs) == 0 {
			continue
		}
		c.key = setKey(c.key[:0], c.attrs)
		id, ok := c.ids[string(c.key)]
		if !ok {
			if len(c.ids) >= maxContextSets || c.bytes+len(c.key) > maxContextSetBytes {
				c.forget()
			}
			if c.ids == nil {
				c.ids = map[string]uint64{}
			}
			id = c.next
			c.next++
			c.ids[string(c.key)] = id
			c.bytes += len(c.key)
			if err := w.WriteContextAttributeSet(wire.ContextAttributeSet{ID: id, Attributes: c.attrs}); err != nil {
				return leftOut, err
			}
		}
		g.set = wire.Some(id)
	}
	return leftOut, nil
}

// boundContext appends to dst the attributes of kvs that a set holds, in
// their order: the first of each key, at most convention.ContextAttrsMax,
// keys and values cut at convention.ContextAttrMaxBytes (at a character's
// start) and made valid UTF-8. It returns them and how many it left out.
// The receiver writes no more than that; other sources may.
func boundContext(dst []wire.StringPair, kvs []pprofiledict.KV) ([]wire.StringPair, int) {
	left := 0
next:
	for _, kv := range kvs {
		if kv.Key == "" {
			left++
			continue
		}
		k := convention.BoundContextAttr(kv.Key)
		for _, p := range dst {
			if p.Key == k {
				left++
				continue next
			}
		}
		if len(dst) == convention.ContextAttrsMax {
			left++
			continue
		}
		dst = append(dst, wire.StringPair{Key: k, Value: convention.BoundContextAttr(kv.Value)})
	}
	return dst, left
}

// setKey appends the identity of a set to dst: each key and value with its
// length, so that no two sets share one.
func setKey(dst []byte, attrs []wire.StringPair) []byte {
	for _, p := range attrs {
		dst = binary.AppendUvarint(dst, uint64(len(p.Key)))
		dst = append(dst, p.Key...)
		dst = binary.AppendUvarint(dst, uint64(len(p.Value)))
		dst = append(dst, p.Value...)
	}
	return dst
}
