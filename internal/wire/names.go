package wire

// Event and field names of the trace files, spelled once: the schemas of
// the writers, the typed readers and the legacy adapter use these, and
// readers outside this package go through the typed readers instead of
// looking fields up by these strings (§A.8, docs/trace-conventions.md).

// Event names: the schema names of the events perfprof writes or reads.
const (
	NamePollStart        = "PollStartEvent"
	NamePollEnd          = "PollEndEvent"
	NameWorkerPark       = "WorkerParkEvent"
	NameWorkerUnpark     = "WorkerUnparkEvent"
	NameCpuSample        = "CpuSampleEvent"
	NameSymbolTableEntry = "SymbolTableEntry"
	NameClockSync        = "ClockSyncEvent"
	NameSegmentMetadata  = "SegmentMetadataEvent"
	NameSpan             = "SpanEvent" // perfprof's own
	// NameContextAttributeSet is perfprof's own: an interned set of
	// context attributes that samples refer to by id.
	NameContextAttributeSet = "ContextAttributeSet"

	// dial9 events perfprof passes over, named here for the legacy records
	// that the adapter presents under them.
	NameQueueSample   = "QueueSampleEvent"
	NameTaskSpawn     = "TaskSpawnEvent"
	NameTaskTerminate = "TaskTerminateEvent"
	NameWakeEvent     = "WakeEventEvent"
)

// Field names of the built-in events (§A.8).
const (
	FieldWorkerID    = "worker_id"
	FieldLocalQueue  = "local_queue"
	FieldTaskID      = "task_id"
	FieldSpawnLoc    = "spawn_loc"
	FieldCPUTimeNs   = "cpu_time_ns"
	FieldSchedWaitNs = "sched_wait_ns"
	FieldTid         = "tid"
	FieldSource      = "source"
	FieldThreadName  = "thread_name"
	FieldCallchain   = "callchain"
	FieldCPU         = "cpu"
	FieldAddr        = "addr"
	FieldSize        = "size"
	FieldSymbolName  = "symbol_name"
	FieldInlineDepth = "inline_depth"
	FieldSourceFile  = "source_file"
	FieldSourceLine  = "source_line"
	FieldRealtimeNs  = "realtime_ns"
	FieldEntries     = "entries"
)

// Field names of perfprof's additions (ext.go).
const (
	FieldTraceID      = "trace_id"
	FieldSpanID       = "span_id"
	FieldSpanRootName = "span_root_name"
	FieldValueNs      = "value_ns"
	// FieldCPUTimeDeltaNs and FieldLinkSource are perfprof's
	// thread.cpu.time_delta and span.link.source of a CpuSampleEvent.
	FieldCPUTimeDeltaNs = "cpu_time_delta_ns"
	FieldLinkSource     = "link_source"
	FieldThreadState    = "thread_state"
	FieldPid            = "pid"
	FieldParentSpanID   = "parent_span_id"
	FieldName           = "name"
	FieldDurationNs     = "duration_ns"
	FieldService        = "service"
	// FieldContextSetID is a CpuSampleEvent's reference to the
	// ContextAttributeSet whose FieldSetID it is; FieldAttributes that
	// set's key/value pairs.
	FieldContextSetID = "context_set_id"
	FieldSetID        = "set_id"
	FieldAttributes   = "attributes"
)

// Field names of the legacy records' own events (legacy_events.go).
const (
	fieldGlobalQueue  = "global_queue"
	fieldID           = "id"
	fieldLocation     = "location"
	fieldWakerTaskID  = "waker_task_id"
	fieldWokenTaskID  = "woken_task_id"
	fieldTargetWorker = "target_worker"
	fieldSymbol       = "symbol"
)
