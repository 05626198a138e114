package segment

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
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
	// FileMode is the permission of the segments, .active, sealed and
	// compressed alike; 0 = 0600. The directories the Rotator creates get
	// it with x wherever it has r (0640 → 0750); directories that exist
	// keep their mode. The mode is given exactly, whatever the umask. The
	// owner must have read and write: recovery and compression reopen the
	// files.
	FileMode os.FileMode
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
	// Held, if set, reports the sealed segments held past MaxTotalSize
	// (the segments around a slow span): retention neither deletes them
	// nor counts their bytes. OnBatch, if set, is told the number of the
	// segment each batch went into. Both are called under the Rotator's
	// lock and must not call it.
	Held    func(n int) bool
	OnBatch func(n int)
}

// Stats counts what a [Rotator] did.
type Stats struct {
	Segments     int   // segments sealed
	Deleted      int   // sealed segments deleted by retention
	Abandoned    int   // active segments that vanished from outside
	Batches      int64 // batches written
	BytesWritten int64 // bytes written (segment starts and batches; uncompressed)
	WriteErrors  int64 // failed writes (the batch was not written)
	RotateErrors int64 // failed seals, compressions, retention deletions and recoveries

	// Active segments of an earlier process (one that crashed) found by
	// New: sealed, cut back to their last whole batch, or deleted when
	// no batch in them was whole.
	Recovered              int
	RecoveredEmpty         int
	RecoveredCutBytes      int64 // bytes cut off: partial batches, garbage, deleted leftovers
	RecoveredDroppedEvents int64 // whole events in those bytes (those of a partial batch)
}

// Rotator writes batches, each a complete TRC stream, into rotating segment
// files (see trace-format.md part B and §A.10). Every segment starts with a
// stream holding a ClockSyncEvent and a stream holding the
// SegmentMetadataEvent and another ClockSyncEvent; batches follow. Sealing a
// segment renames it from .bin.active to .bin (then gzips it when
// Compress is set), so after a crash Dir holds complete sealed segments and
// at most one .active segment made of whole batches.
//
// A write error (e.g. disk full) is returned by WriteSegmentBatch and the
// segment is truncated back to its last complete batch; the Rotator keeps
// working and a later batch succeeds once space is available. A Rotator is
// safe for concurrent use; the fn of a batch runs under its lock.
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
// missing. It fails if Dir cannot be written to, or if another live process
// writes an active segment with the same prefix there. Active segments left
// by an earlier process are recovered: cut back to their last whole batch
// and sealed (deleted if none is whole). Numbering continues after the
// segments already in Dir; nothing is written until the first batch.
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
	if opts.FileMode == 0 {
		opts.FileMode = defaultFileMode
	}
	if opts.FileMode&^0o777 != 0 || opts.FileMode&0o600 != 0o600 {
		return nil, fmt.Errorf("segment: file mode %#o: want permission bits only (at most 0777), with read and write for the owner", uint32(opts.FileMode))
	}
	r := &Rotator{opts: opts, now: opts.Now, mono: opts.Monotonic}
	if r.now == nil {
		r.now = time.Now
	}
	if r.mono == nil {
		r.mono = defaultMonotonic
	}
	r.meta = sortedPairs(opts.Metadata)
	if err := mkdirAll(opts.Dir, dirMode(opts.FileMode)); err != nil {
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
	r.retain()
	if len(r.pending) > 0 {
		r.compressing = true
		r.wg.Add(1)
		go r.compressLoop()
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
	if r.batches == 0 {
		f.Close()
		os.Remove(path)
		return nil
	}
	if r.trunc {
		if f.Truncate(r.size) == nil {
			r.trunc = false
		}
	}
	// The data goes to disk before the rename and the rename before
	// anything else happens to the segment (compression removes the .bin):
	// otherwise a power cut can leave a sealed name over missing data, or
	// neither name. A failed sync still seals: the page cache holds what
	// there is, and keeping the file .active would not get it to disk.
	var errs []error
	if !r.trunc {
		if err := syncFile(f); err != nil {
			errs = append(errs, fmt.Errorf("segment: sync %s: %w", path, err))
		}
	}
	if err := f.Close(); err != nil {
		errs = append(errs, fmt.Errorf("segment: close %s: %w", path, err))
	}
	if r.trunc {
		// The file may end with a partial batch: keep it as .active.
		return fmt.Errorf("segment: cannot truncate %s before sealing", path)
	}
	sealed := r.name(r.n, ".bin")
	if err := os.Rename(path, sealed); err != nil {
		return fmt.Errorf("segment: seal: %w", err)
	}
	if err := syncParent(sealed); err != nil {
		errs = append(errs, fmt.Errorf("segment: sync directory of %s: %w", sealed, err))
	}
	r.stats.Segments++
	s := file{r.n, sealed, r.size}
	err := errors.Join(errs...)
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

// Close seals the active segment (deleting it if it holds no batch) and
// waits for the compression of sealed segments. Later batches fail.
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
