// Package segment writes trace batches into rotating segment files: a
// [Rotator] appends each batch, a complete TRC stream (or a run of legacy
// TOKIOTRC records), to the active file Dir/Prefix.N.bin.active and seals it
// to Prefix.N.bin when it passes a size or its wall-clock window ends.
//
// A segment is synced before it is sealed, and its directory after, and a
// compressed copy is synced before the .bin is removed, so that a power cut
// too leaves every sealed segment whole under one of its names. Segments
// are private to their owner by default (mode 0600, see
// [Options.FileMode]): they hold the stacks, span names and attributes of
// the programs profiled.
//
// Every segment is readable on its own: it starts with a ClockSync and the
// segment metadata (a legacy segment with its header and, from version 17, a
// SegmentMetadata record), and the legacy definitions handed to a batch
// start empty in every segment, so that each defines the callframes and
// threads it uses. Sealing is a rename, so after a crash the directory holds
// sealed segments and at most one .active file, which may end in a partial
// batch: every TRC batch ends with an empty string-pool frame, so that the
// next Rotator on the directory (see [New]) finds the end of the last whole
// batch, cuts the rest off and seals the file. The writer holds an flock on
// its .active file, so that recovery never touches a live writer's file. A
// failed write (a full disk) is cut back to the last whole batch and the
// next batch may succeed. Retention deletes the oldest sealed segments to
// keep the bytes of all segments under a bound, and sealed segments are
// gzipped in the background so that a batch that seals a large segment does
// not wait for compression.
//
// The package is not for encoding: the caller writes events with the
// internal/wire codecs through the writer it is handed. It does not decide
// what goes into a batch, reads segments back only to recover a leftover
// (through wire's readers: a legacy segment through the same legacy event
// adapter as internal/analysis, which reads them for the CLI), and knows
// nothing of the collector.
package segment
