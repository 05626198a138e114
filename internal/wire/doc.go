// Package wire reads and writes dial9 trace files: the self-describing
// format with magic "TRC\x00" and version 1, and the legacy TOKIOTRC format
// (versions 13 to 18) that came before it.
//
// A TRC file is a concatenation of independent streams. Each stream starts
// with a HeaderSize-byte header and carries its own schema table, string
// pool, stack pool and timestamp base; a header in the middle of a file
// resets all of them. Frames appended after the last stream without a
// header (the symbolizer's SymbolTableEntry events) continue that stream's
// state.
//
// [Reader] decodes every frame type (schema, event, string pool, stack pool,
// timestamp reset, schema annotations), unwraps gzip, resolves pool
// references and turns timestamp deltas into absolute nanoseconds. Events
// are returned for every schema, known or not, with their values in schema
// order and addressable by field name. [Reader.ReadEvent] decodes into a
// caller-owned [Event] and does not allocate in steady state.
//
// [Writer] writes frames in the order of the upstream encoder: per event,
// pool frames for newly interned strings and stacks, the schema frame the
// first time an event type appears in the stream, a timestamp reset when
// the 24-bit delta cannot express the timestamp, then the event. It never
// writes annotation frames. Typed methods write the built-in runtime events
// (events.go) and perfprof's own fields, SpanEvent and ContextAttributeSet
// (ext.go) without building Values.
//
// The typed readers are the other half of the typed writers: a [Layout],
// found once per schema ([LayoutOf]), reads a decoded Event into the struct
// its Write method takes, so that no reader outside this package looks
// fields up by name. Event and field names are spelled once (names.go).
// CPU samples, most of a trace, also have a fast path: [Reader.ReadSample]
// and [LegacyEventReader.ReadSample] decode them straight into a
// [CpuSampleRead], the typed form Layout.CpuSample gives, without the
// generic Values in between.
//
// [LegacyReader] and [LegacyWriter] read and write TOKIOTRC records
// ([LegacyRecord]), gzip included on the read side; [LegacyDefs] writes the
// definition records a legacy file needs before their first use.
// [LegacyEventReader] is the one interpretation of legacy records as
// events: it presents each as the TRC event it stands for, which the typed
// readers then read as they read TRC ones.
//
// Decode errors are *[FormatError] (TRC) and *[LegacyError] (TOKIOTRC)
// values naming the byte offset (in the decompressed stream) and what was
// being decoded; conditions a caller may act on are sentinel errors checked
// with errors.Is, and a truncated file yields an error wrapping
// io.ErrUnexpectedEOF after the complete events or records.
//
// The package holds codecs only. Rotating, retaining and compressing segment
// files is internal/segment; exporting profiles and analysing traces live
// elsewhere, and the package knows nothing of the collector.
package wire
