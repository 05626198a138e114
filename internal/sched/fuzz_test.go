package sched

import "testing"

// FuzzTracker feeds arbitrary record sequences to a tracker through the
// checker: it must never panic, and the accounting and group invariants hold
// after every record. The first byte picks the interval; then every 3 bytes
// are one call: the operation and tid (4 tids, so they interleave and are
// reused after Exit), and a signed 16-bit step of the shared clock, so that
// timestamps also go backwards.
func FuzzTracker(f *testing.F) {
	f.Add([]byte{10, 2, 0, 0, 0, 3, 0, 2, 2, 0, 3, 7, 0, 0, 1, 0, 2, 5, 0, 4, 0, 0})
	f.Add([]byte{1, 1, 1, 0, 9, 0xff, 0xff, 2, 0x80, 0, 5, 0, 0, 0, 7, 0})
	f.Add([]byte{200, 0, 0x10, 0x27, 8, 0x10, 0x27, 1, 0xf0, 0xff, 10, 0, 1, 3, 0, 0x40})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		c := newChecker(t, 1+uint64(data[0]))
		ts := uint64(1 << 20)
		for data = data[1:]; len(data) >= 3; data = data[3:] {
			tid := uint32(data[0]>>3) & 3
			step := int64(int16(uint16(data[1]) | uint16(data[2])<<8))
			if step < 0 && uint64(-step) > ts {
				ts = 0
			} else {
				ts = uint64(int64(ts) + step)
			}
			switch data[0] % 8 {
			case 0:
				c.switchOut(tid, ts, false)
			case 1:
				c.switchOut(tid, ts, true)
			case 2, 6:
				c.run(tid, ts, false)
			case 3, 7:
				c.run(tid, ts, true)
			case 4:
				c.take(tid)
			case 5:
				c.exit(tid)
			}
		}
	})
}
