package analysistest

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/wire"
)

// Big describes a large directory of segments for load measurements.
type Big struct {
	Dir         string
	Bytes       int64 // total size to write, about
	SegmentSize int64 // about, per segment (default 100 MB)
	Stacks      int   // distinct stacks (default 300), 16 frames each
	Gzip        bool
}

// BigResult is what WriteBig wrote.
type BigResult struct {
	Files   []string
	Samples int64
	Polls   int64
	Bytes   int64 // on disk
}

// WriteBig writes segments PREFIX.N.bin(.gz) into b.Dir, in parallel, each
// like an exporter segment: clock sync and metadata streams, then batches
// of about 1 MiB, each a fresh stream with its own pools (CPU samples of 8
// threads, 4 of them workers with polls; every other sample linked to a
// span), then the symbol table.
func WriteBig(b Big, parallel int) (BigResult, error) {
	if b.SegmentSize == 0 {
		b.SegmentSize = 100 << 20
	}
	if b.Stacks == 0 {
		b.Stacks = 300
	}
	nseg := int((b.Bytes + b.SegmentSize - 1) / b.SegmentSize)
	// A fixed program: 1000 functions, stacks of 16 of them.
	const nfunc = 1000
	stacks := make([][]uint64, b.Stacks)
	x := uint64(88172645463325252)
	rnd := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	for i := range stacks {
		st := make([]uint64, 16)
		for j := range st {
			st[j] = 0x400000 + (rnd()%nfunc)*0x100 + rnd()%0x40
		}
		stacks[i] = st
	}
	type res struct {
		samples, polls, bytes int64
		err                   error
	}
	results := make([]res, nseg)
	files := make([]string, nseg)
	sem := make(chan struct{}, max(parallel, 1))
	done := make(chan int)
	for i := range nseg {
		name := filepath.Join(b.Dir, fmt.Sprintf("trace.%d.bin", i))
		if b.Gzip {
			name += ".gz"
		}
		files[i] = name
		go func() {
			sem <- struct{}{}
			defer func() { <-sem; done <- i }()
			results[i].samples, results[i].polls, results[i].bytes, results[i].err = writeBigSegment(name, b, i, stacks)
		}()
	}
	for range nseg {
		<-done
	}
	out := BigResult{Files: files}
	for _, r := range results {
		if r.err != nil {
			return out, r.err
		}
		out.Samples += r.samples
		out.Polls += r.polls
		out.Bytes += r.bytes
	}
	return out, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func writeBigSegment(name string, b Big, seg int, stacks [][]uint64) (samples, polls, size int64, err error) {
	f, err := os.Create(name)
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	var dst io.Writer = f
	var zw *gzip.Writer
	if b.Gzip {
		zw, _ = gzip.NewWriterLevel(f, gzip.BestSpeed)
		dst = zw
	}
	cw := &countingWriter{w: dst}
	bw := bufio.NewWriterSize(cw, 1<<20)
	w := wire.NewWriter(bw)
	ts := uint64(1_000_000_000_000) + uint64(seg)*60_000_000_000
	if err := w.WriteClockSync(wire.ClockSyncEvent{Timestamp: ts, RealtimeNs: 1_780_000_000_000_000_000 + ts}); err != nil {
		return 0, 0, 0, err
	}
	w.Reset()
	w.WriteSegmentMetadata(wire.SegmentMetadataEvent{Timestamp: ts, Entries: []wire.StringPair{
		{Key: convention.MetaService, Value: "big"}, {Key: convention.MetaWorkers, Value: "0,1,2,3"}}})
	w.WriteClockSync(wire.ClockSyncEvent{Timestamp: ts, RealtimeNs: 1_780_000_000_000_000_000 + ts})
	names := [8]string{"tokio-rt-worker-0", "tokio-rt-worker-1", "tokio-rt-worker-2", "tokio-rt-worker-3",
		"blocking-0", "blocking-1", "flush", "main"}
	spanIDs := make([]string, 64)
	for i := range spanIDs {
		spanIDs[i] = fmt.Sprintf("%016x", uint64(seg)<<32|uint64(i+1))
	}
	x := uint64(seg)*2654435761 + 1
	rnd := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	var pollOpen [4]bool
	const perBatch = 30000
	for n := 0; ; n++ {
		if n%perBatch == 0 {
			if err := w.Flush(); err != nil {
				return 0, 0, 0, err
			}
			if cw.n >= b.SegmentSize {
				break
			}
			if n > 0 {
				w.Reset()
			}
		}
		ts += 10_000 + rnd()%20_000
		th := n % 8
		if th < 4 && n%16 < 8 {
			// Workers alternate polls: start on one sample, end on the next.
			var err error
			if pollOpen[th] {
				err = w.WritePollEnd(wire.PollEndEvent{Timestamp: ts, WorkerID: uint64(th)})
				polls++
			} else {
				err = w.WritePollStart(wire.PollStartEvent{Timestamp: ts, WorkerID: uint64(th), TaskID: rnd() % 1000, SpawnLoc: "src/main.rs:10:5"})
			}
			if err != nil {
				return 0, 0, 0, err
			}
			pollOpen[th] = !pollOpen[th]
		}
		worker := uint64(255)
		if th < 4 {
			worker = uint64(th)
		}
		st := stacks[rnd()%uint64(len(stacks))]
		linked := n%2 == 0
		span := spanIDs[rnd()%uint64(len(spanIDs))]
		var src uint8
		if n%10 == 9 {
			src = 1
		}
		err := w.Write(CpuSampleSchema, ts, wire.VarintValue(worker), wire.U32Value(uint32(1000+th)), wire.U8Value(src),
			wire.PooledStringValue(names[th]), wire.PooledStackValue(st), wire.VarintValue(uint64(th%2)),
			opt(wire.PooledStringValue(TraceID), linked), opt(wire.PooledStringValue(span), linked),
			opt(wire.PooledStringValue(RootName), linked), opt(wire.VarintValue(50_000+rnd()%100_000), src == 1),
			opt(wire.U8Value(uint8(1+rnd()%2)), src == 1), wire.U32Value(4242), wire.Absent, wire.Absent, wire.Absent)
		if err != nil {
			return 0, 0, 0, err
		}
		samples++
	}
	// The symbol table, appended to the last batch (as dial9 does).
	for i := range 1000 {
		a := uint64(0x400000 + i*0x100)
		for off := uint64(0); off < 0x40; off++ {
			if err := w.WriteSymbolTableEntry(wire.SymbolTableEntry{Addr: a + off, SymbolName: fmt.Sprintf("app::module%d::function%d", i%17, i),
				SourceFile: fmt.Sprintf("src/module%d.rs", i%17), SourceLine: uint64(10 + i)}); err != nil {
				return 0, 0, 0, err
			}
		}
	}
	if err := w.Flush(); err != nil {
		return 0, 0, 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, 0, 0, err
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return 0, 0, 0, err
		}
	}
	st, err := f.Stat()
	if err != nil {
		return 0, 0, 0, err
	}
	return samples, polls, st.Size(), f.Close()
}
