package convention

import (
	"math"
	"strconv"
)

// Int reads an integer attribute value: an int, a double that holds an
// integer, or a string of decimal digits, as SDKs type thread ids
// differently (JavaScript has only doubles; some SDKs stringify). raw is
// the value's AsRaw form, so that this package needs no pdata.
func Int(raw any) (int64, bool) {
	switch v := raw.(type) {
	case int64:
		return v, true
	case float64:
		if v == math.Trunc(v) && v >= math.MinInt64 && v < math.MaxInt64 {
			return int64(v), true
		}
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}
