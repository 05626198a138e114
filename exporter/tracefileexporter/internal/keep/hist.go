package keep

import (
	"math"
	"math/bits"
)

// A running quantile of span durations: a histogram of log-spaced buckets
// (histSub to a doubling, so a quantile is known within 9%), whose counts
// are halved whenever histWindow more spans came, so that it follows the
// last few thousand spans of a name rather than every span since start.
const (
	histSub    = 8
	histMaxLog = 42 // 2^42 ns: 73 min, the longest duration told apart
	histLen    = histMaxLog * histSub
	histWindow = 2048
	// histMinCount spans must be seen before a quantile is trusted: the
	// first spans of a name are kept by min_duration alone.
	histMinCount = 100
)

type hist struct {
	counts [histLen]uint32
	total  uint32
	// The last quantile asked, reused for histRecompute observations: a
	// walk of the buckets for every span would cost a quarter of the
	// exporter's time per span.
	q    float64
	qv   int64
	qok  bool
	qAge int
}

const histRecompute = 64

// bucket returns the index of d (ns): floor(log2(d) * histSub).
func bucket(d int64) int {
	if d <= 1 {
		return 0
	}
	lg := bits.Len64(uint64(d)) - 1
	if lg >= histMaxLog {
		return histLen - 1
	}
	// The fraction within the doubling, from the bits below the top one.
	frac := math.Log2(float64(d) / float64(uint64(1)<<lg))
	return min(lg*histSub+int(frac*histSub), histLen-1)
}

// upper is the least duration above bucket i.
func upper(i int) int64 {
	return int64(math.Ceil(math.Exp2(float64(i+1) / histSub)))
}

func (h *hist) observe(d int64) {
	h.counts[bucket(d)]++
	h.total++
	h.qAge++
	if h.total >= 2*histWindow {
		h.total = 0
		for i := range h.counts {
			h.counts[i] /= 2
			h.total += h.counts[i]
		}
	}
}

// quantile returns the upper bound of the bucket that holds quantile q (0
// to 1) of the durations seen, and false before histMinCount of them.
func (h *hist) quantile(q float64) (int64, bool) {
	if h.qok && h.q == q && h.qAge < histRecompute {
		return h.qv, true
	}
	if h.total < histMinCount {
		return 0, false
	}
	h.q, h.qok, h.qAge = q, true, 0
	h.qv = h.walk(q)
	return h.qv, true
}

func (h *hist) walk(q float64) int64 {
	target := uint32(math.Ceil(q * float64(h.total)))
	var sum uint32
	for i, c := range h.counts {
		sum += c
		if sum >= target {
			return upper(i)
		}
	}
	return upper(histLen - 1)
}
