package otelctx

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// record builds a thread context record: header then attrs-data.
func record(valid byte, attrs ...byte) []byte {
	b := make([]byte, RecordHeaderSize, RecordHeaderSize+len(attrs))
	for i := range 16 {
		b[offTraceID+i] = byte(0xa0 + i)
	}
	for i := range 8 {
		b[offSpanID+i] = byte(0xb0 + i)
	}
	b[offValid] = valid
	b[offTraceFlags] = 1
	binary.LittleEndian.PutUint16(b[offAttrsSize:], uint16(len(attrs)))
	return append(b, attrs...)
}

func TestParseRecord(t *testing.T) {
	keys := []string{"http.route", "user.name"}
	tests := []struct {
		name    string
		b       []byte
		keyMap  []string
		want    []Attr
		wantErr error
	}{
		{name: "no attributes", b: record(1), keyMap: keys},
		{name: "two", b: record(1, 0, 2, '/', 'a', 1, 3, 'b', 'o', 'b'), keyMap: keys,
			want: []Attr{{0, "http.route", "/a"}, {1, "user.name", "bob"}}},
		{name: "last occurrence wins", b: record(1, 0, 1, 'x', 1, 1, 'u', 0, 1, 'y'), keyMap: keys,
			want: []Attr{{1, "user.name", "u"}, {0, "http.route", "y"}}},
		{name: "index outside the key map dropped", b: record(1, 7, 1, 'x', 0, 1, 'y'), keyMap: keys,
			want: []Attr{{0, "http.route", "y"}}},
		{name: "no key map keeps all, unnamed", b: record(1, 7, 1, 'x'),
			want: []Attr{{Key: 7, Value: "x"}}},
		{name: "truncated entry stops parsing", b: record(1, 0, 1, 'x', 1, 9, 'a', 'b'), keyMap: keys,
			want: []Attr{{0, "http.route", "x"}}},
		{name: "lone key byte", b: record(1, 0, 1, 'x', 1), keyMap: keys,
			want: []Attr{{0, "http.route", "x"}}},
		{name: "empty value", b: record(1, 0, 0), keyMap: keys, want: []Attr{{0, "http.route", ""}}},
		{name: "being rewritten", b: record(0, 0, 1, 'x'), wantErr: ErrNotValid},
		{name: "reserved valid value", b: record(2), wantErr: ErrNotValid},
		{name: "short header", b: record(1)[:27], wantErr: ErrInvalid},
		{name: "attrs-data shorter than its size", b: record(1, 0, 1, 'x')[:30], wantErr: ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseRecord(tt.b, tt.keyMap)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("want %v, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.TraceIDString() != "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf" || c.SpanIDString() != "b0b1b2b3b4b5b6b7" || c.TraceFlags != 1 || !c.HasSpan() {
				t.Errorf("ids %s %s flags %d", c.TraceIDString(), c.SpanIDString(), c.TraceFlags)
			}
			if !reflect.DeepEqual(c.Attrs, tt.want) {
				t.Errorf("attrs %+v, want %+v", c.Attrs, tt.want)
			}
		})
	}
}

func TestRecordWithoutSpan(t *testing.T) {
	b := record(1, 0, 1, 'x')
	clear(b[:24])
	c, err := ParseRecord(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.HasSpan() || len(c.Attrs) != 1 {
		t.Fatalf("%+v", c)
	}
}

func FuzzParseRecord(f *testing.F) {
	f.Add(record(1, 0, 2, '/', 'a', 1, 3, 'b', 'o', 'b'))
	f.Add(record(0))
	f.Add(record(1, 0, 200))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseRecord(b, []string{"a", "b", "c"})
		if err != nil {
			return
		}
		seen := map[uint8]bool{}
		for _, a := range c.Attrs {
			if a.Key > 2 || seen[a.Key] {
				t.Fatalf("attribute %+v out of the key map or repeated", a)
			}
			seen[a.Key] = true
		}
	})
}

func BenchmarkParseRecord(b *testing.B) {
	rec := record(1, 0, 9, '/', 'c', 'h', 'e', 'c', 'k', 'o', 'u', 't', 1, 3, 'a', 'm', 'y')
	keys := []string{"http.route", "user.name"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseRecord(rec, keys); err != nil {
			b.Fatal(err)
		}
	}
}
