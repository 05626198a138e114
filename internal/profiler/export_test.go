package profiler

// HoldTables takes the lock under which the symbol worker and reports read
// unwind tables, as a slow first parse of a binary holds it, until release
// is called: the samples of processes attached or exec'd meanwhile wait
// for their tables in the pending queue.
func HoldTables(p *Profiler) (release func()) {
	p.syms.mu.Lock()
	return p.syms.mu.Unlock
}

// OpenHoldingTables opens a profiler whose symbol worker cannot read
// unwind tables until release is called: held before the worker starts,
// so that no table is read before the first samples are.
func OpenHoldingTables(opts Options) (p *Profiler, release func(), err error) {
	testHookStart = func(p *Profiler) { release = HoldTables(p) }
	defer func() { testHookStart = nil }()
	p, err = Open(opts)
	return p, release, err
}

// Queued returns how many samples wait in the pending queues now, and
// their bytes. Stats waits for the tables: it reads the symbol cache's
// counters under the same lock.
func Queued(p *Profiler) (samples int, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, st := range p.all {
		samples += len(st.pending.samples)
	}
	return samples, p.pendingBytes
}

// TablesRead reports whether every live process has its unwinder.
func TablesRead(p *Profiler) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, st := range p.live {
		if st.unwinder.Load() == nil {
			return false
		}
	}
	return true
}
