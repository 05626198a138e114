package perfprofreceiver

import "github.com/perfprof/perfprof/internal/perf"

// leafStackBytes is the user stack copied per sample for
// recover_leaf_caller: the return address is at SP, so 8 would do; 512
// leaves room to recover deeper prologue states later, for little more
// (the kernel's copy is a memcpy and the record stays under a cache page).
const leafStackBytes = 512

func (r *perfprofReceiver) stackUser() uint32 {
	if r.cfg.RecoverLeafCaller {
		return leafStackBytes
	}
	return 0
}

// recoverLeafCaller returns the callchain of s with the caller of a
// frameless leaf inserted (see perf.InsertLeafCaller), in r.chainBuf. It
// must be called with r.mu held.
func (r *perfprofReceiver) recoverLeafCaller(s *perf.Sample, st *procState) []uint64 {
	if st.sym == nil || len(s.StackUser) < 8 {
		return s.Callchain
	}
	chain := perf.InsertLeafCaller(r.chainBuf, s.Callchain, s.StackUser, func(pc uint64) bool {
		// The registers must describe the same leaf as the chain.
		if ip, ok := s.UserIP(); !ok || ip != pc {
			return false
		}
		yes, _ := st.sym.ReturnAddressAtSP(pc)
		return yes
	})
	if len(chain) > len(s.Callchain) {
		r.chainBuf = chain[:0]
	}
	return chain
}
