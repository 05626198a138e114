package otelctx

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/testchild"
)

// readNodeRecord walks the Node.js discovery struct at addr to its record
// and decodes it with keyMap.
func readNodeRecord(mem io.ReaderAt, addr uint64, keyMap []string) (ThreadCtx, error) {
	rec, err := NodeRecord(mem, addr)
	if err != nil {
		return ThreadCtx{}, err
	}
	hdr := make([]byte, RecordHeaderSize)
	if _, err := mem.ReadAt(hdr, int64(rec)); err != nil {
		return ThreadCtx{}, err
	}
	size, err := RecordSize(hdr)
	if err != nil {
		return ThreadCtx{}, err
	}
	b := make([]byte, size)
	if _, err := mem.ReadAt(b, int64(rec)); err != nil {
		return ThreadCtx{}, err
	}
	c, err := ParseRecord(b, keyMap)
	c.Record = rec
	return c, err
}

// TestNodeBridgeLive runs an HTTP service on the OpenTelemetry JS SDK 2.x
// (NodeSDK, instrumentation-http) with the repository's bridge,
// js/otel-thread-context, installed by its one line, on Node.js 24. Two
// requests of different routes interleave at awaits; at each point where
// the service stops its thread, the record the walk finds is that of the
// span running there (trace id, span id, and http.route decoded with the
// key map of the process context the bridge published), also after awaits
// during which the other request's span ran; outside any span there is no
// record, and a timer of a request whose span ended finds its record
// invalidated.
func TestNodeBridgeLive(t *testing.T) {
	node := testchild.Node24(t)
	_, self, _, _ := runtime.Caller(0)
	pkg := filepath.Join(filepath.Dir(self), "..", "..", "js", "otel-thread-context")
	for _, dep := range []string{"@datadog/pprof", "@datadog/libdatadog-extras", "@opentelemetry/sdk-node"} {
		if _, err := os.Stat(filepath.Join(pkg, "node_modules", dep)); err != nil {
			testchild.NeedRuntime(t, "%s is not installed in %s: run make node-deps (make test does): %v", dep, pkg, err)
		}
	}
	flags := t.TempDir()
	child := testchild.Start(t, node, filepath.Join(pkg, "test", "fixtures", "stops.js"), flags)

	res, err := ProcessContext(child.Pid)
	if err != nil {
		t.Fatalf("process context: %v", err)
	}
	keyMap := res.KeyMap()
	t.Logf("process context (%s): schema %q, key map %q, resource %v", res.Mapping, res.SchemaVersion(), keyMap, res.Attributes)
	if res.SchemaVersion() != SchemaNodeDev {
		t.Fatalf("schema %q, want %q", res.SchemaVersion(), SchemaNodeDev)
	}
	if !slices.Equal(keyMap, []string{"datadog.local_root_span_id", "http.route", "http.request.method"}) {
		t.Fatalf("key map %q", keyMap)
	}

	mem, addr, _ := nodeStruct(t, child.Pid)

	var labels []string
	spans := map[string]string{} // span id → the label of its first stop
	for {
		line := child.Line(t, 30*time.Second)
		if line == "done" {
			break
		}
		f := strings.Fields(line)
		if len(f) != 6 || f[0] != "stop" {
			t.Fatalf("service: %q", line)
		}
		label, want, trace, span, route := f[1], f[2], f[3], f[4], f[5]
		labels = append(labels, label)
		c, err := readNodeRecord(mem, addr, keyMap)
		switch want {
		case "none":
			if !errors.Is(err, ErrNoContext) {
				t.Errorf("%s: record %+v, %v; want no context", label, c, err)
			}
		case "ended":
			if !errors.Is(err, ErrNotValid) && !errors.Is(err, ErrNoContext) {
				t.Errorf("%s: record %+v, %v; want none valid", label, c, err)
			}
		case "span":
			if err != nil {
				t.Errorf("%s: %v; want the record of span %s", label, err, span)
				break
			}
			attrs := map[string]string{}
			for _, a := range c.Attrs {
				attrs[a.Name] = a.Value
			}
			t.Logf("%s: record at %#x: trace %s span %s flags %d attrs %v", label, c.Record, c.TraceIDString(), c.SpanIDString(), c.TraceFlags, attrs)
			if c.TraceIDString() != trace || c.SpanIDString() != span || c.TraceFlags != 1 {
				t.Errorf("%s: trace %s span %s flags %d; want trace %s span %s flags 1", label, c.TraceIDString(), c.SpanIDString(), c.TraceFlags, trace, span)
			}
			if got := attrs["http.route"]; (route == "-" && got != "") || (route != "-" && got != route) {
				t.Errorf("%s: http.route %q, want %q", label, got, route)
			}
			if route != "-" && attrs["http.request.method"] != "GET" {
				t.Errorf("%s: http.request.method %q, want GET", label, attrs["http.request.method"])
			}
			if attrs["datadog.local_root_span_id"] == "" {
				t.Errorf("%s: no local root span id", label)
			}
			if _, ok := spans[span]; !ok {
				spans[span] = label
			}
		default:
			t.Fatalf("service: %q", line)
		}
		if err := os.WriteFile(filepath.Join(flags, label), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The service's order: each request stops after an await during which
	// the other request's span ran and stopped.
	want := []string{"idle", "a-start", "b-start", "a-after-await", "a-child", "a-after-child", "b-after-await", "a-ended-timer", "after"}
	if !slices.Equal(labels, want) {
		t.Errorf("stops %q, want %q", labels, want)
	}
	if len(spans) != 3 {
		t.Errorf("spans seen %v, want the two requests' and the child's", spans)
	}

	// The first span told the bridge the SDK's resource: it published it.
	if res, err := ProcessContext(child.Pid); err != nil || res.ServiceName() != "stops-app" || res.SchemaVersion() != SchemaNodeDev {
		t.Errorf("process context after the first span: service %q, schema %q, %v; want stops-app, %s", res.ServiceName(), res.SchemaVersion(), err, SchemaNodeDev)
	}
}
