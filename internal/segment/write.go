package segment

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/perfprof/perfprof/internal/wire"
)

// WriteSegmentBatch writes one batch: fn writes a fresh stream (its header
// is already written) into w, which is then appended to the active segment,
// opening one if needed. Then the segment is rotated if it exceeds
// MaxFileSize or its time window has ended. A batch with no frames is
// dropped. fresh reports that the batch will be the first of a new segment,
// for callers that keep per-segment state, such as which symbols a segment
// already holds.
//
// A non-nil error means the batch was not written (the error of fn, or a
// write error, which wraps the OS error, e.g. syscall.ENOSPC): the segment
// holds only whole batches and the caller may retry, and must forget what
// it recorded as written by fn. Errors while sealing after a written batch
// are counted in Stats, not returned.
func (r *Rotator) WriteSegmentBatch(fn func(w *wire.Writer, fresh bool) error) error {
	if r.opts.LegacyVersion != 0 {
		return errors.New("segment: WriteSegmentBatch on a legacy rotator")
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
		if err == nil && r.buf.Len() > wire.HeaderSize {
			r.buf.Write(batchEnd)
		}
		return err
	}, wire.HeaderSize)
}

// WriteLegacyBatch writes one batch of legacy records into a rotator made
// with LegacyVersion set. fn writes records with w and the definitions they
// use with defs (CallframeDef, ThreadNameDef, SpawnLocationDef through the
// Ensure methods): defs starts empty in every segment, so that each segment
// is readable on its own. Errors and rotation are as for WriteSegmentBatch.
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
	if r.opts.OnBatch != nil {
		r.opts.OnBatch(r.n)
	}

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
	if err := mkdirAll(r.opts.Dir, dirMode(r.opts.FileMode)); err != nil {
		r.stats.WriteErrors++
		return fmt.Errorf("segment: create directory %s: %w", r.opts.Dir, err)
	}
	var f *os.File
	for range 1000 {
		var err error
		f, err = createFile(r.name(r.next, ".bin.active"), os.O_WRONLY|os.O_EXCL, r.opts.FileMode)
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
	// The lock tells a later process's recovery that this file has a
	// live writer.
	err := lockFile(f)
	var fi os.FileInfo
	if err == nil {
		fi, err = f.Stat()
	}
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
