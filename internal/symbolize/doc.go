// Package symbolize turns instruction addresses sampled in a running process
// into function names and source positions (file:line), locally, next to the
// binaries that were executing.
//
// A [Cache] holds parsed binaries shared by all processes; a [Process] is the
// view of one pid: its executable mappings, read from /proc/PID/maps, each
// bound to the binary it maps. [Process.Lookup] finds the mapping of an
// address, translates the runtime address into the binary's ELF virtual
// address with the PT_LOAD program header that holds the mapping's file
// offset (so PIE executables, non-PIE executables and shared libraries all
// work), and resolves it:
//
//   - Go binaries (a .gopclntab or .go.buildinfo section): function, file and
//     line from the pcln tables with debug/gosym. This works for binaries
//     stripped with -ldflags='-s -w' and for PIE binaries. Addresses outside
//     the Go function table (cgo code) fall back to the ELF symbols.
//   - Other ELF files: the function from .symtab, else .dynsym (STT_FUNC and
//     STT_GNU_IFUNC symbols only, sizes honoured), and file and line from
//     .debug_line when the binary has DWARF.
//   - The vDSO: its dynamic symbols, read from the process's memory.
//
// [LoadKernel] resolves kernel addresses from /proc/kallsyms.
//
// Binaries are opened through /proc/PID/map_files/START-END first, so that
// deleted files and files in other mount namespaces resolve (this needs
// root), then through /proc/PID/root/PATH, then PATH. A binary is opened when
// a Process first sees a mapping of it and kept open until it is parsed, so
// that addresses of a process that has exited in between still resolve.
//
// This package is not for unwinding stacks, for reading separate debug files
// (/usr/lib/debug), or for symbolizing JIT code (perf-PID.map); nor does it
// know anything about the collector or OTLP.
//
// Limitations of this first cut:
//
//   - One frame per address: inlined calls are not expanded. For Go, an
//     address inside an inlined body reports the outer function with the file
//     and line of the inlined code, as the pcln tables record them.
//   - No demangling: for C++ and Rust symbols SystemName == Function.
//   - For stripped Go binaries that were linked externally (cgo), the start of
//     the Go text is taken from the .text section, which may be off.
//   - Binaries with the same build id are assumed identical: the first one
//     parsed answers for all (a stripped copy and an unstripped copy share one
//     entry).
//
// Concurrency: a Cache and every Process made from it must be used by one
// goroutine at a time (the receiver calls them from a single goroutine).
// Nothing here locks.
package symbolize
