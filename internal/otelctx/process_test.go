package otelctx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// Protobuf builders for tests: each returns the bytes of a message.
func pbBytes(num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
}

func pbVarint(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func pbKV(key string, anyValue []byte) []byte {
	return append(pbBytes(fieldKVKey, []byte(key)), pbBytes(fieldKVValue, anyValue)...)
}

func pbString(s string) []byte { return pbBytes(fieldAnyString, []byte(s)) }

func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// samplePayload is a ProcessContext with values of every kind.
func samplePayload() []byte {
	double := protowire.AppendFixed64(protowire.AppendTag(nil, fieldAnyDouble, protowire.Fixed64Type), math.Float64bits(1.5))
	resource := cat(
		pbBytes(fieldResourceAttributes, pbKV("service.name", pbString("checkout"))),
		pbBytes(fieldResourceAttributes, pbKV("process.pid", pbVarint(fieldAnyInt, 42))),
		pbBytes(fieldResourceAttributes, pbKV("debug", pbVarint(fieldAnyBool, 1))),
		pbBytes(fieldResourceAttributes, pbKV("ratio", double)),
		pbBytes(fieldResourceAttributes, pbKV("raw", pbBytes(fieldAnyBytes, []byte{1, 2}))),
		pbBytes(fieldResourceAttributes, pbKV("labels", pbBytes(fieldAnyKVList,
			pbBytes(fieldListValues, pbKV("team", pbString("payments")))))),
		pbVarint(2, 3), // dropped_attributes_count: skipped
	)
	keyMap := pbBytes(fieldAnyArray, cat(
		pbBytes(fieldListValues, pbString("http.route")),
		pbBytes(fieldListValues, pbString("user.name"))))
	return cat(
		pbBytes(fieldContextResource, resource),
		pbBytes(fieldContextAttributes, pbKV(KeySchemaVersion, pbString("tls_v1"))),
		pbBytes(fieldContextAttributes, pbKV(KeyAttributeKeyMap, keyMap)),
		pbVarint(99, 7), // a field from the future: skipped
	)
}

func TestDecodePayload(t *testing.T) {
	r, err := DecodePayload(samplePayload())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"service.name": "checkout", "process.pid": int64(42), "debug": true, "ratio": 1.5,
		"raw": []byte{1, 2}, "labels": map[string]any{"team": "payments"},
	}
	if !reflect.DeepEqual(r.Attributes, want) {
		t.Errorf("attributes %v, want %v", r.Attributes, want)
	}
	if r.ServiceName() != "checkout" || r.SchemaVersion() != "tls_v1" || !reflect.DeepEqual(r.KeyMap(), []string{"http.route", "user.name"}) {
		t.Errorf("extra %v", r.Extra)
	}
}

func TestDecodePayloadErrors(t *testing.T) {
	for name, b := range map[string][]byte{
		"truncated":      samplePayload()[:20],
		"bad tag":        {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"length too big": {0x0a, 0x7f, 0x00},
	} {
		if _, err := DecodePayload(b); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: want ErrInvalid, got %v", name, err)
		}
	}
	// Nesting deeper than maxDepth is refused, not recursed into.
	v := pbString("x")
	for range maxDepth + 2 {
		v = pbBytes(fieldAnyArray, pbBytes(fieldListValues, v))
	}
	if _, err := DecodePayload(pbBytes(fieldContextAttributes, pbKV("deep", v))); !errors.Is(err, ErrInvalid) {
		t.Errorf("deep: want ErrInvalid, got %v", err)
	}
}

func FuzzDecodePayload(f *testing.F) {
	f.Add(samplePayload())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = DecodePayload(b)
	})
}

// fakeMem is a process's memory for the reading protocol's tests: a header
// at hdrAddr and a payload at payloadAddr; onRead runs before every read, so
// a test can play a publisher updating concurrently.
type fakeMem struct {
	hdr     [HeaderSize]byte
	payload []byte
	onRead  func(m *fakeMem, addr uint64)
	reads   int
}

const (
	hdrAddr     = 0x10000
	payloadAddr = 0x20000
)

