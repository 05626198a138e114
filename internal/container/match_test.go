package container

import (
	"errors"
	"strings"
	"testing"
)

func TestMatchPath(t *testing.T) {
	pod := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice"
	ctr := pod + "/cri-containerd-" + idA + ".scope"
	paths := []string{ctr, "/process_api/d780cb5aadf2c0eac713d2def0c4e451" + ctr}
	for _, tc := range []struct {
		pattern string
		paths   []string
		want    bool
	}{
		{ctr, paths, true},
		{pod, paths, true}, // an ancestor: every container of the pod
		{"/kubepods.slice", paths, true},
		{"/", paths, true},
		{"/kubepods.slice/*/*pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice", paths, true},
		{"/kubepods.slice/*/*/cri-containerd-*.scope", paths, true},
		{"/kubepods.slice/*/*/crio-*.scope", paths, false},
		{"/kubepods.slice/kubepods-besteffort.slice", paths, false},
		{"/kubepods.slice/*", paths, true},
		{"/kubepods*", paths, true},
		{"/kube", paths, false},                   // a path prefix is no ancestor
		{"/kubepods.slice/*.scope", paths, false}, // "*" does not cross "/"
		{"/process_api/*/kubepods.slice", paths, true},
		{"/process_api/*", paths, true},
		{"/system.slice", paths, false},
		{"/kubepods.slice", nil, false},
		{"/[", paths, false}, // malformed: matches nothing
		{"/docker/" + idA, []string{"/docker/" + idA + "/docker/" + idB}, true},
		// Unanchored: a run of components at any depth.
		{"kubepods-burstable-pod*.slice", paths, true},
		{"kubepods-burstable.slice/kubepods-burstable-pod*.slice", paths, true},
		{"kubepods-besteffort-pod*.slice", paths, false},
		{"cri-containerd-*.scope", paths, true},
		{"kubepods", paths, false}, // a whole component, not a part of one
		{"burstable/pod*", []string{"/kubepods/burstable/pod4415fd05-2c0f-4533-909b-f2180dca8d7c/" + idA}, true},
		// A reader in a cgroup namespace of its own sees paths outside it
		// relative to its root: only unanchored patterns match them.
		{"kubepods-burstable-pod*.slice", []string{"/../../kubepods-burstable-pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice/cri-containerd-" + idA + ".scope"}, true},
		{"/kubepods.slice/*", []string{"/../../kubepods-burstable-pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice/cri-containerd-" + idA + ".scope"}, false},
		{"..", []string{"/../../x"}, false},
		{"[", paths, false},
	} {
		if got := MatchPath(tc.pattern, tc.paths); got != tc.want {
			t.Errorf("MatchPath(%q, %q) = %v, want %v", tc.pattern, tc.paths, got, tc.want)
		}
	}
}

func TestValidatePattern(t *testing.T) {
	for _, p := range []string{"/", "/kubepods.slice", "/kubepods.slice/*/*pod1234*", "/a/[bc]/d", "/docker/*", "kubepods.slice", "kubepods-*-pod*.slice", "burstable/pod*"} {
		if err := ValidatePattern(p); err != nil {
			t.Errorf("ValidatePattern(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"", "/kubepods.slice/", "//a", "/a/../b", "/a/./b", "/[", "/a\\", "..", "a/../b", "a//b", "[", "a/"} {
		if err := ValidatePattern(p); err == nil {
			t.Errorf("ValidatePattern(%q) = nil, want an error", p)
		}
	}
}

func TestMatchID(t *testing.T) {
	c := ParseCgroup([]byte("0::/ecs/cluster/5a0d5ceddf6c44c1928d367a815d890f/docker/" + idA + "/docker-" + idB + ".scope\n"))
	if c.ContainerID != idB {
		t.Fatalf("ContainerID = %q", c.ContainerID)
	}
	for _, tc := range []struct {
		want  string
		match bool
	}{
		{idB, true},
		{idA, true}, // the outer container, in IDs too
		{"5a0d5ceddf6c44c1928d367a815d890f", true},
		{strings.ToUpper(idB), true},
		{" " + idB + "\n", true},
		{"containerd://" + idB, true},
		{"cri-o://" + idB, true},
		{"docker://" + idB[:12], true},
		{idB[:12], true},  // as docker ps shows it
		{idB[:20], true},  // any longer prefix
		{idB[:11], false}, // too short
		{idB[:63], true},
		{idB + "0", false},
		{idB[1:], false}, // not a prefix
		{"", false},
		{"containerd://", false},
		{"5a0d5ceddf6c", true},
		{"0", false},
	} {
		if got := MatchID(tc.want, c); got != tc.match {
			t.Errorf("MatchID(%q) = %v, want %v", tc.want, got, tc.match)
		}
	}

	// A prefix that two ids share names neither.
	twin := ParseCgroup([]byte("0::/docker/" + idA + "\n1:cpu:/docker/" + idA[:32] + strings.Repeat("0", 32) + "\n"))
	if MatchID(idA[:12], twin) {
		t.Errorf("MatchID(%q) = true for a prefix of two ids", idA[:12])
	}
	if !MatchID(idA, twin) {
		t.Errorf("MatchID(%q) = false for a whole id", idA)
	}
	if MatchID(idA, Cgroup{}) {
		t.Errorf("MatchID matched an empty Cgroup")
	}
}

func TestValidateID(t *testing.T) {
	for _, id := range []string{idA, idA[:12], "containerd://" + idA, strings.ToUpper(idA),
		"8cd79a803caf4d2aa945152e934a5c00-1053176469", "15aa6e53-b09a-40c7-8558-c6c31e36c88a"} {
		if err := ValidateID(id); err != nil {
			t.Errorf("ValidateID(%q) = %v", id, err)
		}
	}
	for _, id := range []string{"", idA[:11], "my-container", idA + "x", "15aa6e53_b09a_40c7_8558_c6c31e36c88a", idA + "/" + idB} {
		if err := ValidateID(id); !errors.Is(err, ErrBadID) {
			t.Errorf("ValidateID(%q) = %v, want ErrBadID", id, err)
		}
	}
}

// TestIDKey: an id matches (MatchID) only the cgroups indexed under its key.
func TestIDKey(t *testing.T) {
	c := Cgroup{ContainerID: idA, IDs: []string{idA, "abc"}}
	for _, want := range []string{idA, idA[:12], idA[:20], "containerd://" + strings.ToUpper(idA), "abc"} {
		if !MatchID(want, c) {
			t.Fatalf("MatchID(%q) = false", want)
		}
		k := IDKey(want)
		if k != IDKey(idA) && k != IDKey("abc") {
			t.Errorf("IDKey(%q) = %q, the key of no id of %v", want, k, c.IDs)
		}
	}
	if IDKey(idA) != idA[:MinIDPrefix] || IDKey("abc") != "abc" {
		t.Errorf("IDKey(%q) = %q, IDKey(abc) = %q", idA, IDKey(idA), IDKey("abc"))
	}
}
