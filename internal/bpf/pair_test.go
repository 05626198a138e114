package bpf

import "testing"

func TestPairer(t *testing.T) {
	rec := func(tid uint32, time uint64) *Record { return &Record{Tid: tid, Time: time} }
	var p Pairer
	// Records of two threads; tid 1's samples arrive out of order, as
	// when the reader drains CPU 1's ring before CPU 0's.
	for _, r := range []*Record{rec(1, 1_000_000), rec(2, 1_000_500), rec(1, 2_000_000), rec(1, 3_000_000), rec(2, 9_000_000)} {
		p.Add(r)
	}
	for _, c := range []struct {
		tid      uint32
		time     uint64
		want     uint64
		ok       bool
		pending  int
		stale    uint64
		unpaired uint64
	}{
		{1, 1_998_000, 2_000_000, true, 4, 0, 0}, // nearest, 2 µs before its record
		{1, 999_000, 1_000_000, true, 3, 0, 0},   // an older sample read later still pairs
		{1, 2_500_000, 0, false, 3, 0, 1},        // no record within MaxSkew
		{2, 1_000_400, 1_000_500, true, 2, 0, 1}, // the other thread's
		{1, 3_000_100, 3_000_000, true, 1, 0, 1}, //
		{2, 2_010_000_000, 0, false, 0, 1, 2},    // tid 2's last record is past the horizon: stale
		{3, 5, 0, false, 0, 1, 3},                // a thread without records
	} {
		r, ok := p.Pair(c.tid, c.time)
		if ok != c.ok || (ok && r.Time != c.want) || p.Pending() != c.pending || p.Stale != c.stale || p.Unpaired != c.unpaired {
			t.Errorf("Pair(%d, %d) = %d, %v; pending %d, stale %d, unpaired %d; want %d, %v; pending %d, stale %d, unpaired %d",
				c.tid, c.time, r.Time, ok, p.Pending(), p.Stale, p.Unpaired, c.want, c.ok, c.pending, c.stale, c.unpaired)
		}
	}
	p.Add(rec(4, 1))
	p.Forget(4)
	if p.Pending() != 0 || p.Stale != 2 {
		t.Errorf("after Forget: pending %d, stale %d", p.Pending(), p.Stale)
	}
}

func TestRecordDecode(t *testing.T) {
	b := make([]byte, recordSize)
	b[0], b[8], b[12], b[16], b[20] = 1, 2, 3, 4, byte(FlagSpan|FlagTrace|FlagLabels)
	for i := range 24 {
		b[24+i] = byte(i + 1)
	}
	var r Record
	if err := r.decode(b); err != nil {
		t.Fatal(err)
	}
	if r.Time != 1 || r.Pid != 2 || r.Tid != 3 || r.CPU != 4 || !r.HasSpan() || !r.HasTrace() || r.SpanID[0] != 1 || r.TraceID[15] != 24 {
		t.Errorf("decoded %+v", r)
	}
	if err := r.decode(b[:47]); err == nil {
		t.Error("short record decoded")
	}
}
