package analysis

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
)

// Input formats.
const (
	FormatTRC      = "trc"
	FormatTokioTRC = "tokiotrc"
)

// ErrNoTrace is returned for a file that is neither format, or a directory
// without segments.
var ErrNoTrace = errors.New("not a trace file")

var segmentName = regexp.MustCompile(`^(.*)\.(\d+)\.bin(\.gz|\.active)?$`)

// objectName is a segment named by dial9's S3 layout v1,
// {epoch_secs}-{index}.bin[.gz], as a bucket's objects are when
// downloaded with their keys.
var objectName = regexp.MustCompile(`^(\d+)-(\d+)\.bin(\.gz)?$`)

// Expand turns the arguments into input files: a file stays itself, but
// a keep manifest (*.json) becomes the segment files it lists; a
// directory becomes its rotated segments (PREFIX.N.bin, PREFIX.N.bin.gz,
// PREFIX.N.bin.active) ordered by prefix and N, then any other *.bin and
// *.bin.gz files by name; a directory without them, a bucket downloaded
// with its keys: the EPOCH-N.bin.gz objects below it, by time. When both PREFIX.N.bin and PREFIX.N.bin.gz exist
// (a segment being compressed), the .bin is used.
func Expand(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			if strings.HasSuffix(a, ".json") {
				files, err := manifestFiles(a)
				if err != nil {
					return nil, err
				}
				out = append(out, files...)
				continue
			}
			out = append(out, a)
			continue
		}
		files, err := segments(a)
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			// A bucket downloaded with its keys: the segments are in
			// the partitions' directories.
			if files, err = objects(a); err != nil {
				return nil, err
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%s: no trace segments (*.N.bin, *.N.bin.gz, *.N.bin.active, or EPOCH-N.bin.gz objects of an S3 layout below it): %w", a, ErrNoTrace)
		}
		out = append(out, files...)
	}
	return out, nil
}

// manifestFiles returns the segment files a keep manifest lists
// (DIR/PREFIX.kept/ID.json names files of DIR; see the tracefile
// exporter's keep rules and docs/trace-conventions.md).
func manifestFiles(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m struct {
		DumpID   string   `json:"dump_id"`
		Files    []string `json:"files"`
		Complete bool     `json:"complete"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.DumpID == "" {
		return nil, fmt.Errorf("%s: not a keep manifest (a JSON object with dump_id and files): %w", path, ErrNoTrace)
	}
	if !m.Complete {
		return nil, fmt.Errorf("%s: keep manifest %s is not complete yet (its segments are still being written; try again after keep.settle)", path, m.DumpID)
	}
	if len(m.Files) == 0 {
		return nil, fmt.Errorf("%s: keep manifest %s lists no segment file: %w", path, m.DumpID, ErrNoTrace)
	}
	dir := filepath.Dir(filepath.Dir(path))
	out := make([]string, 0, len(m.Files))
	for _, f := range m.Files {
		if f == "" || filepath.IsAbs(f) || strings.Contains(f, "/") || strings.Contains(f, `\`) {
			return nil, fmt.Errorf("%s: segment file %q: want a name in the manifest's parent directory", path, f)
		}
		out = append(out, filepath.Join(dir, f))
	}
	return out, nil
}

// objects returns the segments below dir named as dial9's S3 layout v1
// names them ({prefix}/version=1/date=…/service=…/time=…/instance=…/boot=…/
// {epoch}-{index}.bin.gz), by start time, then index and path.
func objects(dir string) ([]string, error) {
	type obj struct {
		epoch, index uint64
		path         string
	}
	var objs []obj
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		m := objectName.FindStringSubmatch(d.Name())
		if m == nil {
			return nil
		}
		epoch, err1 := strconv.ParseUint(m[1], 10, 64)
		index, err2 := strconv.ParseUint(m[2], 10, 64)
		if err1 == nil && err2 == nil {
			objs = append(objs, obj{epoch, index, path})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(objs, func(i, j int) bool {
		a, b := objs[i], objs[j]
		if a.epoch != b.epoch {
			return a.epoch < b.epoch
		}
		if a.index != b.index {
			return a.index < b.index
		}
		return a.path < b.path
	})
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.path
	}
	return out, nil
}

func segments(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type seg struct {
		prefix string
		n      uint64
		suffix string
		name   string
	}
	var segs []seg
	var others []string
	have := map[string]bool{}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		have[e.Name()] = true
	}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		if m := segmentName.FindStringSubmatch(name); m != nil {
			if m[3] == ".gz" && have[name[:len(name)-3]] {
				continue // still being compressed: read the .bin
			}
			n, err := strconv.ParseUint(m[2], 10, 64)
			if err != nil {
				continue
			}
			segs = append(segs, seg{m[1], n, m[3], name})
			continue
		}
		if objectName.MatchString(name) {
			continue // read by objects, in time order
		}
		if ext := filepath.Ext(name); ext == ".bin" || (ext == ".gz" && filepath.Ext(name[:len(name)-3]) == ".bin") {
			others = append(others, name)
		}
	}
	sort.Slice(segs, func(i, j int) bool {
		a, b := segs[i], segs[j]
		if a.prefix != b.prefix {
			return a.prefix < b.prefix
		}
		if a.n != b.n {
			return a.n < b.n
		}
		return a.suffix < b.suffix
	})
	sort.Strings(others)
	var out []string
	for _, s := range segs {
		out = append(out, filepath.Join(dir, s.name))
	}
	for _, o := range others {
		out = append(out, filepath.Join(dir, o))
	}
	return out, nil
}

// countingReader counts bytes read into a shared counter, for progress.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n != nil {
		c.n.Add(int64(n))
	}
	return n, err
}

// opened is an input file opened for decoding: r yields decompressed bytes.
type opened struct {
	f      *os.File
	r      *bufio.Reader
	format string
	gzip   bool
	size   int64
}

func (o *opened) Close() error { return o.f.Close() }

// open opens path, unwraps gzip and sniffs the format. read counts bytes
// read from the file (compressed).
func open(path string, read *atomic.Int64) (*opened, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	o := &opened{f: f}
	if st, err := f.Stat(); err == nil {
		o.size = st.Size()
	}
	br := bufio.NewReaderSize(countingReader{f, read}, 256<<10)
	if b, _ := br.Peek(2); len(b) == 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: offset 0: gzip: %w", path, err)
		}
		zr.Multistream(true)
		o.gzip = true
		br = bufio.NewReaderSize(zr, 256<<10)
	}
	o.r = br
	head, err := br.Peek(8)
	switch {
	case len(head) >= 4 && bytes.Equal(head[:4], []byte("TRC\x00")):
		o.format = FormatTRC
	case len(head) == 8 && string(head) == "TOKIOTRC":
		o.format = FormatTokioTRC
	default:
		f.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: offset 0: %w", path, err)
		}
		if len(head) == 0 {
			return nil, fmt.Errorf("%s: offset 0: empty file: %w", path, ErrNoTrace)
		}
		return nil, fmt.Errorf("%s: offset 0: magic % x is neither TRC\\0 nor TOKIOTRC: %w", path, head, ErrNoTrace)
	}
	return o, nil
}
