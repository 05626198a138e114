// Package analysis loads dial9 trace files (TRC v1 and legacy TOKIOTRC, raw
// or gzip, single files or directories of rotated segments) into a compact
// in-memory model, and computes the tables the perfprof CLI prints: function
// tables, folded stacks, long polls, blocking stacks and scheduling delays.
//
// Loading streams: events are decoded one at a time into reused memory and
// only what the analyses need is kept. Samples are fixed-size records without
// pointers that refer to interned stacks, threads and span links by index,
// so tens of millions of them cost little more than their bytes and nothing
// in garbage collection. Segments of a directory are decoded in parallel,
// each into its own partial Trace, and merged in file order.
//
// Symbols are resolved per file, because the address space is per file: the
// exporter gives conflicting addresses synthetic values numbered per segment,
// and dial9 appends each segment's symbol table at its end.
//
// Samples keep the context attributes of the thread context they were read
// in (http.route, ...; ContextAttributeSet events) through their Link, which
// the samples of one span share; ByAttr groups samples by one of them,
// which needs no span in the files.
//
// Both layouts are read as one stream of events: wire.Reader for TRC and
// wire.LegacyEventReader, wire's one interpretation of legacy records, for
// TOKIOTRC; fields are read through wire's typed readers (wire.Layout, and
// ReadSample's fast path for CPU samples), so the package spells no field
// name. Scan gives the same events to a
// callback, for perfprof dump.
//
// The package does not print anything; cmd/perfprof formats its results.
package analysis
