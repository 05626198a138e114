package container

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// Cgroup is what a process's cgroup paths say about it.
type Cgroup struct {
	// ContainerID is the id of the process's container, from its cgroup
	// paths by the rules of the package documentation; "" when no path
	// names one.
	ContainerID string
	// PodUID is the uid of the process's Kubernetes pod, a lowercase dashed
	// UUID (or, for a static pod, 32 hex digits); "" when no path names one.
	PodUID string
	// Paths are the process's cgroup paths, as the reader's cgroup namespace
	// sees them: the unified (v2) one first, then each v1 path not seen
	// before, in file order. None is empty; each begins with "/".
	Paths []string
	// IDs are the container-id-like tokens of all paths, without
	// duplicates: ContainerID first (when there is one), then the others in
	// path order. They are what a span's container.id is matched against
	// (see MatchID).
	IDs []string
}

// ReadCgroup reads /proc/PID/cgroup (at most 64 KiB of it) and parses it
// with ParseCgroup. The error wraps fs.ErrNotExist when the process is gone.
func ReadCgroup(pid int) (Cgroup, error) {
	if pid <= 0 {
		return Cgroup{}, fmt.Errorf("read cgroup: invalid pid %d", pid)
	}
	b, err := readProcFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return Cgroup{}, fmt.Errorf("read cgroup of pid %d: %w", pid, err)
	}
	if len(b) == maxProcFile {
		// Cut at the last complete line: a path cut short would name a
		// cgroup the process is not in.
		b = b[:bytes.LastIndexByte(b, '\n')+1]
	}
	return ParseCgroup(b), nil
}

// ParseCgroup parses the contents of a /proc/PID/cgroup file. Lines that
// are not "hierarchy-ID:controllers:/path" are skipped.
func ParseCgroup(data []byte) Cgroup {
	var c Cgroup
	var v1 []string
	haveV2 := false
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		hier, rest, ok := bytes.Cut(line, []byte{':'})
		if !ok || !isDecimal(hier) {
			continue
		}
		ctrl, p, ok := bytes.Cut(rest, []byte{':'})
		if !ok {
			continue
		}
		// The kernel marks the v2 path of a removed cgroup; the process is
		// in no other.
		p = bytes.TrimSuffix(p, []byte(" (deleted)"))
		if len(p) == 0 || p[0] != '/' {
			continue
		}
		if string(hier) == "0" && len(ctrl) == 0 && !haveV2 {
			haveV2 = true
			c.Paths = append(c.Paths, string(p))
			continue
		}
		v1 = append(v1, string(p))
	}
	for _, p := range v1 {
		if !slices.Contains(c.Paths, p) {
			c.Paths = append(c.Paths, p)
		}
	}

	// The container: the path whose id is 64 hex digits, else the first
	// path with a shorter one.
	best, bestRank := -1, 0
	var bestTok pathToken
	for i, p := range c.Paths {
		t, ok := containerInPath(p)
		if !ok {
			continue
		}
		rank := 2
		if t.kind == hex64 {
			rank = 1
		}
		if best < 0 || rank < bestRank {
			best, bestRank, bestTok = i, rank, t
		}
	}
	if best >= 0 {
		c.ContainerID = bestTok.text
		c.IDs = append(c.IDs, c.ContainerID)
		c.PodUID = podInPath(c.Paths[best], bestTok.comp)
	}
	if c.PodUID == "" {
		for _, p := range c.Paths {
			if c.PodUID = podInPath(p, -1); c.PodUID != "" {
				break
			}
		}
	}
	for _, p := range c.Paths {
		forComponents(p, func(_ int, comp string) {
			scanTokens(comp, func(t token) {
				if t.pod || t.sep == '_' {
					return
				}
				if id := comp[t.start:t.end]; !slices.Contains(c.IDs, id) {
					c.IDs = append(c.IDs, id)
				}
			})
		})
	}
	return c
}

// pathToken is a container id found in a path: its text, its shape and the
// index of the path component holding it.
type pathToken struct {
	text string
	kind tokenKind
	comp int
}

// containerInPath returns the container id of the deepest component of p
// that holds one.
func containerInPath(p string) (pathToken, bool) {
	var found pathToken
	ok := false
	forComponents(p, func(i int, comp string) {
		if t, isID := containerInComponent(comp); isID {
			found, ok = pathToken{text: comp[t.start:t.end], kind: t.kind, comp: i}, true
		}
	})
	return found, ok
}

