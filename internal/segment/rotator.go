package segment

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/wire"
)

// Options configures a [Rotator].
type Options struct {
	// Dir and Prefix name the segments: Dir/Prefix.N.bin.active while being
	// written, Dir/Prefix.N.bin once sealed (Dir/Prefix.N.bin.gz when
	// Compress is set).
	Dir, Prefix string
	// MaxFileSize rotates after a batch when the segment holds more than
	// this many bytes, so a segment may exceed it by one batch. 0 = off.
	MaxFileSize int64
	// Interval rotates at wall-clock multiples of Interval since the epoch
	// (e.g. the top of each minute): the first batch or Tick at or after the
	// boundary seals the segment opened before it. 0 = off.
	Interval time.Duration
	// MaxTotalSize bounds the bytes written to sealed segments plus the
	// active one; the oldest sealed segments are deleted first (existing
	// segments found in Dir count with their size on disk). The active
	// segment is never deleted. 0 = unlimited.
	MaxTotalSize int64
	// Compress gzips sealed segments to .bin.gz and removes the .bin.
	Compress bool
	// Metadata is written as a SegmentMetadataEvent at the start of every
	// segment (see SetMetadata).
	Metadata map[string]string
	// LegacyVersion, if not 0, makes the segments legacy TOKIOTRC files of
	// that version, written with WriteLegacyBatch: a 12-byte header, then,
	// from version 17, a SegmentMetadata record. The legacy layouts have no
	// clock sync.
	LegacyVersion uint32
	// Now is the wall clock, for tests; nil = time.Now.
	Now func() time.Time
	// Monotonic returns CLOCK_MONOTONIC nanoseconds, the clock of event
	// timestamps, for the ClockSync events; nil = the runtime's monotonic
	// clock (CLOCK_MONOTONIC on Linux).
	Monotonic func() uint64
}

// Stats counts what a [Rotator] did.
type Stats struct {
	Segments     int   // segments sealed
	Deleted      int   // sealed segments deleted by retention
	Abandoned    int   // active segments that vanished from outside
	Batches      int64 // batches written
	BytesWritten int64 // bytes written (segment starts and batches; uncompressed)
	WriteErrors  int64 // failed writes (the batch was not written)
	RotateErrors int64 // failed seals, compressions and retention deletions
}

// Rotator writes batches, each a complete TRC stream, into rotating segment
// files (see trace-format.md part B and §A.10). Every segment starts with a
// stream holding a ClockSyncEvent and a stream holding the
// SegmentMetadataEvent and another ClockSyncEvent; batches follow. Sealing a
// segment renames it from .bin.active to .bin (then gzips it when
// Compress is set), so after a crash Dir holds complete sealed segments and
// at most one .active segment made of whole batches.
//
// A write error (e.g. disk full) is returned by WriteBatch and the segment is
// truncated back to its last complete batch; the Rotator keeps working and a
// later WriteBatch succeeds once space is available. A Rotator is safe for
// concurrent use; fn of WriteBatch runs under its lock.
type Rotator struct {
	mu   sync.Mutex
	opts Options
	now  func() time.Time
	mono func() uint64
	meta []wire.StringPair

	next     int         // number of the next segment to open
	f        *os.File    // active segment, nil if none
	fi       os.FileInfo // of f at open, to notice it vanishing
	n        int         // number of the active segment
	size     int64       // bytes of complete content in f
	batches  int         // batches in f
	deadline time.Time   // time rotation boundary of f
	trunc    bool        // f may hold bytes past size
	metaNew  bool        // metadata changed: re-emit before the next batch

	sealed []file // oldest first

	pending     []int          // sealed segments waiting for compression
	compressing bool           // compressLoop runs
	wg          sync.WaitGroup // compressLoop
	buf         bytes.Buffer
	w           *wire.Writer       // batch encoder over buf
	lw          *wire.LegacyWriter // legacy batch encoder over buf, per segment
	defs        wire.LegacyDefs    // legacy definitions written into the active segment
	closed      bool
	stats       Stats
}

type file struct {
	n    int
	path string
	size int64 // bytes written (size on disk for segments found at start)
}

// defaultMonotonic reads CLOCK_MONOTONIC, the clock of perf samples and
// of the dial9 writers, for ClockSync events.
func defaultMonotonic() uint64 { return clock.Monotonic() }

