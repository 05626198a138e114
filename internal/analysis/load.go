package analysis

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Options configures Load.
type Options struct {
	// Parallel is how many files are decoded at once; 0 = GOMAXPROCS.
	Parallel int
	// Progress, if set, is called about every 200 ms and once at the end
	// with the bytes read from the input files so far and their total size.
	Progress func(done, total int64)
}

// Load expands paths (see Expand) and loads every file into one Trace.
// A decode error fails the load and names the file and byte offset; a
// truncated tail only adds a warning.
func Load(paths []string, opts Options) (*Trace, error) {
	files, err := Expand(paths)
	if err != nil {
		return nil, err
	}
	return LoadFiles(files, opts)
}

// LoadFiles loads the given files, in this order, without expanding
// directories.
func LoadFiles(files []string, opts Options) (*Trace, error) {
	var total int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return nil, err
		}
		total += st.Size()
	}
	var read atomic.Int64
	if opts.Progress != nil {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			tk := time.NewTicker(200 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					opts.Progress(read.Load(), total)
					return
				case <-tk.C:
					opts.Progress(read.Load(), total)
				}
			}
		}()
		defer func() { close(stop); <-done }()
	}

	par := opts.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	type result struct {
		t   *Trace
		err error
	}
	results := make([]chan result, len(files))
	for i := range results {
		results[i] = make(chan result, 1)
	}
	next := make(chan int)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for range min(par, len(files)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t, err := loadFile(files[i], &read)
				results[i] <- result{t, err}
			}
		}()
	}
	// Feed files in order, at most par ahead of the merge, so that memory
	// holds a bounded number of partial traces.
	sem := make(chan struct{}, par)
	go func() {
		defer close(next)
		for i := range files {
			select {
			case sem <- struct{}{}:
			case <-quit:
				return
			}
			select {
			case next <- i:
			case <-quit:
				return
			}
		}
	}()
	m := newMerger()
	var firstErr error
	for i := range files {
		r := <-results[i]
		<-sem
		if r.err != nil {
			firstErr = r.err
			break
		}
		m.add(r.t)
	}
	close(quit)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return m.finish(), nil
}

