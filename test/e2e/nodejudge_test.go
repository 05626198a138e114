package e2e

import (
	"encoding/hex"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
)

// nodeSinks starts one gRPC server that takes the profiles and the spans
// the collector passes on, and returns them with its address.
func nodeSinks(t *testing.T) (*profileServer, *nodeSpanSink, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &profileServer{functions: map[string]int{}, pids: map[int64]int{}, roots: map[string]int{}}
	sink := &nodeSpanSink{spans: map[string]nodeSpan{}}
	g := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(g, srv)
	ptraceotlp.RegisterGRPCServer(g, sink)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return srv, sink, lis.Addr().String()
}

// nodeConfig is the collector's configuration in the Node.js tests: the
// perfprof receiver samples pids at 999 Hz and takes spans over OTLP/HTTP at
// spansAddr, with correlation (its correlation block's settings) and extra
// (lines of its own, indented under it); both pipelines export to sinkAddr;
// telemetry is the service's telemetry block ("" for the default).
func nodeConfig(pids []int, spansAddr, sinkAddr, correlation, extra, telemetry string) string {
	list := make([]string, len(pids))
	for i, p := range pids {
		list[i] = strconv.Itoa(p)
	}
	return fmt.Sprintf(`receivers:
  perfprof:
    targets: {pids: [%s]}
    frequency: 999
    report_interval: 1s
    protocols:
      http: {endpoint: %s}
    correlation: {window: 3s%s}
%s
exporters:
  otlp_grpc:
    endpoint: %s
    tls: {insecure: true}
service:
%s
  pipelines:
    profiles: {receivers: [perfprof], exporters: [otlp_grpc]}
    traces: {receivers: [perfprof], exporters: [otlp_grpc]}
`, strings.Join(list, ", "), spansAddr, correlation, extra, sinkAddr, telemetry)
}

// The Node.js services of these tests (dd-trace's app.js, the OTel SDK's
// with the bridge) answer each request with the ground truth of where its
// thread ran it: "ROUTE TRACE_ID SPAN_ID BURNS BLOCK", BURNS the
// CLOCK_MONOTONIC intervals of its burn slices and BLOCK that of its block
// (START:END in ns, comma-separated). One JS thread runs one request at a
// time, so a sample's time inside a request's slice names the request the
// sample ran for.

// interval is [lo, hi), CLOCK_MONOTONIC ns.
type interval struct{ lo, hi uint64 }

// nodeRequest is one request, as its response told it.
type nodeRequest struct {
	route, trace, span string
	burns, blocks      []interval
}

// parseNodeResponse parses the response of a request of route.
func parseNodeResponse(route, body string) (nodeRequest, error) {
	f := strings.Fields(body)
	if len(f) != 5 || f[0] != route {
		return nodeRequest{}, fmt.Errorf("/%s: %q, want ROUTE TRACE SPAN BURNS BLOCK", route, body)
	}
	r := nodeRequest{route: f[0], trace: f[1], span: f[2]}
	var err error
	if r.burns, err = parseIntervals(f[3]); err != nil {
		return r, fmt.Errorf("/%s: burns: %w", route, err)
	}
	if r.blocks, err = parseIntervals(f[4]); err != nil {
		return r, fmt.Errorf("/%s: block: %w", route, err)
	}
	return r, nil
}

func parseIntervals(s string) ([]interval, error) {
	var out []interval
	for _, p := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(p, ":")
		lo, err1 := strconv.ParseUint(a, 10, 64)
		hi, err2 := strconv.ParseUint(b, 10, 64)
		if !ok || err1 != nil || err2 != nil || hi < lo {
			return nil, fmt.Errorf("bad interval %q", p)
		}
		out = append(out, interval{lo, hi})
	}
	return out, nil
}

// monoOffset returns Unix − CLOCK_MONOTONIC, ns, as this process reads the
// two clocks: what converts the samples' Unix times back to the clock of
// the services' intervals (to within microseconds of the collector's own
// conversion).
func monoOffset(t *testing.T) int64 {
	var ts unix.Timespec
	best := int64(0)
	bestGap := time.Duration(1 << 62)
	for range 5 {
		a := time.Now()
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		b := time.Now()
		if gap := b.Sub(a); gap < bestGap {
			bestGap = gap
			best = a.UnixNano() + int64(gap/2) - ts.Nano()
		}
	}
	return best
}

// spanLives returns the intervals the spans were open, in CLOCK_MONOTONIC
// (offset: Unix − monotonic), widened by the guard.
func spanLives(spans map[string]nodeSpan, offset int64) []interval {
	var out []interval
	for _, s := range spans {
		if s.start == 0 || s.end < s.start {
			continue
		}
		out = append(out, interval{uint64(int64(s.start)-offset) - nodeGuard, uint64(int64(s.end)-offset) + nodeGuard})
	}
	return out
}

