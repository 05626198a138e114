package keep

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// times is when a segment has events: sorted, disjoint intervals [from,
// to] of Unix ns, at most maxIntervals (past it the two closest merge:
// the set only grows, so a keep may take a segment a little beyond its
// events, never miss one).
type times [][2]int64

const (
	maxIntervals = 64
	// joinGap: intervals this close are one.
	joinGap = int64(50 * time.Millisecond)
)

func (t times) add(iv [2]int64) times {
	if iv[1] < iv[0] {
		iv[0], iv[1] = iv[1], iv[0]
	}
	// The first interval that ends at or after iv's start (less the gap).
	i, _ := slices.BinarySearchFunc(t, iv[0]-joinGap, func(x [2]int64, v int64) int {
		switch {
		case x[1] < v:
			return -1
		case x[1] > v:
			return 1
		}
		return 0
	})
	j := i
	for j < len(t) && t[j][0] <= iv[1]+joinGap {
		iv = [2]int64{min(iv[0], t[j][0]), max(iv[1], t[j][1])}
		j++
	}
	t = slices.Replace(t, i, j, iv)
	for len(t) > maxIntervals {
		// Merge the two closest neighbours.
		best := 0
		for k := 1; k+1 < len(t); k++ {
			if t[k+1][0]-t[k][1] < t[best+1][0]-t[best][1] {
				best = k
			}
		}
		t = slices.Replace(t, best, best+2, [2]int64{t[best][0], t[best+1][1]})
	}
	return t
}

// overlaps reports whether t has events in [from, to].
func (t times) overlaps(from, to int64) bool {
	i, _ := slices.BinarySearchFunc(t, from, func(x [2]int64, v int64) int {
		if x[1] < v {
			return -1
		}
		return 1
	})
	return i < len(t) && t[i][0] <= to
}

// The range log, .PREFIX.keep-ranges: JSON lines {"n","iv"}, the times of
// segment n as of the line; the last line of a segment wins. Rewritten
// from memory at start and when it grew past maxLogBytes.
type rangeRecord struct {
	N  int        `json:"n"`
	IV [][2]int64 `json:"iv"`
}

const maxLogBytes = 4 << 20

func (k *Keeper) logPath() string {
	return filepath.Join(k.opts.Dir, "."+k.opts.FilePrefix+".keep-ranges")
}

// openRanges reads the range log, keeps the segments still in Dir and
// opens it compacted.
func (k *Keeper) openRanges() error {
	if f, err := os.Open(k.logPath()); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r rangeRecord
			if json.Unmarshal(sc.Bytes(), &r) != nil || r.N < 0 {
				continue // a line cut by a crash
			}
			var t times
			for _, iv := range r.IV {
				t = t.add(iv)
			}
			k.ranges[r.N] = t
		}
		f.Close()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("keep: %w", err)
	}
	for n := range k.ranges {
		if !k.exists(n) {
			delete(k.ranges, n)
		}
	}
	return k.compact()
}

// compact rewrites the log from memory and reopens it for appending.
func (k *Keeper) compact() error {
	if k.log != nil {
		k.log.Close()
		k.log = nil
	}
	path := k.logPath()
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, k.opts.FileMode)
	if err != nil {
		return fmt.Errorf("keep: %w", err)
	}
	w := bufio.NewWriter(f)
	for _, n := range slices.Sorted(maps.Keys(k.ranges)) {
		b, _ := json.Marshal(rangeRecord{n, k.ranges[n]})
		w.Write(append(b, '\n'))
	}
	err = w.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("keep: %w", err)
	}
	k.log, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, k.opts.FileMode)
	if err != nil {
		return fmt.Errorf("keep: %w", err)
	}
	k.logBytes = 0
	return nil
}

// saveRanges logs the times that changed since the last call, and drops
// those of segments deleted since (once a minute: a stat each).
func (k *Keeper) saveRanges() {
	if now := k.opts.Now(); now.Sub(k.pruned) >= time.Minute {
		k.pruned = now
		for n := range k.ranges {
			if k.held[n] == 0 && !k.dirty[n] && !k.exists(n) {
				delete(k.ranges, n)
			}
		}
	}
	if len(k.dirty) == 0 || k.log == nil {
		return
	}
	if k.logBytes > maxLogBytes {
		clear(k.dirty)
		k.report(k.compact())
		return
	}
	var buf []byte
	for n := range k.dirty {
		b, _ := json.Marshal(rangeRecord{n, k.ranges[n]})
		buf = append(append(buf, b...), '\n')
	}
	clear(k.dirty)
	if _, err := k.log.Write(buf); err != nil {
		k.report(fmt.Errorf("keep: range log: %w", err))
	}
	k.logBytes += int64(len(buf))
}
