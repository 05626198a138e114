package main

import (
	"bufio"
	"encoding/base64"
	"flag"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/wire"
)

func init() {
	register(&command{
		name: "dump",
		summary: "print every event as a JSON line: {\"name\", \"ts\", \"file\" (several inputs only), \"fields\": {…}} " +
			"(callchains symbolized where the file has symbols)",
		usage: "[--kinds K1,K2] [--no-symbols] [-o FILE] FILE|DIR…",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			kinds := fs.String("kinds", "", "only these event kinds, comma-separated schema names (e.g. CpuSampleEvent,PollStartEvent)")
			noSyms := fs.Bool("no-symbols", false, "do not symbolize callchains (skips the pass that reads the symbol table)")
			out := fs.String("o", "-", "output file")
			return func(e *env, args []string) error { return dump(e, args, *kinds, !*noSyms, *out) }
		},
	})
}

func dump(e *env, args []string, kinds string, symbolize bool, out string) error {
	if len(args) == 0 {
		return usageError{"no input files"}
	}
	files, err := analysis.Expand(args)
	if err != nil {
		return err
	}
	var want map[string]bool
	if kinds != "" {
		want = map[string]bool{}
		for _, k := range strings.Split(kinds, ",") {
			if k = strings.TrimSpace(k); k != "" {
				want[k] = true
			}
		}
	}
	w, closeOut, err := createOutput(e, out)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	var buf []byte
	for _, f := range files {
		var syms map[uint64][]analysis.Frame
		if symbolize {
			if syms, err = analysis.Symbols(f); err != nil {
				return err
			}
		}
		info, err := analysis.Scan(f, func(ev *wire.Event) error {
			if want != nil && !want[ev.Name()] {
				return nil
			}
			buf = appendEvent(buf[:0], ev, f, len(files) > 1, syms)
			_, err := bw.Write(buf)
			return err
		})
		if err != nil {
			return err
		}
		if info.Truncated != nil {
			printf(e.stderr, "perfprof: warning: truncated, the events before it were dumped: %v\n", info.Truncated)
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return closeOut()
}

func appendEvent(b []byte, ev *wire.Event, file string, withFile bool, syms map[uint64][]analysis.Frame) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, ev.Name())
	b = append(b, `,"ts":`...)
	b = strconv.AppendUint(b, ev.Timestamp, 10)
	if withFile {
		b = append(b, `,"file":`...)
		b = appendString(b, file)
	}
	b = append(b, `,"fields":{`...)
	for i, f := range ev.Schema.Fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, f.Name)
		b = append(b, ':')
		b = appendValue(b, &ev.Values[i], syms)
	}
	return append(b, "}}\n"...)
}

func appendValue(b []byte, v *wire.Value, syms map[uint64][]analysis.Frame) []byte {
	if v.Absent {
		return append(b, "null"...)
	}
	switch v.Type {
	case wire.I64:
		return strconv.AppendInt(b, v.Int(), 10)
	case wire.F64:
		f := v.Float()
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return appendString(b, strconv.FormatFloat(f, 'g', -1, 64))
		}
		return strconv.AppendFloat(b, f, 'g', -1, 64)
	case wire.Bool:
		return strconv.AppendBool(b, v.Bool())
	case wire.Varint, wire.U8, wire.U16, wire.U32:
		return strconv.AppendUint(b, v.U, 10)
	case wire.String, wire.PooledString:
		return appendString(b, v.S)
	case wire.Bytes:
		return appendString(b, base64.StdEncoding.EncodeToString(v.B))
	case wire.StackFrames, wire.PooledStackFrames:
		b = append(b, '[')
		for i, a := range v.Frames {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"addr":"0x`...)
			b = strconv.AppendUint(b, a, 16)
			b = append(b, '"')
			if fs := syms[a]; len(fs) > 0 {
				b = append(b, `,"frames":[`...)
				// Innermost inlined frame first, like the callchain.
				for j := len(fs) - 1; j >= 0; j-- {
					if j < len(fs)-1 {
						b = append(b, ',')
					}
					b = append(b, `{"func":`...)
					b = appendString(b, fs[j].Func)
					if fs[j].File != "" {
						b = append(b, `,"file":`...)
						b = appendString(b, fs[j].File)
					}
					if fs[j].Line != 0 {
						b = append(b, `,"line":`...)
						b = strconv.AppendInt(b, int64(fs[j].Line), 10)
					}
					b = append(b, '}')
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		}
		return append(b, ']')
	case wire.StringMap:
		b = append(b, '{')
		for i, kv := range v.Map {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, kv.Key)
			b = append(b, ':')
			b = appendString(b, kv.Value)
		}
		return append(b, '}')
	case wire.DynamicList:
		b = append(b, '[')
		for i := range v.List {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValue(b, &v.List[i], syms)
		}
		return append(b, ']')
	case wire.DynamicMap:
		b = append(b, '[')
		for i := range v.Entries {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '[')
			b = appendValue(b, &v.Entries[i].Key, syms)
			b = append(b, ',')
			b = appendValue(b, &v.Entries[i].Value, syms)
			b = append(b, ']')
		}
		return append(b, ']')
	}
	return append(b, "null"...)
}

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD,
// and control characters, DEL and C1 too, are \u escapes, so that dump's
// output is safe on a terminal.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else if r < 0xa0 {
			// A C1 control: valid JSON raw, but a terminal may act on it.
			b = append(b, '\\', 'u', '0', '0', hex[r>>4], hex[r&15])
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}
