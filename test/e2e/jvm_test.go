package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/testchild"
)

// TestCollectorNamesJVMFrames profiles a JVM started with no flags through
// the built collector with jvm.perf_map on: the samples of its two burner
// threads must name the method each burns in (Class.method, from the perf
// map the collector has the JVM write) in 99.8% of them, as the README
// says, from the JVM's first second on, and the threads their full names.
func TestCollectorNamesJVMFrames(t *testing.T) {
	requirePerf(t)
	for _, v := range []string{"17", "25"} {
		t.Run("jdk"+v, func(t *testing.T) {
			home := testchild.FindJDK(v)
			if home == "" {
				testchild.NeedJDK(t, v)
			}
			testJVM(t, home)
		})
	}
}

func testJVM(t *testing.T, home string) {
	classes := t.TempDir()
	src := filepath.Join(root, "test", "e2e", "testdata", "JitBurn.java")
	if out, err := exec.Command(filepath.Join(home, "bin", "javac"), "-d", classes, src).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	jvm := exec.Command(filepath.Join(home, "bin", "java"), "-cp", classes, "JitBurn")
	stdin, err := jvm.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := jvm.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	jvm.Stderr = os.Stderr
	if err := jvm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = jvm.Process.Kill()
		_ = jvm.Wait()
		os.Remove(fmt.Sprintf("/tmp/perf-%d.map", jvm.Process.Pid))
	})
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "ready") {
		t.Fatalf("the JVM did not get ready: %q", sc.Text())
	}

	srv, addr := startServer(t)
	config := fmt.Sprintf(`receivers:
  perfprof:
    targets: {pids: [%d]}
    frequency: 999
    report_interval: 1s
    correlation: {window: 0s}
    jvm: {perf_map: true}
exporters:
  otlp_grpc:
    endpoint: %s
    tls: {insecure: true}
service:
  telemetry: {logs: {level: debug}}
  pipelines:
    profiles: {receivers: [perfprof], exporters: [otlp_grpc]}
`, jvm.Process.Pid, addr)
	cmd, out := runCollector(t, config, nil)
	waitFor(t, out, "Sampling process", 10*time.Second)
	time.Sleep(8 * time.Second)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("collector did not exit cleanly: %v", err)
	}

	burners := map[string]string{
		"jitburn-alpha-burner-thread": "JitBurn.burnAlpha",
		"jitburn-beta-burner-thread":  "JitBurn.burnBeta",
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	total, named := map[string]int{}, map[string]int{}
	leaves := map[string]map[string]int{}
	threads := map[string]int{}
	for _, st := range srv.stacks {
		threads[st.thread] += st.count
		want, ok := burners[st.thread]
		if !ok {
			continue
		}
		total[st.thread] += st.count
		if st.leaf == want {
			named[st.thread] += st.count
		}
		if leaves[st.thread] == nil {
			leaves[st.thread] = map[string]int{}
		}
		leaves[st.thread][st.leaf] += st.count
	}
	t.Logf("samples by thread: %v", threads)
	for thread, want := range burners {
		t.Logf("%s: %d of %d samples have the leaf %s (%.1f%%); leaves: %v", thread, named[thread], total[thread], want,
			100*float64(named[thread])/float64(max(total[thread], 1)), leaves[thread])
		if total[thread] < 1000 {
			t.Errorf("%s: only %d samples (full thread name missing?)", thread, total[thread])
			continue
		}
		if float64(named[thread]) < 0.998*float64(total[thread]) {
			t.Errorf("%s: %d of %d samples name %s", thread, named[thread], total[thread], want)
		}
	}
	if !strings.Contains(out.String(), "Asked the JVM for its perf map") {
		t.Errorf("the collector did not log asking the JVM for its perf map")
	}
}
