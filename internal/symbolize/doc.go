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
//     line from the pcln tables with debug/gosym. Inlined calls are expanded
//     from the inline trees of the func table (FUNCDATA_InlTree,
//     PCDATA_InlTreeIndex; Go 1.20+ layout): one Frame per level, innermost
//     first, each caller at the line of its call site, ending with the
//     function of the machine code, as runtime.CallersFrames reports them.
//     The base of the funcdata offsets (go:func.*) comes from its symbol, or
//     in stripped binaries from runtime.firstmoduledata, found by its first
//     words. This works for binaries stripped with -ldflags='-s -w' and for
//     PIE binaries. Addresses outside the Go function table (cgo code) fall
//     back to the ELF symbols.
//   - Other ELF files: with DWARF, the functions of .debug_info and the calls
//     inlined into them: one Frame per inline level, innermost first (the
//     innermost function at the line of the address, then each caller at its
//     DW_AT_call_file:DW_AT_call_line), ending with the concrete function;
//     file and line from .debug_line. Without DWARF (or outside its
//     functions), the function from .symtab, else .dynsym (STT_FUNC and
//     STT_GNU_IFUNC symbols only, sizes honoured). DWARF is decoded one
//     compilation unit at a time, the first time an address in it is
//     looked up (see Parsing below).
//   - A binary without .symtab or DWARF is completed from its separate debug
//     file: /usr/lib/debug/.build-id/xx/yyyy.debug (build id checked), else
//     the .gnu_debuglink name next to the binary, in its .debug/ directory
//     or under /usr/lib/debug/DIR (CRC32 checked); each under
//     /proc/PID/root first, then on the host. The binary's own segments
//     still map addresses.
//   - C++ (_Z) and Rust (legacy _ZN…E, v0 _R) names are demangled into
//     Function (with parameters, as addr2line -C and perf print them; Rust
//     legacy names without their ::h<hash>); SystemName keeps the mangled
//     linkage name.
//   - The vDSO: its dynamic symbols, read from the process's memory.
//   - Anonymous executable memory (and addresses in no mapping): the
//     process's perf map, /tmp/perf-PID.map ("START SIZE name" in hex, as
//     Node's --perf-basic-prof, the JVM's Compiler.perfmap and CPython's
//     -X perf write it), looked for under /proc/PID/root first (with the
//     pid the process has in its own pid namespace, then with ours), then
//     on the host. A [PerfMap] reads what was appended since its last read,
//     or the whole file when it was written anew. A JIT reuses the memory
//     of freed code, so where lines overlap the one written last names the
//     address from then on: [Process.LookupAt] names an address as the map
//     stood at a generation (when it was sampled), [Process.Lookup] by the
//     newest lines.
//
// [LoadKernel] resolves kernel addresses from /proc/kallsyms.
//
// Binaries are opened through /proc/PID/map_files/START-END first, so that
// deleted files and files in other mount namespaces resolve (this needs
// root), then through /proc/PID/root/PATH, then PATH. A binary is opened when
// a Process first sees a mapping of it and kept open until it is parsed, so
// that addresses of a process that has exited in between still resolve.
//
// Parsing: a binary is parsed on the first lookup of an address in it, once
// while it stays cached (Stats.BinariesParsed). The parse reads its symbol
// tables (or Go's pcln tables) and, of its DWARF, only an index of which
// compilation unit holds which addresses: .debug_aranges, else the top DIE
// of each unit (DW_AT_low_pc, DW_AT_high_pc, DW_AT_ranges). A unit's line
// program, functions and inlined calls are decoded the first time an
// address in it is looked up, and kept (Stats.DWARFUnitsDecoded); the
// function walk descends only into DIEs that may hold code, and no deeper
// than 256 levels (Stats.DWARFTooDeep). Answers are those a parse of every
// unit would give (where functions share one range, as an assembly
// function and its aliases do, the last in the file names it).
//
// .debug_info is never held whole (5.8 MB for libc, hundreds of MB for a
// large C++ service): the parse reads it once from start to end, keeping
// where each unit is, and a unit is decoded from its own bytes, read at
// their offset, or for a compressed section (which can only be read
// forward from its start) on a pass over it. [Process.Prepare] decodes the
// units of many addresses, a report's, in one pass; the parse decodes
// those of the addresses that made it parse on its way (Stats.DWARFInfoRead,
// Stats.DWARFUnprepared). A unit larger than 64 MiB is left out
// (Stats.DWARFUnitsTooLarge). Decoding also reads the other DWARF sections
// (~2.7 MB for libc: abbreviations, line programs, strings, ranges): they
// are held while units are being decoded, and dropped by [Cache.Trim] when
// no unit was decoded in its last three calls (or sooner, over
// Options.MaxBytes); the file they come from (the binary or its separate
// debug file) stays open for the life of the cache entry, one descriptor
// per binary, and they are read from it again when a unit not yet decoded
// is needed (Stats.DWARFLoads, Stats.DWARFDrops, Stats.DWARFPeakBytes).
// Files whose units refer to each other (dwz, LTO) are decoded with their
// .debug_info held whole, up to 256 MiB.
//
// Bounds: a target's binaries, debug files and perf map are the target's
// to write, and may be forged. Every section read whole is refused past
// 256 MiB (what a compressed one inflates to, as its header says), a
// unit's line program is read up to 4 Mi rows and a binary's up to 16 Mi,
// and a perf map up to 256 MiB and 4 Mi lines. What reaches a bound loses
// its symbols or lines, never the rest; Options.Limits counts it (see
// package limits) and logs it once per binary or process.
//
// Binaries are cached by GNU build id, else Go build id; before a file is
// opened, by (dev, inode, size, mtime). Options.MaxBinaries bounds their
// number, and so the files held open; Stats.BytesHeld estimates the memory
// they hold.
//
// Unwind tables: a binary's .eh_frame and .debug_frame are read here, with
// its other sections and within the same bounds, and handed to package
// unwind, which compiles them; the table is cached with the binary and
// counts in its memory. [Process.Unwinder] makes an unwind.Unwinder over
// the tables of a process's binaries (Go code: what the pcln tables say of
// its functions, unwind.GoFuncs), and [Process.LeafCallerAtSP] answers,
// from the tables and the names, whether a word at SP is a frameless
// leaf's caller. The unwinding itself (walking a stack copy, splicing,
// leaf-caller recovery) is package unwind's.
//
// This package knows nothing about the collector or OTLP.
//
// Limitations of this first cut:
//
//   - Split DWARF (.dwo, .dwp) and compressed .gnu_debugdata (MiniDebugInfo)
//     are not read.
//   - For stripped Go binaries that were linked externally (cgo), the start of
//     the Go text is taken from the .text section, which may be off.
//   - Binaries with the same build id are assumed identical: the first one
//     parsed answers for all (a stripped copy and an unstripped copy share one
//     entry).
//
// Concurrency: a Cache and every Process made from it must be used by one
// goroutine at a time (the profiler calls them under one lock). A PerfMap
// locks: its owner keeps it current while stacks are named elsewhere.
package symbolize
