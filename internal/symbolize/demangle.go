package symbolize

import (
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// demangleName returns the human-readable form of a C++ (_Z…) or Rust
// (legacy _ZN…17h<hash>E, v0 _R…) mangled name, or name itself when it is
// not mangled or does not demangle.
//
// The form follows addr2line -C and perf (DMGL_PARAMS | DMGL_ANSI):
// parameters and the return types of template functions are kept, and Rust
// legacy names lose their ::h<hash> suffix.
func demangleName(name string) string {
	if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		return name
	}
	if strings.HasPrefix(name, "_R") || isRustLegacy(name) {
		s, err := demangle.ToString(name)
		if err != nil {
			return name
		}
		return stripRustHash(s)
	}
	return demangle.Filter(name)
}

// isRustLegacy reports whether name looks like a legacy Rust mangled name:
// _ZN, then path components, then 17h and 16 hex digits, then E, then an
// optional .suffix (the test demangle.ToString applies).
func isRustLegacy(name string) bool {
	if !strings.HasPrefix(name, "_ZN") {
		return false
	}
	if i := strings.LastIndex(name, "E."); i > 0 {
		name = name[:i+1]
	}
	return len(name) > 23 && strings.HasSuffix(name, "E") && name[len(name)-20:len(name)-17] == "17h"
}

// stripRustHash drops a trailing ::h followed by 16 hex digits.
func stripRustHash(s string) string {
	const n = len("::h") + 16
	if len(s) <= n || s[len(s)-n:len(s)-16] != "::h" {
		return s
	}
	for _, c := range s[len(s)-16:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return s
		}
	}
	return s[:len(s)-n]
}
