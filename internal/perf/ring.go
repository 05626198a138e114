package perf

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is one mmap'ed perf buffer: a metadata page followed by a power of
// two number of data pages. The kernel moves data_head; we move data_tail.
type ring struct {
	fd      int
	cpu     int
	mem     []byte
	meta    *unix.PerfEventMmapPage
	data    []byte
	mask    uint64
	scratch []uint64 // wrapped records are copied here; uint64 keeps it aligned
}

func newRing(fd, cpu, dataPages int) (*ring, error) {
	page := unix.Getpagesize()
	mem, err := unix.Mmap(fd, 0, (1+dataPages)*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap perf ring of %d pages on cpu %d: %w", dataPages, cpu, err)
	}
	meta := (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0]))
	off, size := uint64(page), uint64(dataPages*page)
	// Kernels since 4.1 say where the data area is; older ones put it right
	// after the first page.
	if meta.Data_offset != 0 {
		off, size = meta.Data_offset, meta.Data_size
	}
	return &ring{
		fd:      fd,
		cpu:     cpu,
		mem:     mem,
		meta:    meta,
		data:    mem[off : off+size],
		mask:    size - 1,
		scratch: make([]uint64, 65536/8), // a record's size is a u16
	}, nil
}

func (r *ring) close() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem, r.data, r.meta = nil, nil, nil
	return err
}

// readStats counts what one pass over a ring found.
type readStats struct {
	records int
	corrupt int
}

// unread is the bytes written to the ring and not yet read.
func (r *ring) unread() uint64 {
	return atomic.LoadUint64(&r.meta.Data_head) - atomic.LoadUint64(&r.meta.Data_tail)
}

// read decodes every record between the tail and the head as read at the
// start, calling fn for each. The head is read once per call, not per record,
// so that a fast producer cannot keep the reader here forever. The tail is
// published only after fn has returned for every record, because the records
// handed to fn alias the ring.
func (r *ring) read(f *format, rec *Record, fn func(*Record)) readStats {
	var st readStats
	head := atomic.LoadUint64(&r.meta.Data_head)
	tail := atomic.LoadUint64(&r.meta.Data_tail)
	size := uint64(len(r.data))
	for tail < head {
		off := tail & r.mask
		// Headers never wrap: records are 8-byte aligned and the data
		// area is a multiple of 8.
		hsize := uint64(ne.Uint16(r.data[off+6:]))
		if hsize < 8 || hsize > head-tail || hsize > size {
			// The stream is unreadable from here: drop what is left
			// rather than decode garbage.
			st.corrupt++
			tail = head
			break
		}
		var b []byte
		if off+hsize <= size {
			b = r.data[off : off+hsize]
		} else {
			sb := unsafe.Slice((*byte)(unsafe.Pointer(&r.scratch[0])), len(r.scratch)*8)
			n := copy(sb, r.data[off:])
			copy(sb[n:hsize], r.data[:hsize-uint64(n)])
			b = sb[:hsize]
		}
		if err := f.decode(b, rec); err != nil {
			st.corrupt++
		} else {
			fn(rec)
			st.records++
		}
		tail += hsize
	}
	atomic.StoreUint64(&r.meta.Data_tail, tail)
	return st
}
