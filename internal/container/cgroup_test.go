package container

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Ids used where a source's line is shortened or made up; the real-world
// lines keep their own.
const (
	idA = "713a77a26fe2a38ebebd5709604a048c3d380db1eb16aa43aca0b2499e54733c"
	idB = "05c48c82caff3be3d7f1e896981dd410e81487538936914f32b624d168de9db0"
)

// otelGoSDK is the OpenTelemetry Go SDK's container detector expression
// (go.opentelemetry.io/otel/sdk/resource, container.go), applied to each
// line of /proc/self/cgroup, first match wins. The tests check that MatchID
// accepts what it reports for each shape.
var otelGoSDK = regexp.MustCompile(`^.*/(?:.*[-:])?([0-9a-f]+)(?:\.|\s*$)`)

func sdkContainerID(cgroup string) string {
	for _, line := range strings.Split(cgroup, "\n") {
		if m := otelGoSDK.FindStringSubmatch(line); m != nil {
			return m[1]
		}
	}
	return ""
}

var parseCases = []struct {
	name, in    string
	id, pod     string
	paths       []string // nil: not checked
	ids         []string // nil: not checked
	sdkMismatch bool     // the Go SDK reports something MatchID does not accept
}{
	// Docker, cgroupfs driver (cgroup v1). DataDog/libdatadog
	// ddcommon/src/entity_id/mod.rs, "Docker".
	{
		name: "docker cgroupfs v1",
		in:   "13:name=systemd:/docker/3726184226f5d3147c25fdeab5b60097e378e8a720503a5e19ecfdf29f869860\n",
		id:   "3726184226f5d3147c25fdeab5b60097e378e8a720503a5e19ecfdf29f869860",
	},
	// Docker, systemd driver (cgroup v1, CentOS). neuvector/neuvector
	// share/system/cgroup_test.go, TestDockerIDCentOS.
	{
		name: "docker systemd v1",
		in: "10:devices:/system.slice/docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope\n" +
			"2:cpuacct,cpu:/system.slice/docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope\n" +
			"1:name=systemd:/system.slice/docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope\n",
		id:    "9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d",
		paths: []string{"/system.slice/docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope"},
	},
	// Docker, systemd driver, cgroup v2 (the host's view; the container
	// itself reads "0::/" in its own cgroup namespace).
	{
		name:  "docker systemd v2",
		in:    "0::/system.slice/docker-" + idA + ".scope\n",
		id:    idA,
		paths: []string{"/system.slice/docker-" + idA + ".scope"},
		ids:   []string{idA},
	},
	// Kubernetes, cgroupfs driver. DataDog/libdatadog entity_id/mod.rs,
	// "Kubernetes"; datadog-go statsd's TestParseContainerID (burstable).
	{
		name: "kubernetes cgroupfs besteffort",
		in:   "11:perf_event:/kubepods/besteffort/pod3d274242-8ee0-11e9-a8a6-1e68d864ef1a/3e74d3fd9db4c9dd921ae05c2502fb984d0cde1b36e581b13f79c639da4518a1\n",
		id:   "3e74d3fd9db4c9dd921ae05c2502fb984d0cde1b36e581b13f79c639da4518a1",
		pod:  "3d274242-8ee0-11e9-a8a6-1e68d864ef1a",
		ids:  []string{"3e74d3fd9db4c9dd921ae05c2502fb984d0cde1b36e581b13f79c639da4518a1"},
	},
	{
		name: "kubernetes cgroupfs burstable",
		in: "other_line\n" +
			"10:hugetlb:/kubepods/burstable/podfd52ef25-a87d-11e9-9423-0800271a638e/8c046cb0b72cd4c99f51b5591cd5b095967f58ee003710a45280c28ee1a9c7fa\n" +
			"9:cpuset:/kubepods/burstable/podfd52ef25-a87d-11e9-9423-0800271a638e/8c046cb0b72cd4c99f51b5591cd5b095967f58ee003710a45280c28ee1a9c7fa\n",
		id:  "8c046cb0b72cd4c99f51b5591cd5b095967f58ee003710a45280c28ee1a9c7fa",
		pod: "fd52ef25-a87d-11e9-9423-0800271a638e",
	},
	// Kubernetes, cgroupfs driver, guaranteed QoS: the pod directly under
	// kubepods (CJLove/rt-operator notes/cgroupv1_notes.md, K3S).
	{
		name: "kubernetes cgroupfs guaranteed",
		in:   "0::/kubepods/pod3d274242-8ee0-11e9-a8a6-1e68d864ef1a/" + idA + "\n",
		id:   idA,
		pod:  "3d274242-8ee0-11e9-a8a6-1e68d864ef1a",
	},
	// Kubernetes, systemd driver, containerd. open-telemetry/
	// opentelemetry-java-instrumentation CgroupV1ContainerIdExtractorTest,
	// "with two dashes in prefix".
	{
		name: "kubernetes systemd containerd v1",
		in:   "11:perf_event:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice/cri-containerd-713a77a26fe2a38ebebd5709604a048c3d380db1eb16aa43aca0b2499e54733c.scope\n",
		id:   "713a77a26fe2a38ebebd5709604a048c3d380db1eb16aa43aca0b2499e54733c",
		pod:  "4415fd05-2c0f-4533-909b-f2180dca8d7c",
		ids:  []string{"713a77a26fe2a38ebebd5709604a048c3d380db1eb16aa43aca0b2499e54733c"},
	},
	// The same on cgroup v2, with the v1 name=systemd line a hybrid host
	// keeps: both name the container.
	{
		name: "kubernetes systemd containerd hybrid",
		in: "1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice/cri-containerd-" + idA + ".scope\n" +
			"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice/cri-containerd-" + idA + ".scope\n",
		id:    idA,
		pod:   "4415fd05-2c0f-4533-909b-f2180dca8d7c",
		paths: []string{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice/cri-containerd-" + idA + ".scope"},
	},
	// containerd ≥ 1.5, systemd driver, cgroup v1: the runc
	// "slice:prefix:name" form left literally in the path. opentelemetry-
	// java-instrumentation CgroupV1ContainerIdExtractorTest, "with colon"
	// (Kubernetes 1.24.0, cri-containerd 1.6.8).
	{
		name: "containerd colon form",
		in:   "11:devices:/system.slice/containerd.service/kubepods-pod87a18a64_b74a_454a_b10b_a4a36059d0a3.slice:cri-containerd:05c48c82caff3be3d7f1e896981dd410e81487538936914f32b624d168de9db0\n",
		id:   "05c48c82caff3be3d7f1e896981dd410e81487538936914f32b624d168de9db0",
		pod:  "87a18a64-b74a-454a-b10b-a4a36059d0a3",
	},
	// Kubernetes, systemd driver, dockershim. DataDog/libdatadog
	// entity_id/mod.rs, "Possibly with extra characters before id".
	{
		name: "kubernetes systemd docker",
		in:   "1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2d3da189_6407_48e3_9ab6_78188d75e609.slice/docker-7b8952daecf4c0e44bbcefe1b5c5ebc7b4839d4eefeccefe694709d3809b6199.scope\n",
		id:   "7b8952daecf4c0e44bbcefe1b5c5ebc7b4839d4eefeccefe694709d3809b6199",
		pod:  "2d3da189-6407-48e3-9ab6-78188d75e609",
	},
	// CRI-O, systemd driver, guaranteed QoS (CJLove/rt-operator
	// notes/cgroupv1_notes.md, Kubernetes 1.25.0 with cri-o). Its
	// crio-conmon-<id> cgroup beside the container holds conmon, the
	// monitor (cri-o internal/oci: "/crio-conmon-"+id under the pod's
	// cgroup), and is no container.
	{
		name: "crio",
		in:   "0::/kubepods.slice/kubepods-pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice/crio-" + idA + ".scope\n",
		id:   idA,
		pod:  "4415fd05-2c0f-4533-909b-f2180dca8d7c",
	},
	{
		name: "crio conmon",
		in:   "0::/kubepods.slice/kubepods-pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice/crio-conmon-" + idA + ".scope\n",
		id:   "",
		pod:  "4415fd05-2c0f-4533-909b-f2180dca8d7c",
		// The Go SDK reports the id; IDs holds it, so MatchID accepts it.
		ids: []string{idA},
	},
	// CRI-O on cgroup v2 moves the container's processes into a "container"
	// cgroup below its scope; the OpenTelemetry eBPF profiler's expression
	// allows for it ((?:/[a-z]+)?$, process/process.go).
	{
		name: "crio v2 container subgroup",
		in:   "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice/crio-" + idA + ".scope/container\n",
		id:   idA,
		pod:  "4415fd05-2c0f-4533-909b-f2180dca8d7c",
	},
	// podman, rootful and rootless, cgroup v2, with crun's "container"
	// cgroup below the scope (cases from a podman runtime detector's
	// tests, found by search; the shape is podman's, /machine.slice for
	// root and the user's user@UID.service otherwise).
	{
		name: "podman rootful",
		in:   "0::/machine.slice/libpod-06dc5f321aad8726aa26559f16ec203bc099245bc44894b14a89fc02b022d1d5.scope/container\n",
		id:   "06dc5f321aad8726aa26559f16ec203bc099245bc44894b14a89fc02b022d1d5",
	},
	{
		name: "podman rootless",
		in:   "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-3f05ee050f82c0145f1d88c94269c39dff0f07dbf8bba20aafd54b3a75dcaecc.scope/container\n",
		id:   "3f05ee050f82c0145f1d88c94269c39dff0f07dbf8bba20aafd54b3a75dcaecc",
	},
	{
		name: "podman no subgroup",
		in:   "0::/machine.slice/libpod-" + idA + ".scope\n",
		id:   idA,
	},
	// podman's conmon, cgroup v1 (a podman-in-Kubernetes write-up's cat of
	// /proc/PID/cgroup for conmon): the monitor, not the container.
	{
		name: "podman conmon",
		in: "6:devices:/machine.slice\n" +
			"5:memory:/machine.slice/libpod-conmon-24fce7291bc6d7f8a5965a5920740b0df25dda9bb4e84ffb889d8ea2927acec5.scope\n" +
			"0::/machine.slice/libpod-conmon-24fce7291bc6d7f8a5965a5920740b0df25dda9bb4e84ffb889d8ea2927acec5.scope\n",
		id: "",
		paths: []string{
			"/machine.slice/libpod-conmon-24fce7291bc6d7f8a5965a5920740b0df25dda9bb4e84ffb889d8ea2927acec5.scope",
			"/machine.slice",
		},
		ids: []string{"24fce7291bc6d7f8a5965a5920740b0df25dda9bb4e84ffb889d8ea2927acec5"},
	},
	// kind on podman: a Kubernetes node in a podman container; the
	// process is in the inner container (the outer part of the path is
	// from a cgroup parser's tests found by search; the inner part is the
	// kubelet's systemd layout with kind's "kubelet-" prefix).
	{
		name: "kind on podman",
		in:   "0::/machine.slice/libpod-cbdfa0f1f08763b1963c30d98e11e1f052cb67f1e9b7c0ab8a6ca6c70cbcad69.scope/container/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod6eab3b7b_f0a6_4bb5_a5c1_fa32b6d2e7a3.slice/cri-containerd-" + idB + ".scope\n",
		id:   idB,
		pod:  "6eab3b7b-f0a6-4bb5-a5c1-fa32b6d2e7a3",
		ids:  []string{idB, "cbdfa0f1f08763b1963c30d98e11e1f052cb67f1e9b7c0ab8a6ca6c70cbcad69"},
	},
	// Docker in Docker: the inner container.
	{
		name: "docker in docker",
		in:   "0::/docker/" + idA + "/docker/" + idB + "\n",
		id:   idB,
		ids:  []string{idB, idA},
	},
	// systemd inside a container makes cgroups below the container's.
	{
		name: "systemd in a container",
		in:   "0::/system.slice/docker-" + idA + ".scope/init.scope\n",
		id:   idA,
	},
	// Amazon ECS on EC2, Fargate ≤ 1.3, Fargate ≥ 1.4. DataDog/libdatadog
	// entity_id/mod.rs, "ECS", "Fargate 1.3-", "Fargate 1.4+".
	{
		name: "ecs",
		in:   "9:perf_event:/ecs/haissam-ecs-classic/5a0d5ceddf6c44c1928d367a815d890f/38fac3e99302b3622be089dd41e7ccf38aff368a86cc339972075136ee2710ce\n",
		id:   "38fac3e99302b3622be089dd41e7ccf38aff368a86cc339972075136ee2710ce",
		ids:  []string{"38fac3e99302b3622be089dd41e7ccf38aff368a86cc339972075136ee2710ce", "5a0d5ceddf6c44c1928d367a815d890f"},
	},
	{
		name: "fargate 1.3",
		in:   "11:hugetlb:/ecs/55091c13-b8cf-4801-b527-f4601742204d/432624d2150b349fe35ba397284dea788c2bf66b885d14dfc1569b01890ca7da\n",
		id:   "432624d2150b349fe35ba397284dea788c2bf66b885d14dfc1569b01890ca7da",
		ids:  []string{"432624d2150b349fe35ba397284dea788c2bf66b885d14dfc1569b01890ca7da", "55091c13-b8cf-4801-b527-f4601742204d"},
	},
	{
		name: "fargate 1.4",
		in:   "1:name=systemd:/ecs/8cd79a803caf4d2aa945152e934a5c00/8cd79a803caf4d2aa945152e934a5c00-1053176469\n",
		id:   "8cd79a803caf4d2aa945152e934a5c00-1053176469",
		ids:  []string{"8cd79a803caf4d2aa945152e934a5c00-1053176469", "8cd79a803caf4d2aa945152e934a5c00"},
		// The Go SDK reports the trailing digits "1053176469".
		sdkMismatch: true,
	},
	// A container named by a UUID. DataDog/libdatadog entity_id/mod.rs,
	// "Or a UUID".
	{
		name: "uuid container",
		in:   "1:name=systemd:/kubepods/besteffort/pode9b90526-f47d-11e8-b2a5-080027b9f4fb/15aa6e53-b09a-40c7-8558-c6c31e36c88a\n",
		id:   "15aa6e53-b09a-40c7-8558-c6c31e36c88a",
		pod:  "e9b90526-f47d-11e8-b2a5-080027b9f4fb",
		ids:  []string{"15aa6e53-b09a-40c7-8558-c6c31e36c88a"},
		// The Go SDK reports the last group, "c6c31e36c88a".
		sdkMismatch: true,
	},
	// A 64-hex id beats a shorter token, wherever it is.
	{
		name: "64 hex beats fargate",
		in: "1:name=systemd:/ecs/8cd79a803caf4d2aa945152e934a5c00/8cd79a803caf4d2aa945152e934a5c00-1053176469\n" +
			"0::/weird/8cd79a803caf4d2aa945152e934a5c00-1053176469\n" +
			"2:cpu:/docker/" + idA + "\n",
		id:          idA,
		sdkMismatch: true,
	},
	// A static pod's uid is 32 hex digits, the md5 of its manifest
	// (kubernetes pkg/kubelet/config/common.go, applyDefaults).
	{
		name: "static pod",
		in:   "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0d5c1b9f5bb7e3a2b0a74a2e7d1f1f6c.slice/cri-containerd-" + idA + ".scope\n",
		id:   idA,
		pod:  "0d5c1b9f5bb7e3a2b0a74a2e7d1f1f6c",
		ids:  []string{idA},
	},
	// A process in a pod's cgroup but in no container's.
	{
		name: "pod without container",
		in:   "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice\n",
		id:   "",
		pod:  "4415fd05-2c0f-4533-909b-f2180dca8d7c",
		ids:  []string{},
	},
	// Hybrid host: the v2 path names no container (systemd left the
	// process in containerd's unit), the v1 ones do.
	{
		name: "hybrid v2 without id",
		in: "4:memory:/kubepods/besteffort/pod3d274242-8ee0-11e9-a8a6-1e68d864ef1a/" + idA + "\n" +
			"0::/system.slice/containerd.service\n",
		id:    idA,
		pod:   "3d274242-8ee0-11e9-a8a6-1e68d864ef1a",
		paths: []string{"/system.slice/containerd.service", "/kubepods/besteffort/pod3d274242-8ee0-11e9-a8a6-1e68d864ef1a/" + idA},
	},
	// Host processes. opentelemetry-java-instrumentation issue #7437
	// (hostStyleCgroupFile): a session scope is no container, though the
	// Go SDK reads "4" in it.
	{
		name:        "host session",
		in:          "1:name=systemd:/user.slice/user-1000.slice/session-4.scope\n0::/user.slice/user-1000.slice/session-4.scope\n",
		id:          "",
		ids:         []string{},
		sdkMismatch: true,
	},
	{
		name:  "host root",
		in:    "0::/\n",
		paths: []string{"/"},
		ids:   []string{},
	},
	{
		name:  "host init",
		in:    "0::/init.scope\n",
		paths: []string{"/init.scope"},
		ids:   []string{},
	},
	// This test sandbox: v1 memory in /process_api/<32 hex>, the rest at
	// the roots. No container; the Go SDK reports the 32 hex digits of the
	// memory line, and IDs holds them.
	{
		name: "sandbox",
		in: "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/d780cb5aadf2c0eac713d2def0c4e451\n" +
			"3:cpuset:/\n0::/\n",
		id:    "",
		paths: []string{"/", "/process_api/d780cb5aadf2c0eac713d2def0c4e451"},
		ids:   []string{"d780cb5aadf2c0eac713d2def0c4e451"},
	},
	// A removed cgroup's v2 path.
	{
		name:  "deleted",
		in:    "0::/system.slice/docker-" + idA + ".scope (deleted)\n",
		id:    idA,
		paths: []string{"/system.slice/docker-" + idA + ".scope"},
	},
	// Lines that are not cgroup lines.
	{
		name:        "malformed",
		in:          "garbage\nx:cpu:/docker/" + idB + "\n3:cpu\n3:cpu:relative/" + idB + "\n:cpu:/docker/" + idB + "\n\n0::/ok",
		id:          "",
		paths:       []string{"/ok"},
		ids:         []string{},
		sdkMismatch: true,
	},
	// A reader in a cgroup namespace of its own (a container's, as
	// containerd and CRI-O make them on cgroup v2) sees the cgroups of
	// processes outside it relative to its root.
	{
		name:  "another pod, seen from a cgroup namespace",
		in:    "0::/../../kubepods-burstable-pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice/cri-containerd-" + idA + ".scope\n",
		id:    idA,
		pod:   "4415fd05-2c0f-4533-909b-f2180dca8d7c",
		paths: []string{"/../../kubepods-burstable-pod4415fd05_2c0f_4533_909b_f2180dca8d7c.slice/cri-containerd-" + idA + ".scope"},
		ids:   []string{idA},
	},
	// Ids touching other hex digits are no ids.
	{
		name:        "not an id",
		in:          "0::/docker/a" + idA + "\n1:cpu:/x/" + idA[:63] + "\n",
		id:          "",
		ids:         []string{},
		sdkMismatch: true,
	},
}

func TestParseCgroup(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			c := ParseCgroup([]byte(tc.in))
			if c.ContainerID != tc.id {
				t.Errorf("ContainerID = %q, want %q", c.ContainerID, tc.id)
			}
			if c.PodUID != tc.pod {
				t.Errorf("PodUID = %q, want %q", c.PodUID, tc.pod)
			}
			if tc.paths != nil && !slices.Equal(c.Paths, tc.paths) {
				t.Errorf("Paths = %q, want %q", c.Paths, tc.paths)
			}
			if tc.ids != nil && !slices.Equal(c.IDs, tc.ids) && !(len(c.IDs) == 0 && len(tc.ids) == 0) {
				t.Errorf("IDs = %q, want %q", c.IDs, tc.ids)
			}
			checkInvariants(t, tc.in, c)
			if tc.id != "" && !MatchID(tc.id, c) {
				t.Errorf("MatchID(%q) = false", tc.id)
			}
			sdk := sdkContainerID(tc.in)
			if got := MatchID(sdk, c); got == tc.sdkMismatch && sdk != "" {
				t.Errorf("the Go SDK reports %q; MatchID = %v, want %v", sdk, got, !tc.sdkMismatch)
			}
		})
	}
}

