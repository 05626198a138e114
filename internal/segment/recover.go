package segment

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/perfprof/perfprof/internal/wire"
)

// batchEnd ends every TRC batch a Rotator writes: an empty string-pool
// frame (§A.3), which readers decode and ignore. A TRC stream has no length
// and may end after any frame, so without it a batch cut by a crash at a
// frame boundary would read as a whole, shorter batch.
var batchEnd = []byte{0x03, 0, 0, 0, 0}

// streamStart is the header of a TRC stream (§A.2).
var streamStart = []byte{'T', 'R', 'C', 0, 1}

// maxRecoverTries bounds the candidate batch ends checked in one leftover,
// each costing two decodes of the file: only a file damaged in the middle,
// not a crash, gets past the first few.
const maxRecoverTries = 8

// errBusy means another live process holds the lock of an active segment.
var errBusy = errors.New("locked by another process")

// cut says what recovery keeps of a leftover active segment.
type cut struct {
	keep    int64 // bytes of whole batches; 0 = nothing worth keeping
	dropped int64 // whole data events in the bytes cut off
}

// recoverActive seals the active segment of an earlier process at path,
// cut back to its last whole batch, or deletes it if no batch is whole.
// A leftover whose lock a live process holds fails New: two writers with
// one prefix in one directory would delete each other's segments.
func (r *Rotator) recoverActive(path string, n int) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		r.stats.RotateErrors++
		return nil // left as it is; numbering goes on after it
	}
	defer f.Close()
	if err := lockFile(f); err != nil {
		if errors.Is(err, errBusy) {
			return fmt.Errorf("segment: %s is being written by another process: "+
				"two writers with prefix %q share directory %s", path, r.opts.Prefix, r.opts.Dir)
		}
		r.stats.RotateErrors++
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		r.stats.RotateErrors++
		return nil
	}
	size := fi.Size()
	var c cut
	if r.opts.LegacyVersion != 0 {
		c, err = recoverLegacy(f, size)
	} else {
		c, err = recoverTRC(f, size)
	}
	if err != nil {
		r.stats.RotateErrors++
		return nil
	}
	r.stats.RecoveredCutBytes += size - c.keep
	r.stats.RecoveredDroppedEvents += c.dropped
	if c.keep == 0 {
		if os.Remove(path) != nil {
			r.stats.RotateErrors++
			return nil
		}
		r.stats.RecoveredEmpty++
		return nil
	}
	if c.keep < size && f.Truncate(c.keep) != nil {
		r.stats.RotateErrors++
		return nil
	}
	// Sync before the rename, even with nothing cut: the dead writer never
	// synced, and a recovered .bin must not come back shorter or longer
	// after a power cut. Sync the directory after it, so that the sealed
	// name is what a power cut leaves.
	if syncFile(f) != nil {
		r.stats.RotateErrors++
		return nil
	}
	sealed := r.name(n, ".bin")
	if os.Rename(path, sealed) != nil {
		r.stats.RotateErrors++
		return nil
	}
	if syncParent(sealed) != nil {
		r.stats.RotateErrors++ // sealed all the same
	}
	r.stats.Recovered++
	r.sealed = append(r.sealed, file{n, sealed, c.keep})
	if r.opts.Compress {
		r.pending = append(r.pending, n)
	}
	return nil
}

// recoverTRC finds the end of the last whole batch of a TRC segment: the
// largest offset p where the bytes before p decode without error and end
// with batchEnd as a frame of its own, followed by a stream header or the
// end of the file.
func recoverTRC(f *os.File, size int64) (cut, error) {
	// Frames before the first undecodable one are whole; a batch end can
	// only lie there.
	limit := size
	if _, err := decode(f, 0, size); err != nil {
		var fe *wire.FormatError
		if !errors.As(err, &fe) {
			return cut{}, err
		}
		limit = fe.FrameOffset
	}
	ends, err := batchEnds(f, size, limit)
	if err != nil {
		return cut{}, err
	}
	var keep int64
	for i := len(ends) - 1; i >= 0 && i >= len(ends)-maxRecoverTries; i-- {
		p := ends[i]
		with, err1 := decode(f, 0, p)
		without, err2 := decode(f, 0, p-int64(len(batchEnd)))
		// Decoding both ways proves the last five bytes form a frame: an
		// event ending in the same bytes would not leave one more pool
		// frame and as many events.
		if err1 == nil && err2 == nil && with.Headers == without.Headers && with.Events == without.Events &&
			with.StringPoolFrames == without.StringPoolFrames+1 {
			keep = p
			break
		}
	}
	c := cut{keep: keep}
	if keep < size {
		// The cut bytes start with a stream header (or are the whole file).
		c.dropped = dataEvents(f, keep, size)
	}
	return c, nil
}

