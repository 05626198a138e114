// Package keep holds the trace segments around slow spans past size
// retention, so that the question "what was the CPU doing in that slow
// request" can still be answered days later.
//
// A rule names a span and a duration threshold: a fixed one, the running
// percentile of the name's durations, or the larger of both. When a span
// over its rule is offered, the segments whose events fall in the span's
// time, from a lookback before its start to its end, are held: the
// segment rotator neither deletes nor counts them under its size bound, for
// a configured time. The samples of a span reach the exporter after the
// span itself (the receiver's correlation window), so a keep goes on taking
// the segments written with events in its time for a settle time, then
// lists them in its manifest, a JSON file in the segments' directory
// (PREFIX.kept/DUMP_ID.json) with the fields of dial9's dump manifest.
//
// A segment is known by the times it has events at, a few intervals (a
// batch can mix samples of the last report with a long-blocked thread's
// off-CPU sample of seconds before). What a keep holds survives restarts:
// those times are logged (.PREFIX.keep-ranges) and the manifests read
// back. The package
// does not import the collector.
package keep

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/perfprof/perfprof/internal/counter"
)

// The series of the keeps, named as the exporter's metadata.yaml names the
// metrics.
var (
	CKept          = counter.Define("exporter_tracefile_keeps", "outcome", "kept")
	CDropped       = counter.Define("exporter_tracefile_keeps", "outcome", "dropped")
	CReleased      = counter.Define("exporter_tracefile_keeps", "outcome", "released")
	CExpired       = counter.Define("exporter_tracefile_keeps", "outcome", "expired")
	CKeptBytes     = counter.Define("exporter_tracefile_kept_bytes")
	CKeptSegments  = counter.Define("exporter_tracefile_kept_segments")
	CKeepsUnsealed = counter.Define("exporter_tracefile_keeps_settling")
)

// Rule says which spans are kept: those of SpanName ("" = any name) that
// lasted longer than MinDuration and, when Percentile is set, longer than
// that percentile of the name's recent durations. A rule needs one of the
// two thresholds; Percentile needs a SpanName.
type Rule struct {
	SpanName    string
	MinDuration time.Duration
	Percentile  float64 // 0 = off, else in (0, 100)
}

// Span is a span offered to the rules. Times are Unix nanoseconds.
type Span struct {
	Name, Service string
	TraceID       [16]byte
	SpanID        [8]byte
	Start, End    int64
}

// Options configures a [Keeper].
type Options struct {
	// Dir and FilePrefix are the rotator's: segments are
	// Dir/FilePrefix.N.bin[.gz|.active]; manifests go in
	// Dir/FilePrefix.kept.
	Dir, FilePrefix string
	// Compressed: sealed segments become .bin.gz; a manifest waits for
	// them and names them so.
	Compressed bool
	Rules      []Rule
	// Lookback is the time before a span's start whose segments are held
	// with it; Settle how long after the span came the segments written
	// with events in its time are still taken; For how long a keep holds
	// its segments.
	Lookback, Settle, For time.Duration
	// MaxBytes bounds the bytes of held segments on disk: past it, the
	// oldest keeps are released (counted). 0 = unbounded.
	MaxBytes int64
	// MaxKeeps bounds the live keeps; a span over its rule beyond it is
	// counted and not kept (default 10 000).
	MaxKeeps int
	// BootID and Service go into the manifests' metadata.
	BootID   string
	FileMode os.FileMode // manifests and the range log; 0 = 0600
	Now      func() time.Time
	Counts   *counter.Set
	OnError  func(error)
}

// Manifest is a keep's JSON file. Its first fields are those of dial9's
// dump manifest ({prefix}/dumps/{dump_id}.json): Segments are object keys,
// which the S3 uploader fills in when it uploads the manifest. Files are
// the segments' names in the directory.
type Manifest struct {
	DumpID            string            `json:"dump_id"`
	TriggeredAt       time.Time         `json:"triggered_at"`
	TimeRange         [2]time.Time      `json:"time_range"`
	SegmentsProcessed int               `json:"segments_processed"`
	Metadata          map[string]string `json:"metadata"`
	Segments          []string          `json:"segments"`
	Files             []string          `json:"files"`
	// Complete: the settle time is over and every segment is sealed (and
	// compressed): Files is final.
	Complete  bool      `json:"complete"`
	KeepUntil time.Time `json:"keep_until"`
}

