package profiler

import (
	"reflect"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/counter"
)

// attrsData encodes OTEP 4947 attrs-data: key index, length, value.
func attrsData(kv ...any) string {
	var b []byte
	for i := 0; i < len(kv); i += 2 {
		v := kv[i+1].(string)
		b = append(b, byte(kv[i].(int)), byte(len(v)))
		b = append(b, v...)
	}
	return string(b)
}

// TestAttrSets: a record's attributes become a sample's set under the key
// map's names; an entry named as one of the receiver's own sample
// attributes is dropped and counted, and the entries after it are kept;
// past 16 entries the rest are dropped and counted; values are cut at 128
// bytes and made UTF-8; equal attrs-data share one set.
func TestAttrSets(t *testing.T) {
	tel := counter.NewSet()
	a := attrSets{keys: []string{"http.route", "thread.id", "user.name", ""}}
	raw := attrsData(0, "GET /a", 1, "7", 2, "ann", 3, "unnamed")
	i := a.get(tel, raw)
	want := []Attr{{"http.route", "GET /a"}, {"user.name", "ann"}}
	if i != 1 || !reflect.DeepEqual(a.sets[i], want) {
		t.Fatalf("set %d %v, want 1 %v", i, a.sets, want)
	}
	if n := tel.Load(cAttrsEntries); n != 1 {
		t.Errorf("entries dropped %d, want 1 (thread.id)", n)
	}
	if j := a.get(tel, raw); j != i || len(a.sets) != 2 {
		t.Errorf("the same attrs-data made set %d of %d, want %d of 2", j, len(a.sets), i)
	}

	keys := make([]string, 20)
	var kv []any
	for k := range keys {
		keys[k] = "k" + string(rune('a'+k))
		kv = append(kv, k, "v")
	}
	b := attrSets{keys: keys}
	if set := b.sets[b.get(tel, attrsData(kv...))]; len(set) != maxSampleAttrs {
		t.Errorf("%d attributes kept of 20, want %d", len(set), maxSampleAttrs)
	}
	if n := tel.Load(cAttrsEntries); n != 2 {
		t.Errorf("entries dropped %d, want 2", n)
	}

	long := "x" + strings.Repeat("é", 100) // 201 bytes: byte 128 is inside an é
	c := attrSets{keys: []string{"v", "w"}}
	set := c.sets[c.get(tel, attrsData(0, long, 1, "a\xffb"))]
	if want := long[:127]; set[0].Value != want {
		t.Errorf("value cut to %d bytes, want %d (at a character's start)", len(set[0].Value), len(want))
	}
	if set[1].Value != "a\uFFFDb" {
		t.Errorf("value %q, want the byte that is not UTF-8 replaced", set[1].Value)
	}
}
