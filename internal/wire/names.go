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
	NameSpan             = "SpanEvent" // perfprof's own, written before the span contract
	// NameContextAttributeSet is perfprof's own: an interned set of
	// context attributes that samples refer to by id.
	NameContextAttributeSet = "ContextAttributeSet"

	// dial9's span wire contract (docs/dial9-span-contract.md): events
	// named by a kind prefix and a {Type} suffix, one {Type} for the
	// three. perfprof writes the OTel spans it receives as type OtelSpan.
	NameSpanClosePrefix = "SpanClose__"
	NameSpanEnterPrefix = "SpanEnter__"
	NameSpanExitPrefix  = "SpanExit__"
	SpanTypeOTel        = "OtelSpan"
	NameSpanCloseOTel   = NameSpanClosePrefix + SpanTypeOTel
	NameSpanEnterOTel   = NameSpanEnterPrefix + SpanTypeOTel
	NameSpanExitOTel    = NameSpanExitPrefix + SpanTypeOTel

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

// Field names of dial9's span contract, and perfprof's OTel ids on its
// span events. On SpanClose__/SpanEnter__/SpanExit__ events FieldSpanID
// is dial9's varint span id (perfprof writes the instance id there), not
// an OTel id: those are FieldTraceID, FieldOTelSpanID and
// FieldOTelParentSpanID, lowercase hex.
const (
	FieldSpanInstanceID   = "span_instance_id"
	FieldStartTimestampNs = "start_timestamp_ns"
	FieldSpanName         = "span_name"
	FieldOTelSpanID       = "otel_span_id"
	FieldOTelParentSpanID = "otel_parent_span_id"
	// On the close: the parent's span_instance_id when it is known (never
	// made up), when the span first had its thread, and the sum of its
	// entered intervals (0 = not reported).
	FieldParentSpanInstanceID  = "parent_span_instance_id"
	FieldFirstEnterTimestampNs = "first_enter_timestamp_ns"
	FieldActiveNs              = "active_ns"
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
