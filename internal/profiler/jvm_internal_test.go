package profiler

import (
	"testing"
	"time"
)

// TestReportDoesNotWaitForJVMAsk: while an ask of a JVM is under way (it
// holds the JVM's lock for as long as the process takes to answer, up to
// jvmTimeout), a report neither asks again nor waits to read the thread
// names: every target's report would wait behind one process's answer.
func TestReportDoesNotWaitForJVMAsk(t *testing.T) {
	e, st := selfEngine(t, Options{JVMPerfMap: true})
	names := map[uint32]string{1: "C2 CompilerThread0"}
	st.jvm.names.Store(&names)

	st.jvm.queued = true // an ask under way
	done := make(chan map[uint32]string)
	go func() {
		if e.requestJVM(st, "report") {
			t.Error("a report queued an ask while one was under way")
		}
		done <- st.jvmNames()
	}()
	select {
	case got := <-done:
		if got[1] != "C2 CompilerThread0" {
			t.Errorf("names %v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a report waited for the ask under way")
	}
}
