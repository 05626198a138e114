package unwind

import (
	"encoding/binary"

	"github.com/perfprof/perfprof/internal/perf"
)

// ne reads stack copies, which are in the machine's byte order.
var ne = binary.NativeEndian

// InsertLeafCaller recovers the caller of a leaf function that the
// frame-pointer walk skipped. While a function has not pushed its frame
// (at its first instruction, in a leaf compiled without one, or after its
// epilogue popped it) the frame pointer still points at its caller's
// frame, so the kernel's chain goes from the leaf to its caller's caller.
// The return address of the leaf is then the word at SP.
//
// chain is a raw callchain (context markers kept), stack the user stack
// copied from SP (perf.Sample.StackUser), and atSP reports whether, at a leaf
// pc, the return address is at [SP]. When it is, and the word at SP is not
// already the entry after the leaf, InsertLeafCaller returns the chain with
// that word inserted after the leaf user frame, built in dst[:0]; otherwise
// it returns chain itself. It allocates only when dst is too small.
func InsertLeafCaller(dst, chain []uint64, stack []byte, atSP func(pc uint64) bool) []uint64 {
	if len(stack) < 8 {
		return chain
	}
	// The leaf user frame: the first entry after PERF_CONTEXT_USER, or the
	// first entry when the chain has no markers.
	leaf := -1
	for i, a := range chain {
		if a == perf.ContextUser {
			if i+1 < len(chain) && chain[i+1] < perf.ContextMax {
				leaf = i + 1
			}
			break
		}
		if a >= perf.ContextMax {
			continue
		}
		if i == 0 {
			// No marker before a first address: an unmarked chain is user
			// only; keep looking for a marker in a marked one.
			leaf = 0
		}
	}
	if leaf < 0 {
		return chain
	}
	ra := ne.Uint64(stack)
	if ra == 0 || ra >= perf.ContextMax {
		return chain
	}
	if leaf+1 < len(chain) && chain[leaf+1] == ra {
		return chain
	}
	if !atSP(chain[leaf]) {
		return chain
	}
	dst = append(dst[:0], chain[:leaf+1]...)
	dst = append(dst, ra)
	return append(dst, chain[leaf+1:]...)
}

// leafCandidate returns the word at SP of an on-CPU sample whose leaf may
// not have pushed its frame yet, 0 when there is none. Whether it is the
// leaf's caller is for the binary's unwind tables to say, at symbolization
// (InsertLeafCaller, with symbolize.Process.LeafCallerAtSP).
func leafCandidate(s *perf.SampleRecord) uint64 {
	if len(s.StackUser) < 8 {
		return 0
	}
	var leafPC uint64
	reached := false
	// InsertLeafCaller checks the chain and the stack copy, and calls back
	// for the leaf pc only when the word at SP could be inserted.
	InsertLeafCaller(nil, s.Callchain, s.StackUser, func(pc uint64) bool {
		leafPC, reached = pc, true
		return false
	})
	if !reached {
		return 0
	}
	// The registers must describe the same leaf as the chain.
	if ip, ok := s.UserIP(); !ok || ip != leafPC {
		return 0
	}
	return ne.Uint64(s.StackUser)
}

// splitChain splits a raw callchain at its PERF_CONTEXT_USER marker: the
// kernel part (with its marker) and the user addresses.
func splitChain(chain []uint64) (kernel, user []uint64) {
	for i, a := range chain {
		if a == perf.ContextUser {
			return chain[:i], chain[i+1:]
		}
	}
	if len(chain) > 0 && chain[0] < perf.ContextMax {
		return nil, chain // unmarked: user only
	}
	return chain, nil
}

// fpAfter returns the frames of the kernel's user chain after the first
// that holds ra: the callers of the frame where the unwinding stopped, as
// the frame pointers found them. Recursion may make it the wrong one of
// several frames of one function, which changes only the depth shown.
func fpAfter(user []uint64, ra uint64) ([]uint64, bool) {
	for i, a := range user {
		if a == ra {
			return user[i+1:], true
		}
	}
	return nil, false
}
