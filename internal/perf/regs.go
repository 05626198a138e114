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

func (s *SampleRecord) reg(i int) (uint64, bool) {
	if s.RegsABI == 0 || len(s.RegsUser) != nRegsUser {
		return 0, false
	}
	return s.RegsUser[i], true
}

// UserSP returns the user stack pointer at the sample, when the session
// samples user registers (Options.StackUser) and the thread had a user
// context. The copied stack, Sample.StackUser, starts at it.
func (s *SampleRecord) UserSP() (uint64, bool) { return s.reg(regsIdxSP) }

// UserIP returns the user instruction pointer at the sample (see UserSP).
// For a sample taken in the kernel it is where the thread entered it.
func (s *SampleRecord) UserIP() (uint64, bool) { return s.reg(regsIdxIP) }

// UserBP returns the user frame pointer at the sample (see UserSP).
func (s *SampleRecord) UserBP() (uint64, bool) { return s.reg(regsIdxBP) }