// New returns a Rotator writing into opts.Dir, which it creates if
// missing. It fails if Dir cannot be written to. Numbering continues after
// the segments (sealed or active) already in Dir; nothing is written until
// the first batch.
func New(opts Options) (*Rotator, error) {
	if opts.Dir == "" {
		opts.Dir = "."
	}
	if opts.Prefix == "" || strings.ContainsAny(opts.Prefix, `/\`) {
		return nil, fmt.Errorf("segment: invalid prefix %q", opts.Prefix)
	}
	if opts.MaxFileSize < 0 || opts.MaxTotalSize < 0 || opts.Interval < 0 {
		return nil, errors.New("segment: negative size or interval")
	}
	if v := opts.LegacyVersion; v != 0 && (v < wire.LegacyMinVersion || v > wire.LegacyMaxVersion) {
		return nil, fmt.Errorf("segment: legacy version %d: %w (supported %d..%d)",
			v, wire.ErrLegacyVersion, wire.LegacyMinVersion, wire.LegacyMaxVersion)
	}
	r := &Rotator{opts: opts, now: opts.Now, mono: opts.Monotonic}
	if r.now == nil {
		r.now = time.Now
	}
	if r.mono == nil {
		r.mono = defaultMonotonic
	}
	r.meta = sortedPairs(opts.Metadata)
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("segment: cannot create directory %s: %w", opts.Dir, err)
	}
	probe, err := os.CreateTemp(opts.Dir, "."+opts.Prefix+".probe-*")
	if err != nil {
		return nil, fmt.Errorf("segment: directory %s is not writable: %w", opts.Dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	if err := r.scan(); err != nil {
		return nil, err
	}
	return r, nil
}

func sortedPairs(m map[string]string) []wire.StringPair {
	p := make([]wire.StringPair, 0, len(m))
	for k, v := range m {
		p = append(p, wire.StringPair{Key: k, Value: v})
	}
	slices.SortFunc(p, func(a, b wire.StringPair) int { return strings.Compare(a.Key, b.Key) })
	return p
}

// parseName returns N and the suffix (".bin", ".bin.gz", ".bin.active") of
// a segment name Prefix.N.suffix.
func (r *Rotator) parseName(name string) (int, string, bool) {
	rest, ok := strings.CutPrefix(name, r.opts.Prefix+".")
	if !ok {
		return 0, "", false
	}
	num, suffix, ok := strings.Cut(rest, ".")
	if !ok || num == "" || strings.TrimLeft(num, "0123456789") != "" {
		return 0, "", false
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return 0, "", false
	}
	switch suffix = "." + suffix; suffix {
	case ".bin", ".bin.gz", ".bin.active":
		return n, suffix, true
	}
	return 0, "", false
}

// scan finds the existing segments: sealed ones join the retention list,
// and numbering continues after all of them. Active leftovers of an earlier
// process are left alone.
func (r *Rotator) scan() error {
	ents, err := os.ReadDir(r.opts.Dir)
	if err != nil {
		return fmt.Errorf("segment: scan %s: %w", r.opts.Dir, err)
	}
	byN := map[int]file{}
	for _, e := range ents {
		n, suffix, ok := r.parseName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		r.next = max(r.next, n+1)
		if suffix == ".bin.active" {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		s := file{n, filepath.Join(r.opts.Dir, e.Name()), info.Size()}
		if old, ok := byN[n]; ok && strings.HasSuffix(old.path, ".bin") {
			continue // .bin and .bin.gz: compression was interrupted
		}
		byN[n] = s
	}
	for _, s := range byN {
		r.sealed = append(r.sealed, s)
	}
	slices.SortFunc(r.sealed, func(a, b file) int { return a.n - b.n })
	return nil
}

func (r *Rotator) name(n int, suffix string) string {
	return filepath.Join(r.opts.Dir, r.opts.Prefix+"."+strconv.Itoa(n)+suffix)
}

// SetMetadata replaces the segment metadata. If it differs, it is written
// again (SegmentMetadataEvent and ClockSyncEvent) before the next batch of
// the active segment, and at the start of later segments.
func (r *Rotator) SetMetadata(m map[string]string) {
	p := sortedPairs(m)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Equal(p, r.meta) {
		r.meta = p
		r.metaNew = r.f != nil
	}
}

var errClosed = errors.New("segment: closed")

// WriteBatch writes one batch: fn writes a fresh stream (its header is
// already written) into w, which is then appended to the active segment,
// opening one if needed. Then the segment is rotated if it exceeds
// MaxFileSize or its time window has ended. A batch with no frames is
// dropped.
//
// A non-nil error means the batch was not written (the error of fn, or a
// write error, which wraps the OS error, e.g. syscall.ENOSPC): the segment
// holds only whole batches and the caller may retry. Errors while sealing
// after a written batch are counted in Stats, not returned.
func (r *Rotator) WriteBatch(fn func(w *wire.Writer) error) error {
	return r.WriteSegmentBatch(func(w *wire.Writer, _ bool) error { return fn(w) })
}

// WriteSegmentBatch is WriteBatch for callers that keep per-segment state,
// such as which symbols a segment already holds: fresh reports that the
// batch will be the first of a new segment. If WriteSegmentBatch fails, the
// batch is not in any segment, and the caller must forget what it recorded
// as written by fn.
func (r *Rotator) WriteSegmentBatch(fn func(w *wire.Writer, fresh bool) error) error {
	if r.opts.LegacyVersion != 0 {
		return errors.New("segment: WriteBatch on a legacy rotator")
	}
	return r.writeBatch(func(fresh bool) error {
		if r.w == nil {
			r.w = wire.NewWriter(&r.buf)
		} else if err := r.w.Reset(); err != nil {
			return err
		}
		err := fn(r.w, fresh)
		if ferr := r.w.Flush(); err == nil {
			err = ferr
		}
		return err
	}, wire.HeaderSize)
}

// WriteLegacyBatch writes one batch of legacy records into a rotator made
// with LegacyVersion set. fn writes records with w and the definitions they
// use with defs (CallframeDef, ThreadNameDef, SpawnLocationDef through the
// Ensure methods): defs starts empty in every segment, so that each segment
// is readable on its own. Errors and rotation are as for WriteBatch.
func (r *Rotator) WriteLegacyBatch(fn func(w *wire.LegacyWriter, defs *wire.LegacyDefs) error) error {
	if r.opts.LegacyVersion == 0 {
		return errors.New("segment: WriteLegacyBatch on a TRC rotator")
	}
	return r.writeBatch(func(fresh bool) error {
		if fresh || r.lw == nil {
			// A new writer per segment: LegacyDefs starts over when it
			// sees a writer it has not seen.
			r.buf.Reset()
			lw, err := wire.NewLegacyWriter(&r.buf, r.opts.LegacyVersion)
			if err != nil {
				return err
			}
			r.lw = lw
		}
		r.buf.Reset()
		if err := fn(r.lw, &r.defs); err != nil {
			r.defs.NewFile()
			r.lw = nil
			return err
		}
		return nil
	}, 0)
}

// writeBatch encodes a batch into r.buf with encode and appends it to the
// active segment. A batch of at most empty bytes holds nothing and is dropped.
func (r *Rotator) writeBatch(encode func(fresh bool) error, empty int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errClosed
	}
	now := r.now()
	if r.f != nil && r.batches > 0 && r.timeUp(now) {
		r.rotateCounted()
	}
	if r.f != nil && r.vanished() {
		r.abandon()
	}

	// Encode the batch first, so that a failing encoder writes nothing.
	r.buf.Reset()
	if err := encode(r.f == nil); err != nil {
		return err
	}
	if r.buf.Len() <= empty {
		return nil
	}
	if r.f == nil {
		if err := r.open(now); err != nil {
			r.forgetSegment()
			return err
		}
	}
	data := r.buf.Bytes()
	if r.metaNew {
		// Re-emitted metadata goes in the same write as the batch.
		data = append(r.segmentStart(false), data...)
	}
	if err := r.write(data); err != nil {
		r.forgetSegment()
		return err
	}
	r.metaNew = false
	r.batches++
	r.stats.Batches++

	if (r.opts.MaxFileSize > 0 && r.size > r.opts.MaxFileSize) || r.timeUp(now) {
		r.rotateCounted()
	}
	r.retain()
	return nil
}

// forgetSegment drops the legacy definitions of a batch that was not
// written, so that the next batch writes them again.
func (r *Rotator) forgetSegment() {
	r.defs.NewFile()
	r.lw = nil
}

// write appends data to the active segment, or truncates it back.
func (r *Rotator) write(data []byte) error {
	if r.trunc {
		if err := r.f.Truncate(r.size); err != nil {
			r.stats.WriteErrors++
			return fmt.Errorf("segment: truncate %s: %w", r.f.Name(), err)
		}
		r.trunc = false
	}
	n, err := r.f.WriteAt(data, r.size)
	if err != nil {
		r.stats.WriteErrors++
		if terr := r.f.Truncate(r.size); terr != nil {
			r.trunc = true
		}
		return fmt.Errorf("segment: %w", err) // err names the file
	}
	r.size += int64(n)
	r.stats.BytesWritten += int64(n)
	return nil
}

func (r *Rotator) timeUp(now time.Time) bool {
	return r.opts.Interval > 0 && !now.Before(r.deadline)
}

// segmentStart encodes stream 1 (header, ClockSync; only if first) and
// stream 2 (header, SegmentMetadata, ClockSync) of §A.10. For a legacy
// segment it is the header (only if first) and, from version 17, a
// SegmentMetadata record.
func (r *Rotator) segmentStart(first bool) []byte {
	var b bytes.Buffer
	if v := r.opts.LegacyVersion; v != 0 {
		lw, _ := wire.NewLegacyWriter(&b, v) // the version was checked by New
		if !first {
			b.Reset()
		}
		if v >= 17 {
			md := make([]wire.LegacyKV, len(r.meta))
			for i, p := range r.meta {
				md[i] = wire.LegacyKV{Key: p.Key, Value: p.Value}
			}
			// An entry too long for the format is left out rather than failing the segment.
			_ = lw.Write(&wire.LegacyRecord{Code: wire.LegacySegmentMetadata, TsNs: uint64(r.now().UnixNano()), Metadata: md})
		}
		return b.Bytes()
	}
	mono := r.mono()
	cs := wire.ClockSyncEvent{Timestamp: mono, RealtimeNs: uint64(r.now().UnixNano())}
	w := wire.NewWriter(&b)
	if first {
		w.WriteClockSync(cs)
		w.Reset()
	}
	w.WriteSegmentMetadata(wire.SegmentMetadataEvent{Timestamp: mono, Entries: r.meta})
	w.WriteClockSync(cs)
	w.Flush() // a bytes.Buffer does not fail
	return b.Bytes()
}

// open creates the next segment and writes its start.
func (r *Rotator) open(now time.Time) error {
	if err := os.MkdirAll(r.opts.Dir, 0o755); err != nil {
		r.stats.WriteErrors++
		return fmt.Errorf("segment: create directory %s: %w", r.opts.Dir, err)
	}
	var f *os.File
	for range 1000 {
		var err error
		f, err = os.OpenFile(r.name(r.next, ".bin.active"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			r.stats.WriteErrors++
			return fmt.Errorf("segment: create segment: %w", err)
		}
		r.next++
	}
	if f == nil {
		r.stats.WriteErrors++
		return fmt.Errorf("segment: create segment: %s exists", r.name(r.next, ".bin.active"))
	}
	fi, err := f.Stat()
	if err == nil {
		data := r.segmentStart(true)
		if _, err = f.Write(data); err == nil {
			r.stats.BytesWritten += int64(len(data))
			r.size = int64(len(data))
		}
	}
	if err != nil {
		r.stats.WriteErrors++
		f.Close()
		if os.Remove(f.Name()) != nil {
			r.next++
		}
		return fmt.Errorf("segment: start segment %s: %w", f.Name(), err)
	}
	r.f, r.fi, r.n = f, fi, r.next
	r.next++
	r.batches, r.trunc, r.metaNew = 0, false, false
	if iv := r.opts.Interval; iv > 0 {
		// The end of the window [k·iv, (k+1)·iv) since the epoch holding now.
		ns, d := now.UnixNano(), int64(iv)
		start := ns - ns%d
		if ns%d < 0 {
			start -= d
		}
		r.deadline = time.Unix(0, start+d)
	}
	return nil
}

// vanished reports whether the active file is no longer in Dir.
func (r *Rotator) vanished() bool {
	fi, err := os.Stat(r.f.Name())
	return err != nil || !os.SameFile(fi, r.fi)
}

func (r *Rotator) abandon() {
	r.f.Close()
	r.f = nil
	r.stats.Abandoned++
}

// Rotate seals the active segment, if any (deleting it if it holds no
// batch). The next batch opens a new segment.
func (r *Rotator) Rotate() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errClosed
	}
	err := r.rotate()
	r.retain()
	return err
}

// Tick performs time rotation without a batch: it seals the active segment
// if its time window has ended. Call it periodically when batches may stop.
func (r *Rotator) Tick() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.f == nil || !r.timeUp(r.now()) {
		return nil
	}
	err := r.rotate()
	r.retain()
	return err
}

func (r *Rotator) rotateCounted() {
	if r.rotate() != nil {
		r.stats.RotateErrors++
	}
}

func (r *Rotator) rotate() error {
	if r.f == nil {
		return nil
	}
	if r.vanished() {
		r.abandon()
		return nil
	}
	f := r.f
	r.f = nil
	path := f.Name()
	if r.trunc {
		if f.Truncate(r.size) == nil {
			r.trunc = false
		}
	}
	cerr := f.Close()
	if r.batches == 0 {
		os.Remove(path)
		return nil
	}
	if r.trunc {
		// The file may end with a partial batch: keep it as .active.
		return fmt.Errorf("segment: cannot truncate %s before sealing", path)
	}
	sealed := r.name(r.n, ".bin")
	if err := os.Rename(path, sealed); err != nil {
		return fmt.Errorf("segment: seal: %w", err)
	}
	r.stats.Segments++
	s := file{r.n, sealed, r.size}
	var err error
	if cerr != nil {
		err = fmt.Errorf("segment: close %s: %w", path, cerr)
	}
	r.sealed = append(r.sealed, s)
	if r.opts.Compress {
		// Compress in the background, so that a batch that seals a
		// 100 MB segment does not wait seconds for gzip.
		r.pending = append(r.pending, s.n)
		if !r.compressing {
			r.compressing = true
			r.wg.Add(1)
			go r.compressLoop()
		}
	}
	return err
}

// compressLoop gzips the segments sealed for compression, one at a time,
// until none is pending. A segment that retention deleted meanwhile leaves
// no .gz behind.
func (r *Rotator) compressLoop() {
	defer r.wg.Done()
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.pending) > 0 {
		n := r.pending[0]
		r.pending = r.pending[1:]
		r.mu.Unlock()
		gz, err := compressFile(r.name(n, ".bin"))
		r.mu.Lock()
		i := slices.IndexFunc(r.sealed, func(s file) bool { return s.n == n })
		switch {
		case i < 0:
			if err == nil {
				os.Remove(gz)
			}
		case err != nil:
			r.stats.RotateErrors++ // the .bin stays, uncompressed
		default:
			r.sealed[i].path = gz
		}
	}
	r.compressing = false
}

// compressFile gzips path to path.gz and removes path.
func compressFile(path string) (string, error) {
	gz := path + ".gz"
	in, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("segment: compress: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(gz, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return "", fmt.Errorf("segment: compress: %w", err)
	}
	zw := gzip.NewWriter(out)
	_, err = io.Copy(zw, in)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(gz)
		return "", fmt.Errorf("segment: compress %s: %w", path, err)
	}
	os.Remove(path)
	return gz, nil
}

// retain deletes the oldest sealed segments while sealed plus active bytes
// exceed MaxTotalSize.
func (r *Rotator) retain() {
	if r.opts.MaxTotalSize <= 0 {
		return
	}
	var total int64
	if r.f != nil {
		total = r.size
	}
	for _, s := range r.sealed {
		total += s.size
	}
	for total > r.opts.MaxTotalSize && len(r.sealed) > 0 {
		s := r.sealed[0]
		r.sealed = r.sealed[1:]
		total -= s.size
		r.stats.Deleted++
		for _, p := range []string{s.path, r.name(s.n, ".bin"), r.name(s.n, ".bin.gz")} {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				r.stats.RotateErrors++
			}
		}
	}
}

// Close seals the active segment (deleting it if it holds no batch) and
// waits for the compression of sealed segments. Later calls of WriteBatch
// fail.
func (r *Rotator) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	err := r.rotate()
	r.retain()
	r.mu.Unlock()
	r.wg.Wait()
	return err
}

// Stats returns the counters so far.
func (r *Rotator) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}