// decode reads the TRC stream in f[off:end] to its end and returns what it
// counted, or the first error.
func decode(f *os.File, off, end int64) (wire.Stats, error) {
	rd := wire.NewReader(io.NewSectionReader(f, off, end-off))
	var ev wire.Event
	for {
		err := rd.ReadEvent(&ev)
		if err == io.EOF {
			return rd.Stats(), nil
		}
		if err != nil {
			return rd.Stats(), err
		}
	}
}

// dataEvents counts the whole events in f[off:end] other than the segment
// start's ClockSync and SegmentMetadata.
func dataEvents(f *os.File, off, end int64) int64 {
	rd := wire.NewReader(io.NewSectionReader(f, off, end-off))
	var ev wire.Event
	var n int64
	for rd.ReadEvent(&ev) == nil {
		if !segmentStart(&ev) {
			n++
		}
	}
	return n
}

// segmentStart reports whether ev is one of the events a Rotator starts
// every segment with (§A.10), not data.
func segmentStart(ev *wire.Event) bool {
	name := ev.Name()
	return name == wire.NameClockSync || name == wire.NameSegmentMetadata
}

// batchEnds returns the offsets p ≤ limit, in order, where batchEnd ends
// just before p and a stream header follows, or p is limit: the frame at
// limit does not decode, so whatever follows is no batch.
func batchEnds(f *os.File, size, limit int64) ([]int64, error) {
	pattern := append(bytes.Clone(batchEnd), streamStart...)
	br := bufio.NewReaderSize(io.NewSectionReader(f, 0, size), 64<<10)
	var ends []int64
	var win []byte // the bytes after off, with the last len(pattern)-1 of the previous chunk
	var off int64  // file offset of win[0]
	chunk := make([]byte, 64<<10)
	for {
		n, err := io.ReadFull(br, chunk)
		win = append(win, chunk[:n]...)
		for i := 0; ; {
			j := bytes.Index(win[i:], pattern)
			if j < 0 {
				break
			}
			if p := off + int64(i+j+len(batchEnd)); p < limit {
				ends = append(ends, p)
			}
			i += j + 1
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("segment: read: %w", err)
		}
		keep := min(len(win), len(pattern)-1)
		off += int64(len(win) - keep)
		win = append(win[:0], win[len(win)-keep:]...)
	}
	if limit >= int64(len(batchEnd)) {
		tail := make([]byte, len(batchEnd))
		if _, err := f.ReadAt(tail, limit-int64(len(batchEnd))); err != nil {
			return nil, fmt.Errorf("segment: read: %w", err)
		}
		if bytes.Equal(tail, batchEnd) {
			ends = append(ends, limit)
		}
	}
	return ends, nil
}

// recoverLegacy keeps the whole records of a TOKIOTRC segment. Legacy
// batches have no boundary on disk, so a batch cut at a record boundary
// keeps its whole records. A segment with no record but its start is not
// kept.
func recoverLegacy(f *os.File, size int64) (cut, error) {
	rd, err := wire.NewLegacyEventReader(io.NewSectionReader(f, 0, size))
	if err != nil {
		return cut{}, nil // not even a whole header
	}
	var ev wire.Event
	var records int64
	keep := size
	for {
		err := rd.ReadEvent(&ev)
		if err == io.EOF {
			break
		}
		var le *wire.LegacyError
		if errors.As(err, &le) {
			keep = le.Offset
			break
		}
		if err != nil {
			return cut{}, err
		}
		if !segmentStart(&ev) {
			records++
		}
	}
	if records == 0 {
		return cut{}, nil
	}
	return cut{keep: keep}, nil
}
