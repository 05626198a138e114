package measure

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
)

// CollectorArgs are the collector's arguments for a configuration file:
// profiles need the feature gate.
func CollectorArgs(config string) []string {
	return []string{"--config", config, "--feature-gates=service.profilesSupport"}
}

// Collector returns the collector binary to measure: path, or by default
// the one `make build` makes under root, made absolute. It fails, saying
// what to do, when the binary is missing.
func Collector(root, path string) (string, error) {
	if path == "" {
		path = filepath.Join(root, "_build", "otelcol-perfprof")
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("collector %s is missing or not executable: run make build first (or pass -collector)", path)
	}
	return path, nil
}

// TelemetryYAML is the service.telemetry section that serves the
// collector's own metrics on 127.0.0.1:port for Scrape: level basic (one
// counter increment per sample), logs at info (nothing per sample).
// Indented for the service section.
func TelemetryYAML(port int) string {
	return fmt.Sprintf(`  telemetry:
    logs: {level: info}
    metrics:
      level: basic
      readers:
        - pull:
            exporter:
              prometheus: {host: 127.0.0.1, port: %d, without_scope_info: true, without_units: true, without_type_suffix: true}
`, port)
}

// Scrape reads the collector's Prometheus endpoint and returns the value
// of every metric, summed over labels, by name (without a _total suffix).
func Scrape(ctx context.Context, port int) (map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	m := map[string]uint64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		name, val := line[:sp], line[sp+1:]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil || v < 0 {
			continue
		}
		m[strings.TrimSuffix(name, "_total")] += uint64(v)
	}
	return m, sc.Err()
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// CheckPerfEvents opens, in this process, the sampling event the collector
// would open on its target, so that a denied perf_event_open stops a
// measuring tool before it starts anything, with the reason and the fix.
func CheckPerfEvents(hz uint64) error {
	s, err := perf.Open(perf.Options{Scope: perf.ScopeProcess, Frequency: hz})
	if err == nil {
		err = s.Attach(os.Getpid())
		s.Close()
	}
	if err != nil {
		return fmt.Errorf("cannot sample with perf_event_open, so nothing can be measured: %w", err)
	}
	return nil
}
