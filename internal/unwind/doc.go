// Package unwind finds the whole user stack of a perf sample, in one place
// and once, on the read loop.
//
// A sample comes from package perf with the kernel's callchain (walked by
// frame pointers) and, when the session copies stacks, the user registers
// and the top of the user stack. [Walker.Sample] decides, per sample and
// by [Mode], what its user stack is:
//
//   - FramePointer: the kernel's chain, and the word at SP when the leaf
//     may not have pushed its frame yet (the leaf caller candidate).
//   - Auto and DWARF: the stack copy unwound by the rules of each frame's
//     code ([Unwinder]): the binary's compiled CFI ([Table], from its
//     .eh_frame and .debug_frame), Go's pcsp tables for Go code
//     ([GoFuncs]), the frame pointer for JIT code and code without rules.
//     Where the copy ends first, Auto carries on with the kernel's chain
//     from the last frame both found (spliced); DWARF stops there.
//   - Before a process's tables are read, the kernel's chain, and that it
//     is to wait for them: the caller keeps a copy of the stack and unwinds it
//     with [Walker.Unwind] once they are.
//
// What became of every stack is counted in [Stats] (unwound, complete,
// spliced, stopped by [Stop], waiting and what became of those).
//
// Leaf callers: a function sampled before it pushed its frame (its first
// instruction, a frameless leaf, after its epilogue) leaves the frame
// pointer at its caller's frame, so a frame-pointer step skips its caller,
// whose return address is the word at SP. The Walker keeps that word with
// the stack; at symbolization [InsertLeafCaller] puts it back where the
// binary's tables say the leaf had not pushed a frame
// (symbolize.Process.LeafCallerAtSP).
//
// Tables: the package compiles CFI sections and walks stacks, but reads
// no file. Package symbolize, the one reader of ELF files and owner of the
// binary cache, reads a binary's CFI sections and hands them to [Compile],
// keeps the table with the binary, and makes a process's Unwinder from its
// memory map (symbolize.Process.Unwinder). An Unwinder is immutable, so
// the read loop uses it while the symbol side goes on; a Walker is not
// safe for concurrent use (one per read loop).
//
// Only x86-64 stacks are unwound.
package unwind
