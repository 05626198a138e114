// Package container reads what a process's pid namespace and cgroups say
// about it, from /proc: its ids in its own pid namespace, its container and
// its Kubernetes pod.
//
// A profiler that runs beside containerized apps (a per-node collector with
// hostPID, or a collector in the app's pod) sees pids and tids in its own pid
// namespace, while an app reports the ids it sees in its own (a span's
// thread.id, a resource's process.pid) and the container.id its SDK read from
// /proc/self/cgroup. This package supplies the facts to join the two: the
// ids of a task in every pid namespace ([ReadNSpid], [ReadThread],
// [ThreadIDs]), and the container and pod a process's cgroup paths name
// ([ReadCgroup], [ParseCgroup]), with matching of cgroup path patterns and
// container ids for target selection ([MatchPath], [MatchID]). It is not a
// container runtime client: nothing here asks Docker, containerd or the
// Kubernetes API anything, and it holds no state.
//
// # Pid namespaces
//
// The "NSpid:" line of /proc/PID/status (Linux ≥ 4.1) lists a task's ids
// from the pid namespace of the /proc mount that is read, outermost first,
// down to the task's own, innermost last: a process that is pid 1 in a
// container and 4242 on the host reads, through the host's /proc, as
// [4242 1]. Through /proc/PID/task/TID/status the same holds for a thread.
// On older kernels only the one id of the /proc mount's namespace is known.
//
// # Cgroup paths
//
// /proc/PID/cgroup has one line per cgroup hierarchy,
// "hierarchy-ID:controller-list:path": "0::path" for the unified (v2)
// hierarchy, "N:controllers:path" for each v1 hierarchy
// ("4:memory:/docker/…", "1:name=systemd:/…"). Paths are relative to the
// cgroup namespace of the reader (the collector), so a process whose own
// cgroup namespace makes it read "0::/" for itself is still seen here under
// its full path. A v2 path of a removed cgroup ends in " (deleted)", which is
// dropped. [Cgroup.Paths] holds the v2 path first, then each distinct v1
// path.
//
// # Container ids
//
// Container runtimes name a container's cgroup after its id. The shapes
// recognized, by source:
//
//	Docker, cgroupfs driver            /docker/<id>
//	Docker, systemd driver             /system.slice/docker-<id>.scope
//	containerd CRI, systemd driver     /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope
//	containerd ≥ 1.5 on v1, systemd    /system.slice/containerd.service/kubepods-pod<uid_>.slice:cri-containerd:<id>
//	Kubernetes, cgroupfs driver        /kubepods/besteffort/pod<uid>/<id>   (guaranteed: /kubepods/pod<uid>/<id>)
//	CRI-O                              /kubepods.slice/…/crio-<id>.scope, also …/crio-<id>.scope/container
//	podman (libpod)                    /machine.slice/libpod-<id>.scope, also …/libpod-<id>.scope/container
//	Amazon ECS on EC2                  /ecs/<cluster>/<32-hex task id>/<id>
//	AWS Fargate ≤ 1.3                  /ecs/<task uuid>/<id>
//	AWS Fargate ≥ 1.4                  /ecs/<32 hex>/<32 hex>-<digits>   (the id is "<32 hex>-<digits>")
//
// where <id> is 64 lowercase hex digits, and <uid_> is a pod uid with its
// dashes escaped to underscores, as systemd slice names need. A cgroup
// component holds a container id when, after dropping a ".scope" suffix, it
// ends in one, preceded by nothing, "-" or ":" (the id after the last ":" in
// the containerd colon form): 64 hex digits, "<32 hex>-<1–20 digits>", or a
// dashed UUID (a container named by a UUID, as some runtimes do; but not the
// UUID of a "pod<uid>" component). A component whose prefix contains
// "conmon" (CRI-O's crio-conmon-<id>.scope, podman's libpod-conmon-<id>.scope)
// is the runtime's monitor process beside the container, not the container,
// and holds none. Within a path the deepest component holding an id names
// the container: a container nested in another (Docker in Docker, kind on
// podman) is the inner one, and a cgroup a container made below its own
// (…/crio-<id>.scope/container, …/docker-<id>.scope/init.scope) still names
// its container.
//
// [Cgroup.ContainerID] is the id of the path whose id is 64 hex digits, the
// v2 path first, then the v1 paths in file order; when no path has one, the
// first path's shorter id (a Fargate task id, a UUID) in that order.
//
// The apps' SDKs read their own /proc/self/cgroup by simpler rules. The
// OpenTelemetry Go SDK's container detector (resource.WithContainer) applies
// ^.*/(?:.*[-:])?([0-9a-f]+)(?:\.|\s*$) to each line and takes the first
// match: in practice the hex digits after the last "-" or ":" of the deepest
// component where a "." or the end of the line follows them. The
// OpenTelemetry Java agent's cgroup v1 extractor takes the last component's
// text between its last "-" and its last "." (after its last ":" if it has
// one) and requires 64 hex digits. The OpenTelemetry eBPF profiler takes 64
// hex digits followed by an optional ".scope" and one optional lowercase
// component ("/container"). The Datadog libraries (which the eBPF profiler's
// former container metadata copied) add the Fargate and UUID shapes. For the
// 64-hex runtimes above they all agree with ContainerID. Where they do not,
// [MatchID] is tolerant: [Cgroup.IDs] holds every id-like token of every
// path (64 hex digits, 32 hex digits, a Fargate id, a UUID that is not a pod
// uid), so that the Go SDK's reading of a hybrid host's first v1 line (the
// 32 hex digits of a sandbox's memory cgroup, a conmon scope's id) matches
// too. Two readings match nothing: the Go SDK keeps only the digits after
// the last dash of a Fargate ≥ 1.4 id or of a UUID, and reads a host
// session's "session-4.scope" as "4". An SDK in a private cgroup namespace
// reads "0::/" and reports no id at all.
//
// # Pod uids
//
// A Kubernetes pod's cgroup is named after its uid: "pod<uid>" under the
// cgroupfs driver, "kubepods[-<qos>]-pod<uid_>.slice" under the systemd
// driver (kind nested in podman adds a "kubelet-" prefix). [Cgroup.PodUID] is
// the uid of the deepest such component of the path that named the
// container (else of the first path with one), in its canonical form: a
// UUID with dashes, lowercase, or, for a static pod, whose uid is the 32 hex
// digits of a hash, those digits.
//
// # Trust
//
// The pids and paths come from the kernel, not from the process. Every read
// is bounded (64 KiB per file, a caller's limit on threads), no path read
// here is a symlink a target controls, and a malformed line is skipped, never
// a reason to panic. One limit: a container allowed to create cgroups below
// its own (cgroup delegation) names them as it likes, and so can make its
// deepest component look like another container's; an id read from a path
// is as trustworthy as the runtime's delegation policy.
package container