// checkInvariants checks what holds of any ParseCgroup result.
func checkInvariants(t *testing.T, in string, c Cgroup) {
	t.Helper()
	if c.ContainerID != "" && (len(c.IDs) == 0 || c.IDs[0] != c.ContainerID) {
		t.Errorf("ContainerID %q is not IDs[0] in %q", c.ContainerID, c.IDs)
	}
	seen := map[string]bool{}
	for _, id := range c.IDs {
		if seen[id] {
			t.Errorf("IDs repeat %q", id)
		}
		seen[id] = true
		if ValidateID(id) != nil {
			t.Errorf("IDs holds %q, which ValidateID refuses", id)
		}
		if !strings.Contains(in, id) {
			t.Errorf("IDs holds %q, not in the input", id)
		}
		if !MatchID(id, c) || !MatchID(strings.ToUpper(id), c) || !MatchID("containerd://"+id, c) {
			t.Errorf("MatchID refuses %q of IDs", id)
		}
	}
	seen = map[string]bool{}
	for _, p := range c.Paths {
		if p == "" || p[0] != '/' {
			t.Errorf("path %q is not absolute", p)
		}
		if seen[p] {
			t.Errorf("Paths repeat %q", p)
		}
		seen[p] = true
	}
	if c.ContainerID != "" {
		in := false
		for _, p := range c.Paths {
			in = in || strings.Contains(p, c.ContainerID)
		}
		if !in {
			t.Errorf("ContainerID %q is in no path", c.ContainerID)
		}
	}
	if c.PodUID != "" {
		var tok token
		n := 0
		scanTokens(c.PodUID, func(x token) { tok = x; n++ })
		if n != 1 || tok.start != 0 || tok.end != len(c.PodUID) || (tok.kind != uuid && tok.kind != hex32) || tok.sep == '_' {
			t.Errorf("PodUID %q is not a dashed UUID or 32 hex digits", c.PodUID)
		}
		if !strings.Contains(in, c.PodUID) && !strings.Contains(in, strings.ReplaceAll(c.PodUID, "-", "_")) {
			t.Errorf("PodUID %q is not in the input", c.PodUID)
		}
	}
}

// FuzzParseCgroup checks that ParseCgroup never panics and that its
// results keep their invariants, on any input.
func FuzzParseCgroup(f *testing.F) {
	for _, tc := range parseCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c := ParseCgroup(b)
		checkInvariants(t, string(b), c)
		if c2 := ParseCgroup(b); c2.ContainerID != c.ContainerID || c2.PodUID != c.PodUID || !slices.Equal(c2.Paths, c.Paths) || !slices.Equal(c2.IDs, c.IDs) {
			t.Errorf("ParseCgroup is not deterministic")
		}
		for _, p := range c.Paths {
			pattern := quoteMeta(p)
			if ValidatePattern(pattern) == nil && !MatchPath(pattern, c.Paths) {
				t.Errorf("path %q does not match itself", p)
			}
		}
	})
}

// quoteMeta escapes the characters path.Match gives a meaning.
func quoteMeta(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if strings.IndexByte(`*?[\\`, p[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(p[i])
	}
	return b.String()
}
