// Package wire reads and writes dial9 trace files in the self-describing
// format with magic "TRC\x00" and version 1 (dial9-trace-format).
//
// A file is a concatenation of independent streams. Each stream starts with
// a 5-byte header and carries its own schema table, string pool, stack pool
// and timestamp base; a header in the middle of a file resets all of them.
// Frames appended after the last stream without a header (the symbolizer's
// SymbolTableEntry events) continue that stream's state.
//
// [Reader] decodes every frame type (schema, event, string pool, stack pool,
// timestamp reset, schema annotations), unwraps gzip, resolves pool
// references and turns timestamp deltas into absolute nanoseconds. Events
// are returned for every schema, known or not, with their values in schema
// order and addressable by field name. [Reader.ReadEvent] decodes into a
// caller-owned [Event] and does not allocate in steady state.
//
// [Writer] produces byte-for-byte what the upstream Rust encoder produces:
// per event, pool frames for newly interned strings and stacks, the schema
// frame the first time an event type appears in the stream, a timestamp
// reset when the 24-bit delta cannot express the timestamp, then the event.
// It never writes annotation frames, which the JS decoder of mid-2026 cannot
// read. Typed helpers write the built-in runtime events.
//
// Decode errors are *[FormatError] values naming the byte offset (in the
// decompressed stream) and what was being decoded; conditions a caller may
// act on are sentinel errors checked with errors.Is, and a truncated file
// yields an error wrapping io.ErrUnexpectedEOF after the complete events.
//
// The package is not for rotating segment files, exporting profiles or
// analysing traces, and knows nothing of the collector. The legacy TOKIOTRC
// format (before 2026-03-17) lives in the legacy*.go files.
package wire
