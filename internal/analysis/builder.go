package analysis

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/perfprof/perfprof/internal/wire"
)

// builder decodes one file into a partial Trace with its own tables.
type builder struct {
	t    *Trace
	info FileInfo

	// Stacks, as raw addresses until finish resolves them against the
	// file's symbols.
	raw      [][]uint64
	stackIdx map[string]int32
	pool     []poolSlot // TRC stack-pool id -> stack, checked by identity

	threads map[Thread]int32
	links   map[Link]int32
	syms    map[uint64][]symEntry
	// ctxSets are the file's ContextAttributeSets so far: set_id -> index
	// in t.AttrSets. unresolvedSets counts the samples that named an id
	// no set defined before them.
	ctxSets        map[uint64]int32
	unresolvedSets int

	openPoll map[uint64]int32 // worker -> index of its open poll in t.Polls
	openPark map[uint64]int32
	// Ends seen with no start in this file: their start is in an earlier
	// file, paired when partials are merged.
	pollEnds []orphanEnd
	unparks  []orphanEnd
	unpaired int // starts that never ended, ends that never started

	kinds     map[*wire.Schema]*kind
	kindOrder []*kind
	lastKind  *kind

	// Full chunks of samples; b.t.Samples is the one being filled.
	sampleChunks [][]TraceSample
}

// sampleChunk is the most samples a chunk holds (about 1.3 MB).
const sampleChunk = 32 << 10

type poolSlot struct {
	p   *uint64 // first address of the pool entry; keeps it alive, so identity is sound
	n   int
	idx int32
}

type symEntry struct {
	depth uint64
	f     Frame
}

type orphanEnd struct {
	worker, ts, wait uint64
	tid              uint32
}

func newBuilder(path string) *builder {
	return &builder{
		t: &Trace{
			Counts:   map[string]int64{},
			Dropped:  map[string]uint64{},
			Metadata: map[string]string{},
			spanByID: map[string]int32{},
			AttrSets: []AttrSet{nil},
			attrIdx:  map[string]int32{},
		},
		info:     FileInfo{Path: path},
		stackIdx: map[string]int32{},
		threads:  map[Thread]int32{},
		links:    map[Link]int32{},
		syms:     map[uint64][]symEntry{},
		openPoll: map[uint64]int32{},
		openPark: map[uint64]int32{},
		kinds:    map[*wire.Schema]*kind{},
	}
}

func (b *builder) time(ts uint64) {
	if ts == 0 {
		return
	}
	if b.t.Start == 0 || ts < b.t.Start {
		b.t.Start = ts
	}
	if ts > b.t.End {
		b.t.End = ts
	}
}

// internStack returns the local id of the stack with these addresses.
func (b *builder) internStack(addrs []uint64) int32 {
	var key string
	if len(addrs) > 0 {
		key = unsafe.String((*byte)(unsafe.Pointer(&addrs[0])), len(addrs)*8)
	}
	if i, ok := b.stackIdx[key]; ok {
		return i
	}
	i := int32(len(b.raw))
	b.raw = append(b.raw, slices.Clone(addrs))
	b.stackIdx[strings.Clone(key)] = i
	return i
}

// pooledStack interns a stack-pool entry, remembering it by pool id: the
// content is hashed once per entry, not once per sample.
func (b *builder) pooledStack(id uint64, addrs []uint64) int32 {
	var p *uint64
	if len(addrs) > 0 {
		p = &addrs[0]
	}
	if id < uint64(len(b.pool)) {
		if s := &b.pool[id]; s.p == p && s.n == len(addrs) && p != nil {
			return s.idx
		}
	}
	i := b.internStack(addrs)
	if id < 1<<20 {
		for uint64(len(b.pool)) <= id {
			b.pool = append(b.pool, poolSlot{})
		}
		b.pool[id] = poolSlot{p, len(addrs), i}
	}
	return i
}