// hasJS reports whether a stack has a JavaScript frame.
func hasJS(fns map[string]bool) bool {
	for fn := range fns {
		if strings.HasPrefix(fn, "JS:") {
			return true
		}
	}
	return false
}

// nodeGuard is how far from a slice's edges a sample must be to be judged
// by it: the two conversions of a time between clocks differ by
// microseconds, a slice's edges are read a few microseconds from where its
// burn starts and ends.
const nodeGuard = 200_000 // ns

// nodeFigures are what judgeNode found, the bar of issue 29.
type nodeFigures struct {
	// On-CPU samples in a route's burn function; of those, linked; inside
	// a request's slice (judged); of those, linked, linked to the span of
	// the request the slice was of (own), to another span (other); with
	// the route attribute the test expects.
	burn, burnLinked, judged, judgedLinked, own, other, attrRight int
	// Samples in backgroundWork (no span runs it), and linked.
	background, backgroundLinked int
	// Off-CPU samples whose switch-out was inside a request's block, linked,
	// linked to its own request's span; off-CPU samples outside any span's
	// life, with no JavaScript on the stack: the loop waiting, no request
	// open; and linked.
	blocked, blockedLinked, blockedOwn int
	idle, idleLinked                   int
	bySource                           map[string]int // linked burn samples by span.link.source
}

func (f nodeFigures) String() string {
	srcs := make([]string, 0, len(f.bySource))
	for s, n := range f.bySource {
		srcs = append(srcs, fmt.Sprintf("%s %d", s, n))
	}
	sort.Strings(srcs)
	return fmt.Sprintf("burn samples %d: %.1f%% linked; judged by slice %d: %.2f%% linked, %.2f%% of the linked in their own request's span, %d in another; route attribute on %.1f%%; "+
		"backgroundWork %d: %.1f%% linked; off-CPU in a request's block %d: %.1f%% linked, %.1f%% of the linked to their request; off-CPU with no request open %d: %.1f%% linked; linked by source: %s",
		f.burn, pct(f.burnLinked, f.burn), f.judged, pct(f.judgedLinked, f.judged), pct(f.own, f.judgedLinked), f.other, pct(f.attrRight, f.burn),
		f.background, pct(f.backgroundLinked, f.background), f.blocked, pct(f.blockedLinked, f.blocked), pct(f.blockedOwn, f.blockedLinked),
		f.idle, pct(f.idleLinked, f.idle), strings.Join(srcs, ", "))
}

