package segment

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// parseName returns N and the suffix (".bin", ".bin.gz", ".bin.active") of
// a segment name Prefix.N.suffix.
func (r *Rotator) parseName(name string) (int, string, bool) {
	rest, ok := strings.CutPrefix(name, r.opts.Prefix+".")
	if !ok {
		return 0, "", false
	}
	num, suffix, ok := strings.Cut(rest, ".")
	if !ok || num == "" || strings.TrimLeft(num, "0123456789") != "" {
		return 0, "", false
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return 0, "", false
	}
	switch suffix = "." + suffix; suffix {
	case ".bin", ".bin.gz", ".bin.active":
		return n, suffix, true
	}
	return 0, "", false
}

// scan finds the existing segments: sealed ones join the retention list,
// active leftovers of an earlier process are recovered and join it too, and
// numbering continues after all of them. With Compress, sealed segments
// left uncompressed (the process died before or while gzipping them) are
// queued for compression.
func (r *Rotator) scan() error {
	ents, err := os.ReadDir(r.opts.Dir)
	if err != nil {
		return fmt.Errorf("segment: scan %s: %w", r.opts.Dir, err)
	}
	byN := map[int]file{}
	var active []int
	for _, e := range ents {
		n, suffix, ok := r.parseName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		r.next = max(r.next, n+1)
		if suffix == ".bin.active" {
			active = append(active, n)
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		s := file{n, filepath.Join(r.opts.Dir, e.Name()), info.Size()}
		if old, ok := byN[n]; ok && strings.HasSuffix(old.path, ".bin") {
			continue // .bin and .bin.gz: compression was interrupted
		}
		byN[n] = s
	}
	for _, s := range byN {
		r.sealed = append(r.sealed, s)
		if r.opts.Compress && strings.HasSuffix(s.path, ".bin") {
			r.pending = append(r.pending, s.n)
		}
	}
	slices.Sort(active)
	for _, n := range active {
		if _, ok := byN[n]; ok {
			continue // sealed and still active: never written so, left alone
		}
		if err := r.recoverActive(r.name(n, ".bin.active"), n); err != nil {
			return err
		}
	}
	slices.Sort(r.pending)
	slices.SortFunc(r.sealed, func(a, b file) int { return a.n - b.n })
	return nil
}

func (r *Rotator) name(n int, suffix string) string {
	return filepath.Join(r.opts.Dir, r.opts.Prefix+"."+strconv.Itoa(n)+suffix)
}

// retain deletes the oldest sealed segments while sealed plus active bytes
// exceed MaxTotalSize. Held segments are passed over and not counted.
func (r *Rotator) retain() {
	if r.opts.MaxTotalSize <= 0 {
		return
	}
	held := func(s file) bool { return r.opts.Held != nil && r.opts.Held(s.n) }
	var total int64
	if r.f != nil {
		total = r.size
	}
	for _, s := range r.sealed {
		if !held(s) {
			total += s.size
		}
	}
	for i := 0; total > r.opts.MaxTotalSize && i < len(r.sealed); {
		s := r.sealed[i]
		if held(s) {
			i++
			continue
		}
		r.sealed = slices.Delete(r.sealed, i, i+1)
		total -= s.size
		r.stats.Deleted++
		for _, p := range []string{s.path, r.name(s.n, ".bin"), r.name(s.n, ".bin.gz")} {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				r.stats.RotateErrors++
			}
		}
	}
}

// Forget drops sealed segment n (deleted from outside, e.g. once uploaded)
// from retention's count, without counting it as deleted. Its files, if
// still there, are left alone.
func (r *Rotator) Forget(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sealed = slices.DeleteFunc(r.sealed, func(s file) bool { return s.n == n })
}
