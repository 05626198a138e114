package analysis

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Printable returns s with what a terminal would act on escaped, Go-style:
// C0 controls (newline and tab too) as \n, \t, \x1b, DEL as \x7f, C1
// controls as \u009b, and bytes that are not UTF-8 as \xff. Everything
// else, all of Unicode's other characters, stays as it is, so that names
// in any script read as they are. Names in a trace file come from the
// profiled programs: printed raw, one could move the cursor, rewrite what
// is on the screen or start a line of its own. The escaping is for
// reading, not reversible: a backslash stays a backslash.
func Printable(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return printableFrom(s, i)
		}
	}
	return s
}

// printableFrom is Printable for s whose bytes before i need no escape.
func printableFrom(s string, i int) string {
	b := make([]byte, 0, len(s)+8)
	b = append(b, s[:i]...)
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = fmt.Appendf(b, `\x%02x`, s[i])
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			q := strconv.QuoteRune(r) // '\n', '\x1b', '\u009b'
			b = append(b, q[1:len(q)-1]...)
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return string(b)
}
