package s3upload

import (
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/perfprof/perfprof/internal/wire"
)

// sealedIndex parses the segment number of a sealed segment's file name,
// PREFIX.N.bin or PREFIX.N.bin.gz, and whether it is gzipped. With
// gzipOnly (the rotator compresses), a .bin is not yet sealed for upload:
// it becomes a .bin.gz.
func sealedIndex(name, prefix string, gzipOnly bool) (n int, gz, ok bool) {
	rest, ok := strings.CutPrefix(name, prefix+".")
	if !ok {
		return 0, false, false
	}
	num, ext, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false, false
	}
	switch ext {
	case "bin.gz":
		gz = true
	case "bin":
		if gzipOnly {
			return 0, false, false
		}
	default:
		return 0, false, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || strconv.Itoa(n) != num {
		return 0, false, false
	}
	return n, gz, true
}

// header is what the start of a segment says about it.
type header struct {
	epoch int64             // Unix seconds of the first ClockSyncEvent; -1 if none
	meta  map[string]string // the first SegmentMetadataEvent
}

// maxHeaderEvents bounds the events read for the header: the rotator
// writes a ClockSyncEvent and the SegmentMetadataEvent first.
const maxHeaderEvents = 16

// readHeader reads the first ClockSyncEvent and SegmentMetadataEvent of a
// TRC segment (gzipped or not). A file that is not TRC (legacy tokiotrc)
// has none: epoch -1.
func readHeader(f io.Reader) header {
	h := header{epoch: -1}
	r := wire.NewReader(f)
	var ev wire.Event
	for range maxHeaderEvents {
		if err := r.ReadEvent(&ev); err != nil {
			break
		}
		switch ev.Name() {
		case wire.NameClockSync:
			if h.epoch < 0 {
				if ns, ok := ev.Uint(wire.FieldRealtimeNs); ok {
					h.epoch = int64(ns / 1e9)
				}
			}
		case wire.NameSegmentMetadata:
			if h.meta == nil {
				h.meta = metaEntries(&ev)
			}
		}
		if h.epoch >= 0 && h.meta != nil {
			break
		}
	}
	return h
}

// fileHeader reads the header of the segment at path; a segment without a
// ClockSyncEvent takes its modification time, the end of its writing.
func fileHeader(path string) (header, error) {
	f, err := os.Open(path)
	if err != nil {
		return header{}, err
	}
	defer f.Close()
	h := readHeader(f)
	if h.epoch < 0 {
		st, err := f.Stat()
		if err != nil {
			return header{}, err
		}
		h.epoch = st.ModTime().Unix()
	}
	return h, nil
}

// metaEntries copies the entries of a SegmentMetadataEvent (the reader
// overwrites the event's slices).
func metaEntries(ev *wire.Event) map[string]string {
	m := map[string]string{}
	if v := ev.Field(wire.FieldEntries); v != nil {
		for _, p := range v.Map {
			m[p.Key] = p.Value
		}
	}
	return m
}