func loadFile(path string, read *atomic.Int64) (*Trace, error) {
	o, err := open(path, read)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	b := newBuilder(path)
	b.info.Format, b.info.Gzip, b.info.Size = o.format, o.gzip, o.size
	rd, version, err := o.events()
	if err == nil {
		b.info.Version = version
		err = b.decode(rd)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	b.finish()
	if b.unpaired > 0 {
		b.t.Warnings = append(b.t.Warnings, fmt.Sprintf("%s: %d poll or park starts without an end", path, b.unpaired))
	}
	if b.unresolvedSets > 0 {
		b.t.Warnings = append(b.t.Warnings, fmt.Sprintf("%s: %d samples name a context attribute set that no ContextAttributeSet "+
			"defined before them (read as without attributes)", path, b.unresolvedSets))
	}
	t := b.t
	t.pending = &pending{pollEnds: b.pollEnds, unparks: b.unparks, samples: append(b.sampleChunks, t.Samples)}
	t.Samples = nil
	return t, nil
}

// merger appends partial traces into one, remapping their table indices.
type merger struct {
	t        *Trace
	frames   map[Frame]int32
	locs     map[string]int32
	stacks   map[string]int32
	threads  map[Thread]int32
	links    map[Link]int32
	openPoll map[uint64]int32
	openPark map[uint64]int32
	unpaired int
	key      []byte
}

func newMerger() *merger {
	return &merger{
		t: &Trace{
			Counts:   map[string]int64{},
			Dropped:  map[string]uint64{},
			Metadata: map[string]string{},
			spanByID: map[string]int32{},
			AttrSets: []AttrSet{nil},
			attrIdx:  map[string]int32{},
		},
		frames:   map[Frame]int32{},
		locs:     map[string]int32{},
		stacks:   map[string]int32{},
		threads:  map[Thread]int32{},
		links:    map[Link]int32{},
		openPoll: map[uint64]int32{},
		openPark: map[uint64]int32{},
	}
}

func (m *merger) add(p *Trace) {
	t := m.t
	fi := p.Files[0]
	fi.FirstEvent = int64(len(t.Samples))
	t.Files = append(t.Files, fi)
	t.Warnings = append(t.Warnings, p.Warnings...)
	for k, v := range p.Counts {
		t.Counts[k] += v
	}
	for k, v := range p.Dropped {
		t.Dropped[k] += v
	}
	for k, v := range p.Metadata {
		t.Metadata[k] = v
	}
	if p.Start != 0 && (t.Start == 0 || p.Start < t.Start) {
		t.Start = p.Start
	}
	t.End = max(t.End, p.End)
	t.Clock = append(t.Clock, p.Clock...)
	t.Unparks = append(t.Unparks, p.Unparks...)

	// Tables.
	frameMap := mergeTable(&t.Frames, m.frames, p.Frames)
	locMap := make([]int32, len(p.Locations))
	for i, l := range p.Locations {
		k := m.key[:0]
		k = binary.LittleEndian.AppendUint64(k, l.Addr)
		for j := range l.Frames {
			l.Frames[j] = frameMap[l.Frames[j]]
			k = binary.LittleEndian.AppendUint32(k, uint32(l.Frames[j]))
		}
		m.key = k
		g, ok := m.locs[string(k)]
		if !ok {
			g = int32(len(t.Locations))
			t.Locations = append(t.Locations, l)
			m.locs[string(k)] = g
		}
		locMap[i] = g
	}
	stackMap := make([]int32, len(p.Stacks))
	for i, s := range p.Stacks {
		for j := range s {
			s[j] = locMap[s[j]]
		}
		var k string
		if len(s) > 0 {
			k = unsafe.String((*byte)(unsafe.Pointer(&s[0])), len(s)*4)
		}
		g, ok := m.stacks[k]
		if !ok {
			g = int32(len(t.Stacks))
			t.Stacks = append(t.Stacks, s)
			m.stacks[k] = g
		}
		stackMap[i] = g
	}
	threadMap := mergeTable(&t.Threads, m.threads, p.Threads)
	attrMap := make([]int32, len(p.AttrSets))
	for i, a := range p.AttrSets {
		attrMap[i] = t.internAttrs(a)
	}
	for i := range p.Links {
		p.Links[i].Attrs = attrMap[p.Links[i].Attrs]
	}
	linkMap := mergeTable(&t.Links, m.links, p.Links)
	n := 0
	for _, c := range p.pending.samples {
		n += len(c)
	}
	t.Samples = growSamples(t.Samples, n)
	for _, c := range p.pending.samples {
		for _, s := range c {
			s.Stack = stackMap[s.Stack]
			s.Thread = threadMap[s.Thread]
			if s.Link >= 0 {
				s.Link = linkMap[s.Link]
			}
			t.Samples = append(t.Samples, s)
		}
	}
	for _, sp := range p.Spans {
		t.spanByID[sp.SpanID] = int32(len(t.Spans))
		t.Spans = append(t.Spans, sp)
	}

	// Polls and parks: first close the ones left open by earlier files.
	d := p.pending
	for _, e := range d.pollEnds {
		if i, ok := m.openPoll[e.worker]; ok && t.Polls[i].Start <= e.ts {
			t.Polls[i].End = e.ts
			delete(m.openPoll, e.worker)
		} else {
			m.unpaired++
		}
	}
	for _, e := range d.unparks {
		if i, ok := m.openPark[e.worker]; ok && t.Parks[i].Start <= e.ts {
			t.Parks[i].End = e.ts
			t.Parks[i].SchedWaitNs = e.wait
			delete(m.openPark, e.worker)
		} else {
			m.unpaired++
		}
	}
	base := int32(len(t.Polls))
	for i, pl := range p.Polls {
		if pl.End == 0 && pl.Start != 0 {
			if _, ok := m.openPoll[pl.Worker]; ok {
				m.unpaired++
			}
			m.openPoll[pl.Worker] = base + int32(i)
		}
	}
	t.Polls = append(t.Polls, p.Polls...)
	base = int32(len(t.Parks))
	for i, pk := range p.Parks {
		if pk.End == 0 && pk.Start != 0 {
			if _, ok := m.openPark[pk.Worker]; ok {
				m.unpaired++
			}
			m.openPark[pk.Worker] = base + int32(i)
		}
	}
	t.Parks = append(t.Parks, p.Parks...)
}

func growSamples(s []TraceSample, n int) []TraceSample {
	if cap(s)-len(s) >= n {
		return s
	}
	c := max(2*cap(s), len(s)+n)
	ns := make([]TraceSample, len(s), c)
	copy(ns, s)
	return ns
}

func (m *merger) finish() *Trace {
	t := m.t
	open := len(m.openPoll) + len(m.openPark)
	polls := t.Polls[:0]
	for _, p := range t.Polls {
		if p.End != 0 && p.Start != 0 {
			polls = append(polls, p)
		}
	}
	t.Polls = polls
	parks := t.Parks[:0]
	for _, p := range t.Parks {
		if p.End != 0 && p.Start != 0 {
			parks = append(parks, p)
		}
	}
	t.Parks = parks
	if open > 0 {
		t.Warnings = append(t.Warnings, fmt.Sprintf("%d polls or parks still open at the end of the input (dropped)", open))
	}
	if m.unpaired > 0 {
		t.Warnings = append(t.Warnings, fmt.Sprintf("%d poll ends or unparks without a start (their start precedes the input)", m.unpaired))
	}
	return t
}

// mergeTable adds the entries of src missing from dst (indexed by idx) and
// returns, for each entry of src, its index in dst.
func mergeTable[T comparable](dst *[]T, idx map[T]int32, src []T) []int32 {
	out := make([]int32, len(src))
	for i, v := range src {
		g, ok := idx[v]
		if !ok {
			g = int32(len(*dst))
			*dst = append(*dst, v)
			idx[v] = g
		}
		out[i] = g
	}
	return out
}
