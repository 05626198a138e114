package htmlview

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// Names the generated profiles use; the tests look for them.
const (
	genHandler   = "app::http::handle_request" // under about half of the on-CPU samples
	genSearch    = "serde_json"                // several functions, sometimes nested in one stack
	genWorkers   = 4
	genDuration  = int64(10e9) // ns
	genStartTime = int64(7_000_000_000_000)
)

// genData makes a realistic profile: a few hundred distinct stacks of 10-20
// frames from a small call graph of a tokio-style service (some frames in
// the kernel), nSamples samples over genWorkers worker rows and 10 s (a
// tenth of them off-CPU with ns weights), and a few thousand poll, park and
// span bars. The same seed gives the same data.
func genData(nSamples int, seed uint64) *Data { return genDataStacks(nSamples, seed, 300) }

// genDataStacks is genData with nStacks distinct on-CPU stacks.
func genDataStacks(nSamples int, seed uint64, nStacks int) *Data {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	d := &Data{Title: fmt.Sprintf("perfprof test profile (%d samples)", nSamples), Start: genStartTime}

	frameID := map[Frame]int32{}
	frame := func(name, file string, line int) int32 {
		f := Frame{name, file, line}
		if id, ok := frameID[f]; ok {
			return id
		}
		id := int32(len(d.Frames))
		d.Frames = append(d.Frames, f)
		frameID[f] = id
		return id
	}
	// Each function has a file and one to three lines samples are seen at.
	type fn struct {
		name, file string
		lines      []int
	}
	mk := func(name, file string) fn {
		base := 10 + rng.IntN(400)
		lines := []int{base}
		for range rng.IntN(3) {
			lines = append(lines, base+1+rng.IntN(30))
		}
		return fn{name, file, lines}
	}
	at := func(f fn) int32 { return frame(f.name, f.file, f.lines[rng.IntN(len(f.lines))]) }

	prefix := []fn{
		mk("clone3", "sysdeps/unix/sysv/linux/x86_64/clone3.S"),
		mk("start_thread", "nptl/pthread_create.c"),
		mk("std::sys::pal::unix::thread::Thread::new::thread_start", "library/std/src/sys/pal/unix/thread.rs"),
		mk("tokio::runtime::scheduler::multi_thread::worker::run", "tokio/src/runtime/scheduler/multi_thread/worker.rs"),
		mk("tokio::runtime::task::harness::Harness<T,S>::poll", "tokio/src/runtime/task/harness.rs"),
	}
	handler := mk(genHandler, "src/http.rs")
	var mids []fn
	for _, m := range []string{
		"app::db::query", "app::db::pool::Pool::get", "app::render::template", "app::auth::verify_token",
		"app::cache::Cache::lookup", "app::model::User::load", "app::api::list_orders", "app::api::get_user",
		"hyper::proto::h1::dispatch::Dispatcher::poll_loop", "hyper::proto::h1::role::Server::parse",
		"tokio::net::tcp::stream::TcpStream::poll_read", "tokio::io::poll_evented::PollEvented::poll_write",
		"tower::util::map_response::MapResponseFuture::poll", "axum::routing::Router::call",
		"sqlx_core::pool::inner::PoolInner::acquire", "sqlx_postgres::connection::PgConnection::fetch",
		"regex::regex::string::Regex::is_match", "tracing::span::Span::in_scope",
		"alloc::vec::Vec<T>::extend_from_slice", "core::iter::adapters::map::Map::fold",
	} {
		mids = append(mids, mk(m, "src/"+strings.ReplaceAll(strings.Split(m, "::")[1], "<T>", "")+".rs"))
	}
	serde := []fn{
		mk("serde_json::de::from_slice", "serde_json/src/de.rs"),
		mk("serde_json::de::Deserializer<R>::parse_value", "serde_json/src/de.rs"),
		mk("serde_json::ser::to_writer", "serde_json/src/ser.rs"),
	}
	leaves := []fn{
		mk("__memmove_avx_unaligned_erms", "string/memmove-vec-unaligned-erms.S"),
		mk("sha2::sha256::compress256", "sha2/src/sha256.rs"),
		mk("__rust_alloc", "library/alloc/src/alloc.rs"),
		mk("hashbrown::raw::RawTable<T>::find", "hashbrown/src/raw/mod.rs"),
		mk("core::str::validations::next_code_point", "library/core/src/str/validations.rs"),
		mk("app::render::escape_html", "src/render.rs"),
	}
	kernelOn := []fn{mk("entry_SYSCALL_64_after_hwframe", "kernel"), mk("do_syscall_64", "kernel"), mk("__x64_sys_sendto", "kernel"), mk("tcp_sendmsg", "kernel")}
	kernelOff := []fn{mk("entry_SYSCALL_64_after_hwframe", "kernel"), mk("do_syscall_64", "kernel"), mk("__x64_sys_futex", "kernel"), mk("futex_wait", "kernel"), mk("schedule", "kernel"), mk("__schedule", "kernel")}
	parking := mk("std::sys::sync::mutex::futex::Mutex::lock_contended", "library/std/src/sys/sync/mutex/futex.rs")

	// On-CPU stacks: prefix, maybe the handler, a walk through the middle
	// layer (serde_json sometimes, nested), then a leaf or a syscall.
	newStack := func(off bool) []int32 {
		var s []int32
		for _, f := range prefix {
			s = append(s, at(f))
		}
		if rng.IntN(2) == 0 {
			s = append(s, at(handler))
		}
		want := 10 + rng.IntN(11) // 10-20 frames
		tail := 1
		if off {
			tail = 1 + len(kernelOff)
		} else if rng.IntN(5) == 0 {
			tail = len(kernelOn)
		}
		for len(s) < want-tail {
			if rng.IntN(10) == 0 {
				s = append(s, at(serde[rng.IntN(len(serde))]))
			} else {
				s = append(s, at(mids[rng.IntN(len(mids))]))
			}
		}
		switch {
		case off:
			s = append(s, at(parking))
			for _, f := range kernelOff {
				s = append(s, at(f))
			}
		case tail > 1:
			for _, f := range kernelOn {
				s = append(s, at(f))
			}
		default:
			s = append(s, at(leaves[rng.IntN(len(leaves))]))
		}
		return s
	}
	seen := map[string]bool{}
	addStacks := func(n int, off bool) []int32 {
		var ids []int32
		for len(ids) < n {
			s := newStack(off)
			k := fmt.Sprint(s)
			if seen[k] {
				continue
			}
			seen[k] = true
			ids = append(ids, int32(len(d.Stacks)))
			d.Stacks = append(d.Stacks, s)
		}
		return ids
	}
	onStacks := addStacks(nStacks, false)
	offStacks := addStacks(40, true)

	for w := range genWorkers {
		d.Rows = append(d.Rows, Row{Name: fmt.Sprintf("worker %d", w)})
	}

	// Zipf-like popularity: a few hot stacks, a long tail.
	pick := func(ids []int32) int32 {
		// inverse-CDF of p(i) ~ 1/(i+1)^1.1 approximated by a power of a uniform
		i := int(math.Pow(rng.Float64(), 2.2) * float64(len(ids)))
		return ids[min(i, len(ids)-1)]
	}
	routes := []string{"GET /api/users/{id}", "GET /api/orders", "POST /api/login", "GET /healthz"}
	for w := range genWorkers {
		t := genStartTime + rng.Int64N(1e6)
		for t < genStartTime+genDuration {
			poll := 1e6 + rng.Int64N(19e6)
			d.Bars = append(d.Bars, Bar{Row: int32(w), Start: t, End: t + poll, Name: "tokio::task " + fmt.Sprint(rng.IntN(50)), Kind: "poll"})
			if rng.IntN(3) == 0 {
				s := t + poll/10
				d.Bars = append(d.Bars, Bar{Row: int32(w), Start: s, End: s + poll/2, Name: routes[rng.IntN(len(routes))], Kind: "span"})
			}
			t += poll
			park := 2e5 + rng.Int64N(48e5)
			d.Bars = append(d.Bars, Bar{Row: int32(w), Start: t, End: t + park, Name: "park", Kind: "park"})
			t += park
		}
	}
	// Samples: on-CPU while a worker polls; off-CPU (its futex wait) while
	// it parks, and now and then during a poll (a contended lock).
	runtime := make([][]Bar, genWorkers) // polls and parks, sorted by start
	for _, b := range d.Bars {
		if b.Kind != "span" {
			runtime[b.Row] = append(runtime[b.Row], b)
		}
	}
	for len(d.Samples) < nSamples {
		row := int32(len(d.Samples) % genWorkers)
		t := genStartTime + rng.Int64N(genDuration)
		rb := runtime[row]
		i, _ := slices.BinarySearchFunc(rb, t, func(b Bar, t int64) int { return cmp.Compare(b.Start, t+1) })
		if i == 0 || rb[i-1].End <= t {
			continue // before the first poll
		}
		switch {
		case rb[i-1].Kind == "park" && rng.IntN(2) == 0:
			d.Samples = append(d.Samples, PageSample{Time: t, Row: row, Stack: pick(offStacks), OffCPU: true, Weight: 10_000 + rng.Int64N(rb[i-1].End-rb[i-1].Start)})
		case rb[i-1].Kind == "park":
			continue
		case rng.IntN(20) == 0:
			d.Samples = append(d.Samples, PageSample{Time: t, Row: row, Stack: pick(offStacks), OffCPU: true, Weight: 10_000 + rng.Int64N(200_000)})
		default:
			d.Samples = append(d.Samples, PageSample{Time: t, Row: row, Stack: pick(onStacks), Weight: 1})
		}
	}
	slices.SortFunc(d.Samples, func(a, b PageSample) int { return cmp.Compare(a.Time, b.Time) })
	return d
}

// trueShare counts the on-CPU samples whose stack has a function whose name
// contains term (any case): what the page's search must report.
func trueShare(d *Data, term string) (matched, total int) {
	term = strings.ToLower(term)
	has := make([]bool, len(d.Stacks))
	for i, s := range d.Stacks {
		for _, f := range s {
			if strings.Contains(strings.ToLower(d.Frames[f].Name), term) {
				has[i] = true
				break
			}
		}
	}
	for _, s := range d.Samples {
		if s.OffCPU {
			continue
		}
		total++
		if has[s.Stack] {
			matched++
		}
	}
	return matched, total
}
