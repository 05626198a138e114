package analysis

import "testing"

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"main.run":              "main.run",
		"über::größe 函数 😀":      "über::größe 函数 😀",
		"a\nb":                  `a\nb`,
		"\x1b[2J\x1b]0;pwned\a": `\x1b[2J\x1b]0;pwned\a`,
		"tab\there\r":           `tab\there\r`,
		"del\x7f":               `del\x7f`,
		"csi\u009b31m":          `csi\u009b31m`,
		"bad\xff\xfeutf8":       `bad\xff\xfeutf8`,
		"nul\x00":               `nul\x00`,
		"\u00a0nbsp":            "\u00a0nbsp",
		`back\slash`:            `back\slash`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
