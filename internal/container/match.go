package container

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// MinIDPrefix is the shortest container id prefix MatchID accepts: the 12
// hex digits `docker ps` and `crictl ps` show.
const MinIDPrefix = 12

// ValidatePattern reports what is wrong with a cgroup path pattern for
// MatchPath: it must have no empty, "." or ".." component and no trailing
// "/" (other than the pattern "/"), and be valid path.Match syntax.
func ValidatePattern(pattern string) error {
	if pattern == "" {
		return errors.New("cgroup pattern: empty")
	}
	if pattern != "/" {
		for _, comp := range strings.Split(strings.TrimPrefix(pattern, "/"), "/") {
			if comp == "" || comp == "." || comp == ".." {
				return fmt.Errorf("cgroup pattern %q: empty, \".\" or \"..\" component", pattern)
			}
		}
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return fmt.Errorf("cgroup pattern %q: %w", pattern, err)
	}
	return nil
}

// MatchPath reports whether pattern (path.Match syntax, where "*" does not
// cross a "/") matches one of paths or one of their ancestors, so that a
// pattern naming a pod's cgroup selects every container of the pod, and
// "/kubepods.slice" every pod.
//
// A pattern that begins with "/" is anchored: it matches the whole path
// from the root of the reader's cgroup namespace. One that does not
// matches a run of components at any depth: "kubepods-burstable-pod*.slice"
// matches the path of every container of a Burstable pod. Only such
// patterns match the paths of a reader in a cgroup namespace of its own (a
// container's, on cgroup v2) when they lie outside it: the kernel shows them
// relative to the reader's root, "/../../kubepods-….slice/…", and the ".."
// components are not matched. A malformed pattern matches nothing: check
// it with ValidatePattern first.
func MatchPath(pattern string, paths []string) bool {
	if !strings.HasPrefix(pattern, "/") {
		for _, p := range paths {
			if matchRun(pattern, p) {
				return true
			}
		}
		return false
	}
	for _, p := range paths {
		for {
			if ok, err := path.Match(pattern, p); err != nil {
				return false
			} else if ok {
				return true
			}
			if p == "/" || p == "" {
				break
			}
			i := strings.LastIndexByte(p, '/')
			if i <= 0 {
				p = "/"
			} else {
				p = p[:i]
			}
		}
	}
	return false
}

// matchRun reports whether the unanchored pattern matches a run of
// consecutive components of p, leading ".." components left out.
func matchRun(pattern, p string) bool {
	comps := strings.Split(strings.Trim(p, "/"), "/")
	for len(comps) > 0 && comps[0] == ".." {
		comps = comps[1:]
	}
	for i := range comps {
		for j := i + 1; j <= len(comps); j++ {
			if ok, err := path.Match(pattern, strings.Join(comps[i:j], "/")); err != nil {
				return false
			} else if ok {
				return true
			}
		}
	}
	return false
}

// ErrBadID is wrapped by ValidateID's errors.
var ErrBadID = errors.New("not a container id")

// ValidateID reports whether want can match anything in MatchID: after
// MatchID's normalization it must be one of the id shapes of the package
// documentation, or at least MinIDPrefix hex digits.
func ValidateID(want string) error {
	w := normalizeID(want)
	var t token
	n := 0
	scanTokens(w, func(x token) { t = x; n++ })
	if n == 1 && t.start == 0 && t.end == len(w) && !t.pod && t.sep != '_' {
		return nil
	}
	if len(w) >= MinIDPrefix && isHexString(w) {
		return nil
	}
	return fmt.Errorf("container id %q: %w (want 64 hex digits, a prefix of at least %d, or \"<32 hex>-<digits>\")", want, ErrBadID, MinIDPrefix)
}

// MatchID reports whether want, a container id from a span's resource or
// from configuration, names the container c describes. want is first
// trimmed of spaces, of a "<runtime>://" prefix (Kubernetes writes
// "containerd://<id>", "cri-o://<id>", "docker://<id>") and lowercased. It
// then matches when it equals one of c.IDs, or when it is at least
// MinIDPrefix hex digits that begin exactly one of c.IDs (a short id as
// `docker ps` shows it).
func MatchID(want string, c Cgroup) bool {
	w := normalizeID(want)
	if w == "" {
		return false
	}
	prefixed := 0
	for _, id := range c.IDs {
		if id == w {
			return true
		}
		if strings.HasPrefix(id, w) {
			prefixed++
		}
	}
	return prefixed == 1 && len(w) >= MinIDPrefix && isHexString(w)
}

// IDKey returns the key under which an index finds the cgroups whose
// IDs want may match (MatchID): its first MinIDPrefix characters after
// MatchID's normalization, or "" when it is shorter (it then matches only
// an id equal to it, whose key is itself).
func IDKey(want string) string {
	w := normalizeID(want)
	if len(w) > MinIDPrefix {
		return w[:MinIDPrefix]
	}
	return w
}

// normalizeID trims spaces and a "<runtime>://" prefix from a container id
// and lowercases it.
func normalizeID(id string) string {
	id = strings.TrimSpace(id)
	if i := strings.Index(id, "://"); i >= 0 {
		id = id[i+len("://"):]
	}
	return strings.ToLower(id)
}

func isHexString(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return s != ""
}