func newFakeMem(payload []byte, ts uint64) *fakeMem {
	m := &fakeMem{payload: payload}
	copy(m.hdr[:], "OTEL_CTX")
	binary.LittleEndian.PutUint32(m.hdr[offVersion:], SupportedVersion)
	binary.LittleEndian.PutUint32(m.hdr[offPayloadSize:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(m.hdr[offPublishedAt:], ts)
	binary.LittleEndian.PutUint64(m.hdr[offPayload:], payloadAddr)
	return m
}

func (m *fakeMem) setTS(ts uint64) { binary.LittleEndian.PutUint64(m.hdr[offPublishedAt:], ts) }

func (m *fakeMem) ReadAt(p []byte, off int64) (int, error) {
	m.reads++
	if m.onRead != nil {
		m.onRead(m, uint64(off))
	}
	a := uint64(off)
	switch {
	case a >= hdrAddr && a+uint64(len(p)) <= hdrAddr+HeaderSize:
		return copy(p, m.hdr[a-hdrAddr:]), nil
	case a >= payloadAddr && a+uint64(len(p)) <= payloadAddr+uint64(len(m.payload)):
		return copy(p, m.payload[a-payloadAddr:]), nil
	}
	return 0, fmt.Errorf("read %d bytes at %#x: unmapped", len(p), a)
}

func TestReadProcessContext(t *testing.T) {
	m := newFakeMem(samplePayload(), 1000)
	r, err := ReadProcessContext(m, hdrAddr)
	if err != nil {
		t.Fatal(err)
	}
	if r.ServiceName() != "checkout" || r.PublishedAt != 1000 || r.Addr != hdrAddr {
		t.Fatalf("%+v", r)
	}
}

func TestReadProcessContextRetriesUpdates(t *testing.T) {
	// The first attempt sees the timestamp change between its first and
	// last read: the copy may be torn, so it starts over.
	m := newFakeMem(samplePayload(), 1000)
	m.onRead = func(m *fakeMem, addr uint64) {
		if m.reads == 4 { // the re-read of the timestamp
			m.setTS(2000)
		}
	}
	r, err := ReadProcessContext(m, hdrAddr)
	if err != nil {
		t.Fatal(err)
	}
	if r.PublishedAt != 2000 {
		t.Fatalf("published at %d, want the second publication", r.PublishedAt)
	}

	// A payload freed by an update fails to read: the error must not be
	// reported, since the timestamp says the read raced an update.
	m = newFakeMem(samplePayload(), 1000)
	m.onRead = func(m *fakeMem, addr uint64) {
		switch m.reads {
		case 3: // the payload read: the publisher has just republished
			m.payload = nil
			m.setTS(3000)
		case 5: // the second attempt: the new payload is in place
			m.payload = samplePayload()
		}
	}
	if r, err = ReadProcessContext(m, hdrAddr); err != nil || r.PublishedAt != 3000 {
		t.Fatalf("published at %d, err %v", r.PublishedAt, err)
	}

	// A publisher stuck mid-update (timestamp 0) is given up on.
	m = newFakeMem(samplePayload(), 0)
	if _, err := ReadProcessContext(m, hdrAddr); !errors.Is(err, ErrUpdating) {
		t.Fatalf("want ErrUpdating, got %v", err)
	}
}

func TestReadProcessContextInvalid(t *testing.T) {
	m := newFakeMem(samplePayload(), 1000)
	binary.LittleEndian.PutUint32(m.hdr[offPayloadSize:], MaxPayloadSize+1)
	if _, err := ReadProcessContext(m, hdrAddr); !errors.Is(err, ErrInvalid) {
		t.Errorf("huge payload: want ErrInvalid, got %v", err)
	}
	m = newFakeMem(samplePayload()[:10], 1000)
	if _, err := ReadProcessContext(m, hdrAddr); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad protobuf: want ErrInvalid, got %v", err)
	}
}

func TestProcessContextSkipsForeignMappings(t *testing.T) {
	good := newFakeMem(samplePayload(), 1000)
	bad := newFakeMem(samplePayload(), 1000)
	copy(bad.hdr[:], "NOT_CTX!")
	maps := []mapping{{start: hdrAddr, name: "/memfd:OTEL_CTX (deleted)"}}

	if _, err := processContext(maps, bad); !errors.Is(err, ErrNotPublished) {
		t.Errorf("bad signature: want ErrNotPublished, got %v", err)
	}
	binary.LittleEndian.PutUint32(good.hdr[offVersion:], 3)
	if _, err := processContext(maps, good); !errors.Is(err, ErrNotPublished) {
		t.Errorf("unknown version: want ErrNotPublished, got %v", err)
	}
	binary.LittleEndian.PutUint32(good.hdr[offVersion:], SupportedVersion)
	r, err := processContext(append([]mapping{{start: 0x1000, name: "/memfd:OTEL_CTX_OLD"}}, maps...), good)
	if err != nil || r.Mapping != "/memfd:OTEL_CTX (deleted)" {
		t.Errorf("got %q, %v", r.Mapping, err)
	}
	if _, err := processContext(nil, good); !errors.Is(err, ErrNotPublished) {
		t.Errorf("no mapping: want ErrNotPublished, got %v", err)
	}
}

func TestIsContextMapping(t *testing.T) {
	for name, want := range map[string]bool{
		"[anon_shmem:OTEL_CTX]":      true,
		"[anon:OTEL_CTX]":            true,
		"/memfd:OTEL_CTX":            true,
		"/memfd:OTEL_CTX (deleted)":  true,
		"/memfd:OTEL_CTX_BACKUP":     false,
		"[anon:OTEL_CTX_old]":        false,
		"/usr/lib/libOTEL_CTX.so":    false,
		"":                           false,
		"[anon_shmem:OTEL_CTX] junk": false,
	} {
		if got := isContextMapping(name); got != want {
			t.Errorf("%q: %v, want %v", name, got, want)
		}
	}
}

func TestParseMaps(t *testing.T) {
	data := []byte("55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1234    /usr/bin/my app\n" +
		"7f00aa000000-7f00aa002000 rw-s 00000000 00:01 99      /memfd:OTEL_CTX (deleted)\n" +
		"7ffd1000000-7ffd1021000 rw-p 00000000 00:00 0 \n")
	maps, err := parseMaps(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(maps) != 3 || maps[0].name != "/usr/bin/my app" || maps[0].start != 0x55d0c0a00000 ||
		maps[1].name != "/memfd:OTEL_CTX (deleted)" || maps[1].inode != 99 || maps[2].name != "" {
		t.Fatalf("%+v", maps)
	}
	if _, err := parseMaps([]byte("zz-yy r--p 0 0 0\n")); err == nil {
		t.Fatal("bad range parsed")
	}
}
