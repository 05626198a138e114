package perf_test

import (
	"testing"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/testchild"
)

// With Sched, a thread that sleeps 30 ms after every 20 ms of work yields
// a switch-out and a switch-in record per sleep, and a switch-out sample
// with its user callchain; on-CPU samples stay apart (Kind).
func TestSchedCapture(t *testing.T) {
	for _, scope := range []perf.Scope{perf.ScopeProcess, perf.ScopeSystem} {
		t.Run(scope.String(), func(t *testing.T) {
			bin := testchild.Build(t, "burner")
			child := testchild.Start(t, bin, "-burnsleep", "20ms,30ms", "-beta", "0")
			tid := uint32(child.Ready[1])
			s, err := perf.Open(perf.Options{Scope: scope, Frequency: 199, Sched: true})
			testchild.RequirePerf(t, err)
			var outs, preempted, ins, swSamples, swWithStack, cpuSamples, foreign int
			locked, stop := readAll(t, s, func(r *perf.Record) {
				switch r.Type {
				case perf.RecordSwitch, perf.RecordSwitchCPU:
					if r.ID.Pid != uint32(child.Pid) {
						foreign++
					}
					if r.ID.Tid != tid {
						return
					}
					if r.Misc&perf.MiscSwitchOut != 0 {
						outs++
						if r.Misc&perf.MiscSwitchOutPreempt != 0 {
							preempted++
						}
					} else {
						ins++
					}
				case perf.RecordSample:
					if r.Sample.Tid != tid {
						return
					}
					if r.Sample.Kind == perf.EventSwitch {
						swSamples++
						n := 0
						perf.Frames(r.Sample.Callchain, func(uint64, bool) { n++ })
						if n >= 3 {
							swWithStack++
						}
					} else {
						cpuSamples++
					}
				}
			})
			if err := s.Attach(child.Pid); err != nil {
				t.Fatal(err)
			}
			// About 2 s of 50 ms cycles: 40 sleeps, plus preemptions.
			await(t, locked, "40 blocking switch-outs and switch-ins, 40 cpu samples", func() bool {
				return outs-preempted >= 40 && ins >= 40 && cpuSamples >= 40
			})
			stop()
			locked(func() {
				t.Logf("%s: thread %d: %d switch-outs (%d preempted), %d switch-ins, %d switch samples (%d with a stack), %d cpu samples",
					scope, tid, outs, preempted, ins, swSamples, swWithStack, cpuSamples)
				if outs-preempted < 30 || ins < 30 {
					t.Errorf("want about 40 blocking switch-outs and switch-ins")
				}
				if swSamples < outs*9/10 || swWithStack < swSamples*9/10 {
					t.Errorf("want a switch sample with a user stack for (nearly) every switch-out")
				}
				if cpuSamples < 40 {
					t.Errorf("on-CPU samples missing: %d", cpuSamples)
				}
				if foreign > 0 {
					t.Errorf("%d switch records of other processes delivered", foreign)
				}
			})
		})
	}
}