func (b *builder) thread(tid, pid uint32, name string) int32 {
	k := Thread{Tid: tid, Pid: pid, Name: name}
	if i, ok := b.threads[k]; ok {
		return i
	}
	i := int32(len(b.t.Threads))
	b.t.Threads = append(b.t.Threads, k)
	b.threads[k] = i
	return i
}

func (b *builder) link(l Link) int32 {
	if i, ok := b.links[l]; ok {
		return i
	}
	i := int32(len(b.t.Links))
	b.t.Links = append(b.t.Links, l)
	b.links[l] = i
	return i
}

func (b *builder) symbol(addr, depth uint64, f Frame) {
	es := b.syms[addr]
	for _, e := range es {
		if e.depth == depth {
			return // first entry wins; repeated tables are identical
		}
	}
	b.syms[addr] = append(es, symEntry{depth, f})
}

func (b *builder) pollStart(ts, worker, task uint64, loc string) {
	if i, ok := b.openPoll[worker]; ok {
		// A start without an end: the end was lost. Drop the open poll.
		b.t.Polls[i].End = 0
		b.unpaired++
		b.t.Polls[i].Start = 0
	}
	b.openPoll[worker] = int32(len(b.t.Polls))
	b.t.Polls = append(b.t.Polls, Poll{Worker: worker, Start: ts, TaskID: task, SpawnLoc: loc})
}

func (b *builder) pollEnd(ts, worker uint64) {
	i, ok := b.openPoll[worker]
	if !ok {
		b.pollEnds = append(b.pollEnds, orphanEnd{worker: worker, ts: ts})
		return
	}
	delete(b.openPoll, worker)
	b.t.Polls[i].End = ts
}

func (b *builder) park(ts, worker uint64, tid uint32) {
	if i, ok := b.openPark[worker]; ok {
		b.t.Parks[i].Start = 0
		b.unpaired++
	}
	b.openPark[worker] = int32(len(b.t.Parks))
	b.t.Parks = append(b.t.Parks, Park{Worker: worker, Tid: tid, Start: ts})
}

func (b *builder) unpark(ts, worker, wait uint64, tid uint32) {
	b.t.Unparks = append(b.t.Unparks, wait)
	i, ok := b.openPark[worker]
	if !ok {
		b.unparks = append(b.unparks, orphanEnd{worker: worker, ts: ts, wait: wait, tid: tid})
		return
	}
	delete(b.openPark, worker)
	b.t.Parks[i].End = ts
	b.t.Parks[i].SchedWaitNs = wait
}

// finish resolves the raw stacks against the file's symbols, producing
// Locations, Frames and Stacks of the partial trace.
func (b *builder) finish() {
	for _, k := range b.kindOrder {
		if k.count > 0 {
			b.t.Counts[k.name] += k.count
		}
	}
	frames := map[Frame]int32{}
	frame := func(f Frame) int32 {
		if i, ok := frames[f]; ok {
			return i
		}
		i := int32(len(b.t.Frames))
		b.t.Frames = append(b.t.Frames, f)
		frames[f] = i
		return i
	}
	locs := map[uint64]int32{}
	b.t.Stacks = make([]Stack, len(b.raw))
	for si, addrs := range b.raw {
		st := make(Stack, len(addrs))
		for j, a := range addrs {
			li, ok := locs[a]
			if !ok {
				loc := Location{Addr: a}
				if es := b.syms[a]; len(es) > 0 {
					slices.SortFunc(es, func(x, y symEntry) int { return cmp.Compare(x.depth, y.depth) })
					loc.Known = true
					for _, e := range es {
						loc.Frames = append(loc.Frames, frame(e.f))
					}
				} else {
					loc.Frames = []int32{frame(Frame{Func: fmt.Sprintf("0x%x", a)})}
				}
				li = int32(len(b.t.Locations))
				b.t.Locations = append(b.t.Locations, loc)
				locs[a] = li
			}
			st[j] = li
		}
		b.t.Stacks[si] = st
	}
	b.raw = nil
	b.info.Events = 0
	for _, k := range b.kindOrder {
		b.info.Events += k.count
	}
	b.t.Files = []FileInfo{b.info}
}
