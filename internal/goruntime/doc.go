// Package goruntime reads, from a Go executable, where the state that an
// eBPF program needs to find a goroutine's pprof labels lives: the offset of
// the g pointer from the thread pointer, the offsets of runtime.g.m,
// runtime.m.curg and runtime.g.labels, and the layout of the label set that
// runtime/pprof stores in g.labels.
//
// The offsets come from the binary's own DWARF (debug/dwarf), so a runtime
// release that moves a field needs no change here. A binary built without
// DWARF (-ldflags=-w) falls back to a table of the releases measured when
// this package was written ([Layout.FromTable] is then true); a release
// missing from the table is refused rather than guessed.
//
// Label sets: since Go 1.24, g.labels points to a struct holding a slice of
// {key, value string} pairs sorted by key. Go 1.23 and older store a
// map[string]string there; that layout is recognised ([LabelsMap]) but not
// read by the eBPF program yet.
//
// The binary is the target's, and may be forged: Read refuses symbols and
// DWARF that inflate past 512 MiB, and checks the runtime's types with a
// bounded walk of its own before debug/dwarf reads them by recursion (a
// typedef that names itself, or a chain of a million types, would
// overflow the stack). A refusal wraps a *limits.Error.
//
// The package only reads files: it knows nothing of processes or BPF.
package goruntime
