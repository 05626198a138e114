package segment

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// syncSeen is one call of syncFile: the base name of the file synced (the
// directory's own name for a directory) and the names in dir at that moment.
type syncSeen struct {
	synced string
	names  []string
}

// recordSyncs makes syncFile record every sync of a file in dir or of dir
// itself, for the rest of the test. It syncs for real too.
func recordSyncs(t *testing.T, dir string) func() []syncSeen {
	var mu sync.Mutex
	var seen []syncSeen
	orig := syncFile
	syncFile = func(f *os.File) error {
		if filepath.Dir(f.Name()) == dir || f.Name() == dir {
			var names []string
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				names = append(names, e.Name())
			}
			mu.Lock()
			seen = append(seen, syncSeen{filepath.Base(f.Name()), names})
			mu.Unlock()
		}
		return orig(f)
	}
	t.Cleanup(func() { syncFile = orig })
	return func() []syncSeen {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// syncStep is a sync a test expects: of the file synced, while the names
// in has exist and those in lacks do not.
type syncStep struct {
	synced     string
	has, lacks []string
}

// wantSyncs checks that the steps happened in this order among seen.
func wantSyncs(t *testing.T, seen []syncSeen, steps ...syncStep) {
	t.Helper()
	i := 0
next:
	for _, st := range steps {
		for ; i < len(seen); i++ {
			s := seen[i]
			if s.synced != st.synced {
				continue
			}
			ok := true
			for _, n := range st.has {
				ok = ok && slices.Contains(s.names, n)
			}
			for _, n := range st.lacks {
				ok = ok && !slices.Contains(s.names, n)
			}
			if ok {
				i++
				continue next
			}
		}
		t.Fatalf("no sync of %s with %v present and %v absent after the steps before it; syncs seen: %+v",
			st.synced, st.has, st.lacks, seen)
	}
}

// writeOneBatch writes one batch with a new Rotator and closes it.
func writeOneBatch(t *testing.T, opts Options) {
	t.Helper()
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeBatch(r, rotBatch(0, 3, 100, 5e9)); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSealSyncs: a sealed segment's data is synced before the rename, and
// its directory after it, so that a power cut leaves the whole segment
// under one of its names.
func TestSealSyncs(t *testing.T) {
	dir := t.TempDir()
	seen := recordSyncs(t, dir)
	writeOneBatch(t, Options{Dir: dir, Prefix: "seg"})
	wantSyncs(t, seen(),
		syncStep{"seg.0.bin.active", []string{"seg.0.bin.active"}, []string{"seg.0.bin"}},
		syncStep{filepath.Base(dir), []string{"seg.0.bin"}, []string{"seg.0.bin.active"}})
}

// TestCompressSyncs: the .gz and the directory entry naming it are synced
// before the .bin is removed.
func TestCompressSyncs(t *testing.T) {
	dir := t.TempDir()
	seen := recordSyncs(t, dir)
	writeOneBatch(t, Options{Dir: dir, Prefix: "seg", Compress: true})
	both := []string{"seg.0.bin", "seg.0.bin.gz"}
	wantSyncs(t, seen(),
		syncStep{"seg.0.bin.gz", both, nil},
		syncStep{filepath.Base(dir), both, nil})
	if names := segments(t, dir); !slices.Equal(names, []string{"seg.0.bin.gz"}) {
		t.Errorf("files left: %v", names)
	}
}

// TestRecoverSyncs: a recovered segment, cut or not, is synced before it
// is renamed to .bin, and the directory after.
func TestRecoverSyncs(t *testing.T) {
	data, ends := crashedSegment(t, 3, 4)
	for name, data := range map[string][]byte{"whole": data, "cut": data[:ends[1]+3]} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "seg.5.bin.active"), data, 0o600); err != nil {
				t.Fatal(err)
			}
			seen := recordSyncs(t, dir)
			r, err := New(Options{Dir: dir, Prefix: "seg"})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if st := r.Stats(); st.Recovered != 1 {
				t.Fatalf("stats %+v", st)
			}
			wantSyncs(t, seen(),
				syncStep{"seg.5.bin.active", []string{"seg.5.bin.active"}, []string{"seg.5.bin"}},
				syncStep{filepath.Base(dir), []string{"seg.5.bin"}, []string{"seg.5.bin.active"}})
		})
	}
}
