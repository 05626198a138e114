package bpf

import "testing"

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
