package perf

// User registers sampled with Options.StackUser, as bit numbers of enum
// perf_event_x86_regs in <asm/perf_regs.h> (x86-64). The kernel writes the
// registers of sample_regs_user in increasing bit order.
const (
	regBP = 6
	regSP = 7
	regIP = 8

	regsMask = 1<<regBP | 1<<regSP | 1<<regIP
)

// Index of each register in Sample.RegsUser.
const (
	regsIdxBP = iota
	regsIdxSP
	regsIdxIP
	nRegsUser
)

func (s *Sample) reg(i int) (uint64, bool) {
	if s.RegsABI == 0 || len(s.RegsUser) != nRegsUser {
		return 0, false
	}
	return s.RegsUser[i], true
}

// UserSP returns the user stack pointer at the sample, when the session
// samples user registers (Options.StackUser) and the thread had a user
// context. The copied stack, Sample.StackUser, starts at it.
func (s *Sample) UserSP() (uint64, bool) { return s.reg(regsIdxSP) }

// UserIP returns the user instruction pointer at the sample (see UserSP).
// For a sample taken in the kernel it is where the thread entered it.
func (s *Sample) UserIP() (uint64, bool) { return s.reg(regsIdxIP) }

// UserBP returns the user frame pointer at the sample (see UserSP).
func (s *Sample) UserBP() (uint64, bool) { return s.reg(regsIdxBP) }

// InsertLeafCaller recovers the caller of a leaf function that the
// frame-pointer walk skipped. While a function has not pushed its frame
// (at its first instruction, in a leaf compiled without one, or after its
// epilogue popped it) the frame pointer still points at its caller's
// frame, so the kernel's chain goes from the leaf to its caller's caller.
// The return address of the leaf is then the word at SP.
//
// chain is a raw callchain (context markers kept), stack the user stack
// copied from SP (Sample.StackUser), and atSP reports whether, at a leaf
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
		if a == ContextUser {
			if i+1 < len(chain) && chain[i+1] < ContextMax {
				leaf = i + 1
			}
			break
		}
		if a >= ContextMax {
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
	if ra == 0 || ra >= ContextMax {
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