// ManifestDir returns where the manifests of the segments Dir/prefix.N…
// are.
func ManifestDir(dir, prefix string) string { return filepath.Join(dir, prefix+".kept") }

// ReadManifest reads a manifest file.
func ReadManifest(path string) (*Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("keep: manifest %s: %w", path, err)
	}
	if m.DumpID == "" {
		return nil, fmt.Errorf("keep: manifest %s: no dump_id", path)
	}
	return &m, nil
}

// keep is one slow span's hold.
type keep struct {
	m        Manifest
	from, to int64 // Unix ns
	settle   time.Time
	segs     map[int]bool
}

// Keeper decides which spans are kept and which segments they hold. It is
// safe for concurrent use; Held and Wrote are called under the rotator's
// lock and never call it.
type Keeper struct {
	opts     Options
	mdir     string
	mu       sync.Mutex
	hists    []*hist       // per rule with a Percentile
	ranges   map[int]times // when each segment has events
	dirty    map[int]bool  // ranges not logged since they changed
	keeps    []*keep       // oldest first
	byID     map[string]*keep
	held     map[int]int // segment → keeps holding it
	log      *os.File
	logBytes int64     // written to log since it was compacted
	pruned   time.Time // ranges of deleted segments last dropped
}

// New reads what earlier runs kept and the segments' time ranges.
func New(opts Options) (*Keeper, error) {
	if opts.Dir == "" || opts.FilePrefix == "" {
		return nil, errors.New("keep: Dir and FilePrefix are required")
	}
	for i, r := range opts.Rules {
		if r.MinDuration <= 0 && r.Percentile == 0 {
			return nil, fmt.Errorf("keep: rule %d: no threshold", i)
		}
		if r.Percentile != 0 && (r.SpanName == "" || r.Percentile <= 0 || r.Percentile >= 100) {
			return nil, fmt.Errorf("keep: rule %d: a percentile in (0, 100) of a named span", i)
		}
	}
	if opts.MaxKeeps <= 0 {
		opts.MaxKeeps = 10_000
	}
	if opts.FileMode == 0 {
		opts.FileMode = 0o600
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Counts == nil {
		opts.Counts = counter.NewSet()
	}
	k := &Keeper{opts: opts, mdir: ManifestDir(opts.Dir, opts.FilePrefix),
		ranges: map[int]times{}, dirty: map[int]bool{}, byID: map[string]*keep{}, held: map[int]int{}}
	k.hists = make([]*hist, len(opts.Rules))
	for i, r := range opts.Rules {
		if r.Percentile != 0 {
			k.hists[i] = new(hist)
		}
	}
	if err := os.MkdirAll(k.mdir, dirMode(opts.FileMode)); err != nil {
		return nil, fmt.Errorf("keep: %w", err)
	}
	if err := k.openRanges(); err != nil {
		return nil, err
	}
	if err := k.readManifests(); err != nil {
		k.log.Close()
		return nil, err
	}
	return k, nil
}

func dirMode(m os.FileMode) os.FileMode {
	return m | (m&0o444)>>2 | 0o700
}

// Offer applies the rules to s, and keeps it when it is over one. It
// reports whether s is kept.
func (k *Keeper) Offer(s Span) bool {
	d := s.End - s.Start
	k.mu.Lock()
	defer k.mu.Unlock()
	rule, threshold := -1, int64(0)
	for i, r := range k.opts.Rules {
		if r.SpanName != "" && r.SpanName != s.Name {
			continue
		}
		t, known := int64(r.MinDuration), r.MinDuration > 0
		if h := k.hists[i]; h != nil {
			// The span's own duration counts after the test, so that a
			// slow span does not raise the bar it is measured against.
			if q, ok := h.quantile(r.Percentile / 100); ok {
				t, known = max(t, q), true
			}
			h.observe(d)
		}
		if rule < 0 && known && d > t {
			rule, threshold = i, t
		}
	}
	if rule < 0 {
		return false
	}
	id := dumpID(s)
	if k.byID[id] != nil {
		return true // offered twice (a client's retry)
	}
	if len(k.keeps) >= k.opts.MaxKeeps {
		k.opts.Counts.Add(CDropped, 1)
		return false
	}
	now := k.opts.Now()
	kp := &keep{from: s.Start - int64(k.opts.Lookback), to: s.End, settle: now.Add(k.opts.Settle), segs: map[int]bool{}}
	kp.m = Manifest{
		DumpID:      id,
		TriggeredAt: now.UTC(),
		TimeRange:   [2]time.Time{time.Unix(0, kp.from).UTC(), time.Unix(0, kp.to).UTC()},
		KeepUntil:   now.Add(k.opts.For).UTC(),
		Segments:    []string{},
		Files:       []string{},
		Metadata: map[string]string{
			"reason":       "slow_span",
			"span_name":    s.Name,
			"service":      s.Service,
			"trace_id":     hex.EncodeToString(s.TraceID[:]),
			"span_id":      hex.EncodeToString(s.SpanID[:]),
			"start":        time.Unix(0, s.Start).UTC().Format(time.RFC3339Nano),
			"duration_ns":  strconv.FormatInt(d, 10),
			"threshold_ns": strconv.FormatInt(threshold, 10),
			"rule":         strconv.Itoa(rule),
			"boot_id":      k.opts.BootID,
		},
	}
	for n, r := range k.ranges {
		if r.overlaps(kp.from, kp.to) {
			k.hold(kp, n)
		}
	}
	k.keeps = append(k.keeps, kp)
	k.byID[id] = kp
	k.opts.Counts.Add(CKept, 1)
	// Written now, so that a crash before the settle time keeps the
	// keep: the next run goes on from the manifest.
	k.report(k.writeManifest(kp))
	return true
}

// dumpID names the keep of s: the same span always gets the same name.
func dumpID(s Span) string {
	return "slow-" + hex.EncodeToString(s.TraceID[:]) + "-" + hex.EncodeToString(s.SpanID[:])
}

func (k *Keeper) hold(kp *keep, n int) {
	if !kp.segs[n] {
		kp.segs[n] = true
		k.held[n]++
	}
}

func (k *Keeper) release(kp *keep) {
	for n := range kp.segs {
		if k.held[n]--; k.held[n] <= 0 {
			delete(k.held, n)
		}
	}
	delete(k.byID, kp.m.DumpID)
	k.keeps = slices.DeleteFunc(k.keeps, func(x *keep) bool { return x == kp })
	if err := os.Remove(filepath.Join(k.mdir, kp.m.DumpID+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		k.report(fmt.Errorf("keep: %w", err))
	}
}

// Wrote tells the keeper that a batch went into segment n, with events
// at the times of ivs: sorted intervals [from, to] of Unix ns.
func (k *Keeper) Wrote(n int, ivs [][2]int64) {
	if len(ivs) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	r := k.ranges[n]
	for _, iv := range ivs {
		r = r.add(iv)
	}
	k.ranges[n] = r
	k.dirty[n] = true
	for _, kp := range k.keeps {
		if !kp.m.Complete && r.overlaps(kp.from, kp.to) {
			k.hold(kp, n)
		}
	}
}

// Held reports whether segment n is held by a keep.
func (k *Keeper) Held(n int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held[n] > 0
}

// Tick logs the segments' ranges, completes the keeps whose settle time is
// over and whose segments are sealed, releases those past their time, and
// the oldest while the held segments exceed MaxBytes. Call it every second
// or so.
func (k *Keeper) Tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.saveRanges()
	now := k.opts.Now()
	for _, kp := range slices.Clone(k.keeps) {
		switch {
		case !kp.m.Complete && !now.Before(kp.settle):
			k.complete(kp)
		case kp.m.Complete && !now.Before(kp.m.KeepUntil):
			k.release(kp)
			k.opts.Counts.Add(CExpired, 1)
		}
	}
	// The bound on held bytes, by the files on disk.
	sizes := map[int]int64{}
	var total int64
	for n := range k.held {
		if _, size := k.file(n); size > 0 {
			sizes[n] = size
			total += size
		}
	}
	for k.opts.MaxBytes > 0 && total > k.opts.MaxBytes && len(k.keeps) > 1 {
		kp := k.keeps[0]
		for n := range kp.segs {
			if k.held[n] == 1 {
				total -= sizes[n]
			}
		}
		k.release(kp)
		k.opts.Counts.Add(CReleased, 1)
	}
	settling := 0
	for _, kp := range k.keeps {
		if !kp.m.Complete {
			settling++
		}
	}
	k.opts.Counts.Store(CKeptBytes, total)
	k.opts.Counts.Store(CKeptSegments, int64(len(k.held)))
	k.opts.Counts.Store(CKeepsUnsealed, int64(settling))
}

// file returns the sealed file of segment n (as a manifest names it) and
// its size; "" while it is being written or compressed, or gone.
func (k *Keeper) file(n int) (string, int64) {
	base := k.opts.FilePrefix + "." + strconv.Itoa(n) + ".bin"
	stat := func(name string) int64 {
		st, err := os.Stat(filepath.Join(k.opts.Dir, name))
		if err != nil || !st.Mode().IsRegular() {
			return -1
		}
		return st.Size()
	}
	bin, gz := stat(base), stat(base+".gz")
	switch {
	case stat(base+".active") >= 0:
		return "", 0
	case gz >= 0 && bin < 0:
		return base + ".gz", gz
	case bin >= 0 && !k.opts.Compressed:
		return base, bin
	}
	return "", 0
}

// complete lists the sealed segments of kp in its manifest, once all of
// them are sealed (and compressed); one deleted before the keep came is
// left out, and named in the metadata.
func (k *Keeper) complete(kp *keep) {
	var files []string
	missing := 0
	for _, n := range slices.Sorted(maps.Keys(kp.segs)) {
		name, _ := k.file(n)
		if name == "" {
			if k.exists(n) {
				return // not sealed yet: the next tick
			}
			missing++
			continue
		}
		files = append(files, name)
	}
	kp.m.Files = files
	kp.m.SegmentsProcessed = len(files)
	kp.m.Complete = true
	if missing > 0 {
		kp.m.Metadata["segments_missing"] = strconv.Itoa(missing)
	}
	k.report(k.writeManifest(kp))
}

// exists reports whether any file of segment n is in Dir.
func (k *Keeper) exists(n int) bool {
	base := filepath.Join(k.opts.Dir, k.opts.FilePrefix+"."+strconv.Itoa(n)+".bin")
	for _, s := range []string{"", ".gz", ".active"} {
		if _, err := os.Stat(base + s); err == nil {
			return true
		}
	}
	return false
}

// writeManifest writes kp's manifest whole (a temporary file renamed).
func (k *Keeper) writeManifest(kp *keep) error {
	b, err := json.MarshalIndent(&kp.m, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(k.mdir, kp.m.DumpID+".json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), k.opts.FileMode); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("keep: write manifest: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("keep: write manifest: %w", err)
	}
	return nil
}

// readManifests takes back the keeps of earlier runs.
func (k *Keeper) readManifests() error {
	ents, err := os.ReadDir(k.mdir)
	if err != nil {
		return fmt.Errorf("keep: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, ".json.tmp") {
			os.Remove(filepath.Join(k.mdir, name))
			continue
		}
		if !strings.HasSuffix(name, ".json") || !e.Type().IsRegular() {
			continue
		}
		m, err := ReadManifest(filepath.Join(k.mdir, name))
		if err != nil {
			k.report(err) // left alone, not held
			continue
		}
		kp := &keep{m: *m, from: m.TimeRange[0].UnixNano(), to: m.TimeRange[1].UnixNano(),
			settle: m.TriggeredAt.Add(k.opts.Settle), segs: map[int]bool{}}
		if kp.m.Metadata == nil {
			kp.m.Metadata = map[string]string{}
		}
		if m.Complete {
			for _, f := range m.Files {
				if n, ok := k.index(f); ok {
					k.hold(kp, n)
				}
			}
		} else {
			for n, r := range k.ranges {
				if r.overlaps(kp.from, kp.to) {
					k.hold(kp, n)
				}
			}
		}
		k.keeps = append(k.keeps, kp)
		k.byID[m.DumpID] = kp
	}
	slices.SortFunc(k.keeps, func(a, b *keep) int { return a.m.TriggeredAt.Compare(b.m.TriggeredAt) })
	return nil
}

// index returns N of a segment name PREFIX.N.bin[.gz].
func (k *Keeper) index(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, k.opts.FilePrefix+".")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, ".")
	n, err := strconv.Atoi(num)
	return n, ok && err == nil && n >= 0
}

// Close logs the last ranges.
func (k *Keeper) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.saveRanges()
	if k.log == nil {
		return nil
	}
	return k.log.Close()
}

func (k *Keeper) report(err error) {
	if err != nil && k.opts.OnError != nil {
		k.opts.OnError(err)
	}
}