// containerInComponent returns the container id a cgroup path component
// ends in: its last token, when that is 64 hex digits, a Fargate id or a
// dashed UUID, ends the component or is followed by ".scope" only, and
// follows the start of the component, a "-" or a ":"; and when the
// component is not a runtime's monitor ("crio-conmon-<id>.scope").
func containerInComponent(comp string) (token, bool) {
	var last token
	found := false
	scanTokens(comp, func(t token) { last, found = t, true })
	if !found || last.pod || last.kind == hex32 || last.sep == '_' {
		return token{}, false
	}
	if rest := comp[last.end:]; rest != "" && rest != ".scope" {
		return token{}, false
	}
	if last.start > 0 && comp[last.start-1] != '-' && comp[last.start-1] != ':' {
		return token{}, false
	}
	if strings.Contains(comp[:last.start], "conmon") {
		return token{}, false
	}
	return last, true
}

// podInPath returns the canonical uid of the deepest "pod<uid>" component
// of p at or above component index upTo (any, when upTo < 0), or "".
func podInPath(p string, upTo int) string {
	uid := ""
	forComponents(p, func(i int, comp string) {
		if upTo >= 0 && i > upTo {
			return
		}
		scanTokens(comp, func(t token) {
			if !t.pod || (t.kind != uuid && t.kind != hex32) {
				return
			}
			// "pod" starts the component or follows a "-":
			// kubepods-burstable-pod<uid_>.slice, pod<uid>.
			if at := t.start - len("pod"); at == 0 || comp[at-1] == '-' {
				uid = strings.ReplaceAll(comp[t.start:t.end], "_", "-")
			}
		})
	})
	return uid
}

// forComponents calls fn with each component of the absolute path p and its
// index, root first.
func forComponents(p string, fn func(i int, comp string)) {
	i := 0
	for rest := strings.TrimPrefix(p, "/"); rest != ""; i++ {
		var comp string
		comp, rest, _ = strings.Cut(rest, "/")
		fn(i, comp)
	}
}

// tokenKind is the shape of an id-like token in a cgroup path component.
type tokenKind uint8

const (
	hex64   tokenKind = iota + 1 // 64 hex digits: Docker, containerd, CRI-O and podman ids
	fargate                      // 32 hex digits, "-", 1 to 20 decimal digits: AWS Fargate ≥ 1.4
	uuid                         // 8-4-4-4-12 hex digits, dashed (or underscored in a systemd slice name)
	hex32                        // 32 hex digits: an ECS task id, or a static pod's uid
)

// token is an id-like token at comp[start:end].
type token struct {
	kind       tokenKind
	start, end int
	// sep is the separator of a UUID's groups, '-' or '_'.
	sep byte
	// pod is set when "pod" comes right before the token: a pod uid, not a
	// container id.
	pod bool
}

// scanTokens calls fn with each id-like token of comp, left to right. A
// token is a maximal run of hex digits (a UUID: runs joined by its
// separators) of one of the shapes of tokenKind, not touching other hex
// digits on either side. The "d" of a "pod" prefix is not taken for part of
// the run that follows it.
func scanTokens(comp string, fn func(token)) {
	for i := 0; i < len(comp); {
		if !isHex(comp[i]) {
			i++
			continue
		}
		j := i
		for j < len(comp) && isHex(comp[j]) {
			j++
		}
		s, pod := i, false
		if comp[i] == 'd' && i >= 2 && comp[i-2:i] == "po" {
			s, pod = i+1, true
		}
		t, ok := tokenAt(comp, s, j)
		if !ok {
			i = j
			continue
		}
		t.pod = pod
		fn(t)
		i = t.end
	}
}

// tokenAt matches a token at comp[s:], where comp[s:j] is a run of hex
// digits that comp[j] (if any) ends.
func tokenAt(comp string, s, j int) (token, bool) {
	switch j - s {
	case 64:
		return token{kind: hex64, start: s, end: j}, true
	case 32:
		// A Fargate id: "-" and a run of decimal digits, which no other
		// hex digit follows.
		if j < len(comp) && comp[j] == '-' {
			k := j + 1
			for k < len(comp) && isHex(comp[k]) {
				k++
			}
			if n := k - (j + 1); n >= 1 && n <= 20 && isDecimal([]byte(comp[j+1:k])) {
				return token{kind: fargate, start: s, end: k}, true
			}
		}
		return token{kind: hex32, start: s, end: j}, true
	case 8:
		if j == len(comp) || (comp[j] != '-' && comp[j] != '_') {
			return token{}, false
		}
		sep := comp[j]
		k := j
		for _, n := range [...]int{4, 4, 4, 12} {
			if k >= len(comp) || comp[k] != sep {
				return token{}, false
			}
			k++
			for e := k + n; k < e; k++ {
				if k >= len(comp) || !isHex(comp[k]) {
					return token{}, false
				}
			}
		}
		if k < len(comp) && isHex(comp[k]) {
			return token{}, false
		}
		return token{kind: uuid, start: s, end: k, sep: sep}, true
	}
	return token{}, false
}

// isHex reports whether b is a lowercase hex digit, the only case runtimes
// write ids in.
func isHex(b byte) bool { return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' }

// isDecimal reports whether b is a non-empty run of decimal digits.
func isDecimal(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}
