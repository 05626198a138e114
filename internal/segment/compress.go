package segment

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"slices"
)

// compressLoop gzips the segments sealed for compression, one at a time,
// until none is pending. A segment that retention deleted meanwhile leaves
// no .gz behind.
func (r *Rotator) compressLoop() {
	defer r.wg.Done()
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.pending) > 0 {
		n := r.pending[0]
		r.pending = r.pending[1:]
		r.mu.Unlock()
		gz, err := compressFile(r.name(n, ".bin"), r.opts.FileMode)
		r.mu.Lock()
		i := slices.IndexFunc(r.sealed, func(s file) bool { return s.n == n })
		switch {
		case i < 0:
			if err == nil {
				os.Remove(gz)
			}
		case err != nil:
			r.stats.RotateErrors++ // the .bin stays, uncompressed
		default:
			r.sealed[i].path = gz
		}
	}
	r.compressing = false
}

// compressLevel is gzip's level 2: on a 5.9 MB segment of the C target at
// 999 Hz, 30 ms and 16.1% of the size, against 148 ms and 12.9% at the
// default level (6), which took 8.6% of the collector's CPU there.
const compressLevel = 2

// compressFile gzips path to path.gz, a file of the given mode, and
// removes path.
func compressFile(path string, mode os.FileMode) (string, error) {
	gz := path + ".gz"
	in, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("segment: compress: %w", err)
	}
	defer in.Close()
	out, err := createFile(gz, os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return "", fmt.Errorf("segment: compress: %w", err)
	}
	zw, err := gzip.NewWriterLevel(out, compressLevel)
	if err != nil {
		out.Close()
		os.Remove(gz)
		return "", fmt.Errorf("segment: compress: %w", err)
	}
	_, err = io.Copy(zw, in)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	// The .gz and its directory entry reach the disk before the .bin goes:
	// a power cut then leaves the .bin, or a whole .gz (a .bin next to a
	// .gz is compressed again, see scan).
	if serr := syncFile(out); err == nil {
		err = serr
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncParent(gz)
	}
	if err != nil {
		os.Remove(gz)
		return "", fmt.Errorf("segment: compress %s: %w", path, err)
	}
	os.Remove(path)
	return gz, nil
}
