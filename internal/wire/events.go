package wire

import "encoding/binary"

// Typed forms of the built-in events, for the Writer's fast path. Each
// Write method encodes exactly what Write with the matching *Schema and
// values would, without building Values. Timestamps are absolute ns.

// PollStartEvent is a task poll beginning on a worker.
type PollStartEvent struct {
	Timestamp  uint64
	WorkerID   uint64
	LocalQueue uint8 // capped at 255
	TaskID     uint64
	SpawnLoc   string // "file:line:col"
}

// PollEndEvent is a task poll ending.
type PollEndEvent struct {
	Timestamp uint64
	WorkerID  uint64
}

// WorkerParkEvent is a worker going idle.
type WorkerParkEvent struct {
	Timestamp  uint64
	WorkerID   uint64
	LocalQueue uint8
	CPUTimeNs  uint64 // thread CPU time
	Tid        uint32
}

// WorkerUnparkEvent is a worker waking up.
type WorkerUnparkEvent struct {
	Timestamp   uint64
	WorkerID    uint64
	LocalQueue  uint8
	CPUTimeNs   uint64
	SchedWaitNs uint64 // schedstat wait delta while parked
	Tid         uint32
}

// CpuSampleEvent is one perf sample: a stack on a thread.
type CpuSampleEvent struct {
	Timestamp  uint64
	WorkerID   uint64 // 255 = not a worker, 254 = blocking pool
	Tid        uint32
	Source     uint8 // 0 = CPU profile, 1 = sched event
	ThreadName Opt[string]
	Callchain  []uint64 // leaf first
	CPU        Opt[uint64]
}

// SymbolTableEntry maps an address to a symbol, appended by the symbolizer.
type SymbolTableEntry struct {
	Timestamp   uint64 // 0 upstream
	Addr        uint64
	Size        uint64
	SymbolName  string
	InlineDepth uint64 // 0 = outermost
	SourceFile  string
	SourceLine  uint64
}

// ClockSyncEvent pairs the monotonic Timestamp with a Unix-epoch reading.
type ClockSyncEvent struct {
	Timestamp  uint64
	RealtimeNs uint64
}

// SegmentMetadataEvent carries key/value metadata of a segment.
type SegmentMetadataEvent struct {
	Timestamp uint64
	Entries   []StringPair
}

func (w *Writer) WritePollStart(e PollStartEvent) error {
	if w.err != nil {
		return w.err
	}
	loc := w.internString(e.SpawnLoc)
	if err := w.begin(PollStartSchema, e.Timestamp); err != nil {
		return err
	}
	b := binary.AppendUvarint(w.buf, e.WorkerID)
	b = append(b, e.LocalQueue)
	b = binary.AppendUvarint(b, e.TaskID)
	w.buf = le.AppendUint32(b, loc)
	return w.maybeFlush()
}

func (w *Writer) WritePollEnd(e PollEndEvent) error {
	if w.err != nil {
		return w.err
	}
	if err := w.begin(PollEndSchema, e.Timestamp); err != nil {
		return err
	}
	w.buf = binary.AppendUvarint(w.buf, e.WorkerID)
	return w.maybeFlush()
}

func (w *Writer) WriteWorkerPark(e WorkerParkEvent) error {
	if w.err != nil {
		return w.err
	}
	if err := w.begin(WorkerParkSchema, e.Timestamp); err != nil {
		return err
	}
	b := binary.AppendUvarint(w.buf, e.WorkerID)
	b = append(b, e.LocalQueue)
	b = binary.AppendUvarint(b, e.CPUTimeNs)
	w.buf = le.AppendUint32(b, e.Tid)
	return w.maybeFlush()
}

func (w *Writer) WriteWorkerUnpark(e WorkerUnparkEvent) error {
	if w.err != nil {
		return w.err
	}
	if err := w.begin(WorkerUnparkSchema, e.Timestamp); err != nil {
		return err
	}
	b := binary.AppendUvarint(w.buf, e.WorkerID)
	b = append(b, e.LocalQueue)
	b = binary.AppendUvarint(b, e.CPUTimeNs)
	b = binary.AppendUvarint(b, e.SchedWaitNs)
	w.buf = le.AppendUint32(b, e.Tid)
	return w.maybeFlush()
}

// WriteCpuSample interns the thread name before the callchain, as upstream.
func (w *Writer) WriteCpuSample(e CpuSampleEvent) error {
	if w.err != nil {
		return w.err
	}
	var name uint32
	if e.ThreadName.Valid {
		name = w.internString(e.ThreadName.V)
	}
	stack := w.internStack(e.Callchain)
	if err := w.begin(CpuSampleSchema, e.Timestamp); err != nil {
		return err
	}
	b := binary.AppendUvarint(w.buf, e.WorkerID)
	b = le.AppendUint32(b, e.Tid)
	b = append(b, e.Source)
	if e.ThreadName.Valid {
		b = append(b, 1)
		b = le.AppendUint32(b, name)
	} else {
		b = append(b, 0)
	}
	b = le.AppendUint32(b, stack)
	if e.CPU.Valid {
		b = append(b, 1)
		b = binary.AppendUvarint(b, e.CPU.V)
	} else {
		b = append(b, 0)
	}
	w.buf = b
	return w.maybeFlush()
}

func (w *Writer) WriteSymbolTableEntry(e SymbolTableEntry) error {
	if w.err != nil {
		return w.err
	}
	sym := w.internString(e.SymbolName)
	file := w.internString(e.SourceFile)
	if err := w.begin(SymbolTableEntrySchema, e.Timestamp); err != nil {
		return err
	}
	b := binary.AppendUvarint(w.buf, e.Addr)
	b = binary.AppendUvarint(b, e.Size)
	b = le.AppendUint32(b, sym)
	b = binary.AppendUvarint(b, e.InlineDepth)
	b = le.AppendUint32(b, file)
	w.buf = binary.AppendUvarint(b, e.SourceLine)
	return w.maybeFlush()
}

func (w *Writer) WriteClockSync(e ClockSyncEvent) error {
	if w.err != nil {
		return w.err
	}
	if err := w.begin(ClockSyncSchema, e.Timestamp); err != nil {
		return err
	}
	w.buf = binary.AppendUvarint(w.buf, e.RealtimeNs)
	return w.maybeFlush()
}

func (w *Writer) WriteSegmentMetadata(e SegmentMetadataEvent) error {
	if w.err != nil {
		return w.err
	}
	if err := w.begin(SegmentMetadataSchema, e.Timestamp); err != nil {
		return err
	}
	v := Value{Type: StringMap, Map: e.Entries}
	w.appendValue(&v)
	return w.maybeFlush()
}
