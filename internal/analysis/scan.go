package analysis

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/perfprof/perfprof/internal/wire"
)

// ScanInfo describes a scanned file.
type ScanInfo struct {
	Format    string
	Gzip      bool
	Truncated error // non-nil if the file ends inside a record; the events before it were scanned
}

// Scan calls fn for every event of one file, in file order. Legacy records
// are presented as wire.LegacyEventReader presents them: named like their
// TRC counterparts, with timestamps in ns since the recorder started and
// definitions resolved. An error of fn stops the scan and is returned.
func Scan(path string, fn func(ev *wire.Event) error) (ScanInfo, error) {
	o, err := open(path, nil)
	if err != nil {
		return ScanInfo{}, err
	}
	defer o.Close()
	info := ScanInfo{Format: o.format, Gzip: o.gzip}
	rd, _, err := o.events()
	if err == nil {
		var stop error
		if stop, err = scan(rd, fn); stop != nil {
			return info, stop
		}
	}
	switch {
	case err == nil:
		return info, nil
	case errors.Is(err, io.ErrUnexpectedEOF):
		info.Truncated = fmt.Errorf("%s: %w", path, err)
		return info, nil
	}
	return info, fmt.Errorf("%s: %w", path, err)
}

// scan reads rd to its end, calling fn for every event. It returns the
// error of fn that stopped it, or the read error that did.
func scan(rd eventReader, fn func(ev *wire.Event) error) (stop, err error) {
	var ev wire.Event
	for {
		err := rd.ReadEvent(&ev)
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if err := fn(&ev); err != nil {
			return err, nil
		}
	}
}

// Symbols reads the symbol table of one file (SymbolTableEntry events, or
// legacy CallframeDef records): address -> frames, outermost first.
func Symbols(path string) (map[uint64][]Frame, error) {
	b := newBuilder(path)
	_, err := Scan(path, func(ev *wire.Event) error {
		if k := b.kindOf(ev.Schema); k.l.Kind == wire.KindSymbol {
			b.event(ev)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make(map[uint64][]Frame, len(b.syms))
	for a, es := range b.syms {
		slices.SortFunc(es, func(x, y symEntry) int { return cmp.Compare(x.depth, y.depth) })
		fs := make([]Frame, len(es))
		for i, e := range es {
			fs[i] = e.f
		}
		out[a] = fs
	}
	return out, nil
}