func pct(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

// judgeNode judges the samples srv received from pid's JS thread (its
// main thread, tid = pid) against requests: the requests' slices are that
// thread's, and the process's other threads (libuv's pool reading files,
// V8's) run no request's JS.
// attrOK says whether a burn sample's string attributes carry what its
// route's records hold (nil: not judged).
//
// lives are the intervals (CLOCK_MONOTONIC) during which a span of the
// service was open, from the spans it sent (spanLives): off-CPU time
// outside them is the loop's own, which no span runs.
func judgeNode(srv *profileServer, pid int64, requests []nodeRequest, lives []interval, offset int64, attrOK func(route string, attrs map[string]string) bool) nodeFigures {
	type slice struct {
		interval
		req *nodeRequest
	}
	var burns, blocks []slice
	for i := range requests {
		r := &requests[i]
		for _, b := range r.burns {
			burns = append(burns, slice{b, r})
		}
		for _, b := range r.blocks {
			blocks = append(blocks, slice{b, r})
		}
	}
	sortSlices := func(s []slice) {
		sort.Slice(s, func(i, j int) bool { return s[i].lo < s[j].lo })
	}
	sortSlices(burns)
	sortSlices(blocks)
	// The union of the spans' lives and of the requests' (from their first
	// slice to their last, for requests whose span did not arrive), sorted.
	for _, r := range requests {
		if len(r.burns) > 0 {
			lives = append(lives, interval{r.burns[0].lo - 1_000_000, r.burns[len(r.burns)-1].hi + 1_000_000})
		}
	}
	sort.Slice(lives, func(i, j int) bool { return lives[i].lo < lives[j].lo })
	var union []interval
	for _, l := range lives {
		if n := len(union); n > 0 && l.lo <= union[n-1].hi {
			union[n-1].hi = max(union[n-1].hi, l.hi)
			continue
		}
		union = append(union, l)
	}
	inLife := func(mono uint64) bool {
		i := sort.Search(len(union), func(i int) bool { return union[i].lo > mono }) - 1
		return i >= 0 && mono < union[i].hi
	}
	// find returns the slice of s holding mono, guard ns inside its edges.
	find := func(s []slice, mono, guard uint64) *slice {
		i := sort.Search(len(s), func(i int) bool { return s[i].lo > mono }) - 1
		if i < 0 {
			return nil
		}
		if x := &s[i]; mono >= x.lo+guard && mono+guard < x.hi {
			return x
		}
		return nil
	}
	spanOf := func(sc *stackCount) string {
		if !sc.linked {
			return ""
		}
		return hex.EncodeToString(sc.span[:])
	}
	f := nodeFigures{bySource: map[string]int{}}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for i := range srv.stacks {
		sc := &srv.stacks[i]
		if sc.pid != pid || sc.tid != pid {
			continue
		}
		route, bg := "", false
		for fn := range sc.functions {
			if r, ok := nodeRoutes[jsName(fn)]; ok {
				route = r
			}
			bg = bg || jsName(fn) == "backgroundWork"
		}
		n := len(sc.times)
		switch {
		case route != "":
			f.burn += n
			if sc.linked {
				f.burnLinked += n
				f.bySource[sc.source] += n
			}
			if attrOK != nil && attrOK(route, sc.attrs) {
				f.attrRight += n
			}
			for _, tm := range sc.times {
				x := find(burns, uint64(int64(tm)-offset), nodeGuard)
				if x == nil || x.req.route != route {
					continue
				}
				f.judged++
				if sc.linked {
					f.judgedLinked++
					if spanOf(sc) == x.req.span {
						f.own++
					} else {
						f.other++
					}
				}
			}
		case bg:
			f.background += n
			if sc.linked {
				f.backgroundLinked += n
			}
		}
	}
	for i := range srv.offStacks {
		sc := &srv.offStacks[i]
		if sc.pid != pid || sc.tid != pid {
			continue
		}
		for _, tm := range sc.times {
			mono := uint64(int64(tm) - offset)
			if x := find(blocks, mono, 0); x != nil {
				f.blocked++
				if sc.linked {
					f.blockedLinked++
					if spanOf(sc) == x.req.span {
						f.blockedOwn++
					}
				}
				continue
			}
			if inLife(mono) || hasJS(sc.functions) {
				continue
			}
			f.idle++
			if sc.linked {
				f.idleLinked++
			}
		}
	}
	return f
}

// The bar of issue 29 for a Node.js service whose spans are read in the
// process: of the burn samples judged by their slice, linked ≥ 95% and,
// of those, ≥ 99% in their own request's span; ≤ 1% of the work no span
// runs (backgroundWork, off-CPU time outside requests) linked; off-CPU
// samples where a request blocked linked, to their request.
const (
	nodeMinLinked   = 0.95
	nodeMinOwn      = 0.99
	nodeMaxUnspaned = 0.01
)

// checkNodeBar fails t where f misses the bar; attrs says whether the
// route attribute is judged too (≥ 95% of the burn samples).
func checkNodeBar(t *testing.T, f nodeFigures, attrs bool) {
	t.Helper()
	if f.judged < 300 {
		t.Fatalf("only %d burn samples inside a request's slice: %v", f.judged, f)
	}
	if got := float64(f.judgedLinked) / float64(f.judged); got < nodeMinLinked {
		t.Errorf("%.2f%% of the burn samples inside a request's slice linked, want ≥ %.0f%%", 100*got, 100*nodeMinLinked)
	}
	if got := float64(f.own) / float64(max(f.judgedLinked, 1)); got < nodeMinOwn {
		t.Errorf("%.2f%% of the linked burn samples in their own request's span (%d in another), want ≥ %.0f%%", 100*got, f.other, 100*nodeMinOwn)
	}
	if f.background < 20 {
		t.Errorf("only %d samples in backgroundWork", f.background)
	} else if got := float64(f.backgroundLinked) / float64(f.background); got > nodeMaxUnspaned {
		t.Errorf("%.1f%% of backgroundWork's samples linked, want ≤ %.0f%%", 100*got, 100*nodeMaxUnspaned)
	}
	if f.idle > 0 && float64(f.idleLinked)/float64(f.idle) > nodeMaxUnspaned {
		t.Errorf("%.1f%% of the off-CPU samples with no request open linked, want ≤ %.0f%%", pct(f.idleLinked, f.idle), 100*nodeMaxUnspaned)
	}
	if f.blocked < 10 {
		t.Errorf("only %d off-CPU samples where a request blocked", f.blocked)
	} else {
		if got := float64(f.blockedLinked) / float64(f.blocked); got < nodeMinLinked {
			t.Errorf("%.1f%% of the off-CPU samples where a request blocked linked, want ≥ %.0f%%", 100*got, 100*nodeMinLinked)
		}
		if f.blockedOwn < f.blockedLinked {
			t.Errorf("%d of the %d linked off-CPU samples where a request blocked linked to another span", f.blockedLinked-f.blockedOwn, f.blockedLinked)
		}
	}
	if attrs && float64(f.attrRight) < 0.95*float64(f.burn) {
		t.Errorf("the route attribute of their records on %.1f%% of the burn samples, want ≥ 95%%", pct(f.attrRight, f.burn))
	}
}
