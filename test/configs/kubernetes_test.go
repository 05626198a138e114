package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.yaml.in/yaml/v3"

	"github.com/open-telemetry/opentelemetry-collector-contrib/processor/k8sattributesprocessor"

	cgroups "github.com/perfprof/perfprof/internal/container"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver"
)

// The Kubernetes examples: their folder, the Dockerfile of their images,
// and the container that runs the collector.
const (
	k8sDir        = "examples/kubernetes"
	k8sDockerfile = "examples/kubernetes/Dockerfile"
	k8sCollector  = "perfprof"
)

// k8sExamples are the manifests of examples/kubernetes, each with the kind
// of the workload whose pod runs the collector, and the collector it runs
// (see TestKubernetesBuilds).
var k8sExamples = map[string]struct {
	kind  string
	build *build
}{
	"perfprof-sidecar.yaml":   {"Deployment", leanBuild},
	"perfprof-daemonset.yaml": {"DaemonSet", k8sBuild},
}

// fieldRefValues stand for what the downward API gives a container, by
// fieldPath: the collector's configuration is resolved with them.
var fieldRefValues = map[string]string{
	"spec.nodeName":      "node-a",
	"status.podIP":       "10.1.2.3",
	"status.hostIP":      "192.0.2.10",
	"metadata.name":      "perfprof-x7k2p",
	"metadata.namespace": "perfprof",
	"metadata.uid":       "0a1b2c3d-1111-2222-3333-444455556666",
}

// k8sObject is what the test reads of a Kubernetes object: a ConfigMap's
// data, a Deployment's or DaemonSet's pod template, a ClusterRole's rules,
// a ClusterRoleBinding's subjects and role.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Template struct {
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
	Rules []struct {
		APIGroups []string `yaml:"apiGroups"`
		Resources []string `yaml:"resources"`
		Verbs     []string `yaml:"verbs"`
	} `yaml:"rules"`
	Subjects []struct {
		Kind      string `yaml:"kind"`
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"subjects"`
	RoleRef struct {
		Kind string `yaml:"kind"`
		Name string `yaml:"name"`
	} `yaml:"roleRef"`
}

type podSpec struct {
	ShareProcessNamespace bool         `yaml:"shareProcessNamespace"`
	HostPID               bool         `yaml:"hostPID"`
	HostNetwork           bool         `yaml:"hostNetwork"`
	ServiceAccountName    string       `yaml:"serviceAccountName"`
	Tolerations           []toleration `yaml:"tolerations"`
	Containers            []container  `yaml:"containers"`
	Volumes               []struct {
		Name      string `yaml:"name"`
		ConfigMap struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type toleration struct {
	Key      string `yaml:"key"`
	Operator string `yaml:"operator"`
	Effect   string `yaml:"effect"`
}

type container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Env   []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom struct {
			FieldRef struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports     []containerPort `yaml:"ports"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
	SecurityContext struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		RunAsUser    *int  `yaml:"runAsUser"`
		Capabilities struct {
			Add  []string `yaml:"add"`
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
}

type containerPort struct {
	ContainerPort int `yaml:"containerPort"`
	HostPort      int `yaml:"hostPort"`
}

// envFrom returns the fieldPath of the downward API that the container's
// variable name comes from, "" if none.
func (c *container) envFrom(name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.ValueFrom.FieldRef.FieldPath
		}
	}
	return ""
}

// TestEveryManifestChecked keeps k8sExamples complete.
func TestEveryManifestChecked(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testdata(".."), k8sDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := k8sExamples[filepath.Base(f)]; !ok {
			t.Errorf("%s/%s is not checked: add it to k8sExamples and test it", k8sDir, filepath.Base(f))
		}
	}
}

// TestKubernetesBuilds keeps each example on the collector that runs its
// configuration at the least cost, built as the README says: the collector
// container's image is that collector's, the README builds it from the
// Dockerfile's stage that copies that collector's binary, and an example
// runs the per-node collector only if the lean one, whose memory every pod
// it runs in pays for, would refuse its configuration at start-up, for a
// component it lacks (the DaemonSet's k8s_attributes). Each example's own
// test checks its configuration against the collector it runs.
func TestKubernetesBuilds(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testdata(".."), k8sDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, ex := range k8sExamples {
		t.Run(name, func(t *testing.T) {
			e := readK8sExample(t, name)
			image := e.collector.Image
			if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
				image = image[:i] // the tag
			}
			if path.Base(image) != ex.build.String() {
				t.Errorf("the collector's image is %s, not one of %s", e.collector.Image, ex.build)
			}
			build := fmt.Sprintf("docker build -f %s --target %s -t %s .", k8sDockerfile, e.stage(t).name, image)
			if !bytes.Contains(readme, []byte(build)) {
				t.Errorf("%s/README.md does not build the collector's image with %q", k8sDir, build)
			}

			if ex.build == leanBuild {
				return
			}
			var lacks []string
			for _, f := range failures(t, func(t testing.TB) { e.checkConfigOn(t, leanBuild) }) {
				if strings.Contains(f, " "+leanBuild.String()+" has no such component") {
					lacks = append(lacks, f)
				}
			}
			if len(lacks) == 0 {
				t.Errorf("%s runs %s, but %s has every component of its configuration: run that", e.file, ex.build, leanBuild)
			} else {
				t.Logf("%s would refuse %s's configuration: %q", leanBuild, e.file, lacks)
			}
		})
	}
}

// TestBuildK8s builds the per-node collector as `make build-k8s` does,
// which takes a minute or two: only with PERFPROF_BUILD_K8S=1. It checks
// that the binary has the components these tests decode its configurations
// with, and that it validates the configuration of each example that runs
// it (`validate`: every component's config, as at start-up, without
// starting any). The e2e test builds and runs the lean collector.
func TestBuildK8s(t *testing.T) {
	if os.Getenv("PERFPROF_BUILD_K8S") != "1" {
		t.Skip("building the per-node collector (make build-k8s) takes a minute or two; set PERFPROF_BUILD_K8S=1 to run it")
	}
	// Both: the lean one is measured against it (and the e2e test runs
	// it later, up to date).
	build := exec.Command("make", "build", "build-k8s")
	build.Dir = testdata("..")
	start := time.Now()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build build-k8s: %v\n%s", err, out)
	}
	t.Logf("make build build-k8s took %v", time.Since(start).Round(time.Second))
	bin := filepath.Join(testdata(".."), k8sBuild.binary)
	t.Run("cost", func(t *testing.T) { checkK8sCost(t) })

	out, err := exec.Command(bin, "components").Output()
	if err != nil {
		t.Fatalf("%s components: %v", k8sBuild, err)
	}
	type named []struct{ Name string }
	var listed struct{ Receivers, Processors, Exporters named }
	if err := yaml.Unmarshal(out, &listed); err != nil {
		t.Fatalf("%s components: %v", k8sBuild, err)
	}
	for section, components := range map[string]named{"receivers": listed.Receivers, "processors": listed.Processors, "exporters": listed.Exporters} {
		var got, want []string
		for _, c := range components {
			got = append(got, c.Name)
		}
		for typ := range k8sBuild.factories[section] {
			want = append(want, typ.String())
		}
		if !sameSet(got, want) {
			t.Errorf("%s has the %s %v; these tests know %v", k8sBuild, section, got, want)
		}
	}

	for name, ex := range k8sExamples {
		if ex.build != k8sBuild {
			continue
		}
		t.Run(name, func(t *testing.T) {
			e := readK8sExample(t, name)
			cmd := exec.Command(bin, "validate", "--config", e.writeConfig(t), "--feature-gates=service.profilesSupport")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s validate: %v\n%s", k8sBuild, err, out)
			}
		})
	}
}

// TestKubernetesSidecar keeps the sidecar example working: the collector's
// configuration (see k8sExample.checkConfig) and capabilities (see
// k8sExample.checkCapabilities), a pod that shares its process namespace,
// and the app's OTLP exporter pointed at the collector's span endpoint.
func TestKubernetesSidecar(t *testing.T) {
	e := readK8sExample(t, "perfprof-sidecar.yaml")
	if !e.pod.ShareProcessNamespace {
		t.Errorf("the pod does not set shareProcessNamespace: the collector would not see the app")
	}
	if len(e.apps) == 0 {
		t.Fatalf("the pod needs an app container beside the collector %q", k8sCollector)
	}
	_, recv := e.checkConfig(t)

	// The app sends its spans to the sidecar's span endpoint.
	grpc := recv.Protocols.GRPC.Get()
	if grpc == nil {
		t.Fatalf("the perfprof receiver takes no spans over OTLP/gRPC")
	}
	_, port, err := net.SplitHostPort(grpc.NetAddr.Endpoint)
	if err != nil {
		t.Fatalf("protocols.grpc.endpoint %q: %v", grpc.NetAddr.Endpoint, err)
	}
	for _, app := range e.apps {
		endpoint := ""
		for _, env := range app.Env {
			if env.Name == "OTEL_EXPORTER_OTLP_ENDPOINT" {
				endpoint = env.Value
			}
		}
		u, err := url.Parse(endpoint)
		if err != nil || u.Hostname() != "localhost" && u.Hostname() != "127.0.0.1" || u.Port() != port {
			t.Errorf("container %s: OTEL_EXPORTER_OTLP_ENDPOINT %q, want the sidecar's span endpoint, localhost:%s", app.Name, endpoint, port)
		}
	}

	e.checkCapabilities(t, recv.KernelStacks)
}

// TestKubernetesDaemonSet keeps the per-node example working: the
// collector's configuration (see k8sExample.checkConfig) and capabilities
// (see k8sExample.checkCapabilities); a pod with the host's pids on every
// node; targets chosen by cgroup, which select pods under both of the
// kubelet's cgroup drivers but not the collector's own; span endpoints
// that apps reach at their node's IP through hostPorts; k8s_attributes in
// every pipeline, filtered by the node name of the downward API and finding
// pods by what perfprof puts on profiles and by the spans' connection; and
// the RBAC that k8s_attributes needs.
func TestKubernetesDaemonSet(t *testing.T) {
	e := readK8sExample(t, "perfprof-daemonset.yaml")
	pod := e.pod
	if !pod.HostPID {
		t.Errorf("the pod does not set hostPID: the collector would see no process of the node's other pods")
	}
	if pod.HostNetwork {
		t.Errorf("the pod sets hostNetwork, which it does not need: the spans come through hostPorts")
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tl toleration) bool {
		return tl.Key == "" && tl.Operator == "Exists" && tl.Effect == ""
	}) {
		t.Errorf("the pod does not tolerate every taint ({operator: Exists}): tainted nodes would go unprofiled")
	}
	cfg, recv := e.checkConfig(t)
	e.checkCapabilities(t, recv.KernelStacks)

	// Targets: the pods chosen by their cgroups.
	if len(recv.Targets.Cgroups) == 0 {
		t.Errorf("the perfprof receiver's targets.cgroups is empty: a per-node collector chooses pods by their cgroup")
	}
	// Each pod's cgroup as the host shows it (cgroup v1, or a collector in
	// the host's cgroup namespace) and as a collector in a cgroup
	// namespace of its own sees it (containerd and CRI-O on cgroup v2):
	// relative to the collector's own cgroup, a container of the
	// collector's own QoS class.
	own := qosClass(pod)
	for _, driver := range []string{"systemd", "cgroupfs"} {
		self := podCgroups[driver][own]
		for _, view := range []string{"host", "cgroup namespace"} {
			var chosen []string
			for _, class := range []string{"Guaranteed", "Burstable", "BestEffort"} {
				p := podCgroups[driver][class]
				if view != "host" {
					p = relativeCgroup(self, p)
				}
				if slices.ContainsFunc(recv.Targets.Cgroups, func(pat string) bool { return cgroups.MatchPath(pat, []string{p}) }) {
					chosen = append(chosen, class)
				}
			}
			if len(chosen) == 0 {
				t.Errorf("targets.cgroups %q choose no pod under the kubelet's %s cgroup driver, seen from the %s", recv.Targets.Cgroups, driver, view)
			}
			if slices.Contains(chosen, own) {
				t.Errorf("targets.cgroups %q choose the %s pods under the %s cgroup driver, seen from the %s: the collector's own pod among them", recv.Targets.Cgroups, own, driver, view)
			}
		}
		if slices.ContainsFunc(recv.Targets.Cgroups, func(pat string) bool { return cgroups.MatchPath(pat, []string{"/"}) }) {
			t.Errorf("targets.cgroups %q choose the collector's own cgroup as it sees it in its cgroup namespace", recv.Targets.Cgroups)
		}
	}

	// Spans: the endpoints listen on the pod's IP, on ports the node
	// forwards to them (the apps send to their node's IP).
	ports := map[string]string{}
	if grpc := recv.Protocols.GRPC.Get(); grpc != nil {
		ports["grpc"] = grpc.NetAddr.Endpoint
	} else {
		t.Errorf("the perfprof receiver takes no spans over OTLP/gRPC")
	}
	if http := recv.Protocols.HTTP.Get(); http != nil {
		ports["http"] = http.ServerConfig.NetAddr.Endpoint
	}
	for proto, endpoint := range ports {
		host, port, err := net.SplitHostPort(endpoint)
		if err != nil {
			t.Errorf("protocols.%s.endpoint %q: %v", proto, endpoint, err)
			continue
		}
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			t.Errorf("protocols.%s.endpoint %q listens on the loopback, which hostPort traffic does not reach", proto, endpoint)
		}
		if !slices.ContainsFunc(e.collector.Ports, func(p containerPort) bool {
			return p.HostPort != 0 && p.HostPort == p.ContainerPort && strconv.Itoa(p.ContainerPort) == port
		}) {
			t.Errorf("protocols.%s.endpoint %q: no container port %s with the same hostPort: apps could not reach it at their node's IP", proto, endpoint, port)
		}
	}

	// k8s_attributes: in every pipeline, this node's pods, found by what
	// perfprof puts on profiles and by the spans' connection.
	kaID := component.MustNewID("k8s_attributes")
	ka, ok := cfg.components["processors"][kaID].(*k8sattributesprocessor.Config)
	if !ok {
		t.Fatalf("the collector's config has no processor %s", kaID)
	}
	for pid, ids := range cfg.pipelines {
		if !slices.Contains(ids["processors"], kaID) {
			t.Errorf("pipeline %s does not pass through %s", pid, kaID)
		}
	}
	switch node := ka.Filter.NodeFromEnvVar; {
	case node != "":
		if from := e.collector.envFrom(node); from != "spec.nodeName" {
			t.Errorf("%s filters by the node in $%s, which the collector's container does not take from the downward API's spec.nodeName (but %q)", kaID, node, from)
		}
	case ka.Filter.Node != fieldRefValues["spec.nodeName"]:
		t.Errorf("%s filters by node %q, not by the node name of the downward API (filter.node_from_env_var)", kaID, ka.Filter.Node)
	}
	for _, want := range []k8sattributesprocessor.PodAssociationSourceConfig{
		{From: "resource_attribute", Name: "container.id"},
		{From: "resource_attribute", Name: "k8s.pod.uid"},
		{From: "connection"},
	} {
		if !slices.ContainsFunc(ka.Association, func(a k8sattributesprocessor.PodAssociationConfig) bool {
			return len(a.Sources) == 1 && a.Sources[0].From == want.From && a.Sources[0].Name == want.Name
		}) {
			t.Errorf("%s has no pod_association by %s %s alone", kaID, want.From, want.Name)
		}
	}

	// What k8s_attributes reads of the API, and a namespace that admits
	// the pod.
	e.checkRBAC(t, []string{"/pods", "/namespaces", "apps/replicasets"}, []string{"get", "watch", "list"})
	ns := e.workload.Metadata.Namespace
	if o := e.object("Namespace", "", ns); o == nil {
		t.Errorf("the manifest does not create the namespace %q of the DaemonSet", ns)
	} else if level := o.Metadata.Labels["pod-security.kubernetes.io/enforce"]; level != "privileged" {
		t.Errorf("namespace %s enforces the Pod Security level %q, which refuses hostPID and added capabilities: want privileged", ns, level)
	}
}

// k8sExample is a manifest of examples/kubernetes, read: its objects, the
// workload that runs the collector, its pod, the collector's container and
// the pod's other containers.
type k8sExample struct {
	file      string // relative to the repository
	build     *build // the collector it runs
	objects   []k8sObject
	workload  *k8sObject
	pod       *podSpec
	collector *container
	apps      []container
}

func readK8sExample(t *testing.T, name string) *k8sExample {
	t.Helper()
	ex, ok := k8sExamples[name]
	if !ok {
		t.Fatalf("%s is not in k8sExamples", name)
	}
	e := &k8sExample{file: filepath.Join(k8sDir, name), build: ex.build}
	e.objects = readManifest(t, filepath.Join(testdata(".."), e.file))
	for i, o := range e.objects {
		if o.Kind == ex.kind {
			if e.workload != nil {
				t.Fatalf("%s: more than one %s", e.file, ex.kind)
			}
			e.workload = &e.objects[i]
		}
	}
	if e.workload == nil {
		t.Fatalf("%s: no %s", e.file, ex.kind)
	}
	e.pod = &e.workload.Spec.Template.Spec
	for i, c := range e.pod.Containers {
		if c.Name == k8sCollector {
			e.collector = &e.pod.Containers[i]
		} else {
			e.apps = append(e.apps, c)
		}
	}
	if e.collector == nil {
		t.Fatalf("%s: the %s's pod has no container %q", e.file, ex.kind, k8sCollector)
	}
	return e
}

// object returns the manifest's object of that kind, namespace and name,
// or nil.
func (e *k8sExample) object(kind, namespace, name string) *k8sObject {
	for i, o := range e.objects {
		if o.Kind == kind && o.Metadata.Namespace == namespace && o.Metadata.Name == name {
			return &e.objects[i]
		}
	}
	return nil
}

// checkConfig checks the collector's configuration: the key of a ConfigMap
// of the manifest, in the workload's namespace, mounted where the
// collector's --config says, resolved with the collector container's
// environment (fieldRefValues for the downward API) and checked as the
// configurations of testdata/ are, against the collector the example runs.
// It returns what checkConfig found, and the perfprof receiver's config.
func (e *k8sExample) checkConfig(t *testing.T) (checked, *perfprofreceiver.Config) {
	t.Helper()
	return e.checkConfigOn(t, e.build)
}

// checkConfigOn is checkConfig against the collector b.
func (e *k8sExample) checkConfigOn(t testing.TB, b *build) (checked, *perfprofreceiver.Config) {
	t.Helper()
	c := checkConfig(t, b, e.writeConfig(t))
	recv, ok := c.components["receivers"][component.MustNewID("perfprof")].(*perfprofreceiver.Config)
	if !ok {
		t.Fatalf("the collector's config has no receiver perfprof")
	}
	return c, recv
}

// writeConfig writes the collector's configuration, the key of a ConfigMap
// of the manifest mounted where its --config says, to a file and returns
// the file's path; it sets the collector container's environment, with
// fieldRefValues for the downward API, for the test.
func (e *k8sExample) writeConfig(t testing.TB) string {
	t.Helper()
	coll := e.collector
	configPath := ""
	if i := slices.Index(coll.Args, "--config"); i >= 0 && i+1 < len(coll.Args) {
		configPath = coll.Args[i+1]
	}
	var config string
	for _, m := range coll.VolumeMounts {
		key, ok := strings.CutPrefix(configPath, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range e.pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			if cm := e.object("ConfigMap", e.workload.Metadata.Namespace, v.ConfigMap.Name); cm != nil {
				config = cm.Data[key]
			}
		}
	}
	if config == "" {
		t.Fatalf("the collector's --config %q is no key of a ConfigMap of %s mounted in its container", configPath, e.file)
	}
	for _, env := range coll.Env {
		value := env.Value
		if from := env.ValueFrom.FieldRef.FieldPath; from != "" {
			v, ok := fieldRefValues[from]
			if !ok {
				t.Fatalf("the collector's $%s comes from the downward API's %s, for which fieldRefValues has no value", env.Name, from)
			}
			value = v
		}
		t.Setenv(env.Name, value)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkCapabilities checks that the collector runs as a non-root user with
// exactly the capabilities of README.md's privilege table that its
// configuration needs, and that the setcap of the Dockerfile's stage that
// copies its binary gives it the same.
func (e *k8sExample) checkCapabilities(t *testing.T, kernelStacks bool) {
	t.Helper()
	want := neededCapabilities(t, kernelStacks)
	sc := e.collector.SecurityContext
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("the collector's securityContext: want runAsNonRoot and a runAsUser other than 0, as TestLeastPrivilege runs it")
	}
	if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("the collector's capabilities drop %v, want [ALL]", sc.Capabilities.Drop)
	}
	add := make([]string, len(sc.Capabilities.Add))
	for i, c := range sc.Capabilities.Add {
		add[i] = "CAP_" + c
	}
	if !sameSet(add, want) {
		t.Errorf("the collector's capabilities add %v, want those of README.md's privilege table: %v", sc.Capabilities.Add, want)
	}
	if st := e.stage(t); !sameSet(st.setcap, want) {
		t.Errorf("%s's stage %s gives the collector's binary %v, want those of README.md's privilege table: %v", k8sDockerfile, st.name, st.setcap, want)
	}
}

// checkRBAC checks that the pod's service account, in the manifest, is
// bound to a ClusterRole of the manifest that grants the verbs on the
// resources ("group/resource", "" the core group).
func (e *k8sExample) checkRBAC(t *testing.T, resources, verbs []string) {
	t.Helper()
	sa, ns := e.pod.ServiceAccountName, e.workload.Metadata.Namespace
	if sa == "" {
		t.Errorf("the pod names no serviceAccountName: it would run as its namespace's default service account")
		return
	}
	if e.object("ServiceAccount", ns, sa) == nil {
		t.Errorf("the manifest has no ServiceAccount %s in namespace %q", sa, ns)
	}
	granted := map[string]bool{}
	for _, b := range e.objects {
		if b.Kind != "ClusterRoleBinding" || b.RoleRef.Kind != "ClusterRole" {
			continue
		}
		bound := false
		for _, s := range b.Subjects {
			bound = bound || s.Kind == "ServiceAccount" && s.Name == sa && s.Namespace == ns
		}
		role := e.object("ClusterRole", "", b.RoleRef.Name)
		if !bound || role == nil {
			continue
		}
		for _, r := range role.Rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						granted[g+"/"+res+" "+v] = true
					}
				}
			}
		}
	}
	for _, res := range resources {
		for _, v := range verbs {
			if !granted[res+" "+v] {
				t.Errorf("no ClusterRole bound to the service account %s/%s grants %s on %s", ns, sa, v, res)
			}
		}
	}
}

// qosClass is the pod's Kubernetes QoS class, which only cpu and memory
// decide: Guaranteed when every container has limits of both and requests
// equal to them (a request not given is its limit), BestEffort when no
// container has a request or limit of either, Burstable else. Quantities
// are compared as written.
func qosClass(pod *podSpec) string {
	guaranteed, bestEffort := true, true
	for _, c := range pod.Containers {
		for _, r := range []string{"cpu", "memory"} {
			req, hasReq := c.Resources.Requests[r]
			limit, hasLimit := c.Resources.Limits[r]
			if hasReq || hasLimit {
				bestEffort = false
			}
			if !hasLimit || hasReq && req != limit {
				guaranteed = false
			}
		}
	}
	switch {
	case bestEffort:
		return "BestEffort"
	case guaranteed:
		return "Guaranteed"
	}
	return "Burstable"
}

// podCgroups are the cgroup paths of a container of a pod of each QoS class
// under each of the kubelet's cgroup drivers (systemd: containerd's scope
// names; the pod uid's dashes as underscores).
var podCgroups = map[string]map[string]string{
	"systemd": {
		"Guaranteed": "/kubepods.slice/kubepods-pod0a1b2c3d_1111_2222_3333_444455556666.slice/cri-containerd-" + containerID + ".scope",
		"Burstable":  "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_1111_2222_3333_444455556666.slice/cri-containerd-" + containerID + ".scope",
		"BestEffort": "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0a1b2c3d_1111_2222_3333_444455556666.slice/cri-containerd-" + containerID + ".scope",
	},
	"cgroupfs": {
		"Guaranteed": "/kubepods/pod0a1b2c3d-1111-2222-3333-444455556666/" + containerID,
		"Burstable":  "/kubepods/burstable/pod0a1b2c3d-1111-2222-3333-444455556666/" + containerID,
		"BestEffort": "/kubepods/besteffort/pod0a1b2c3d-1111-2222-3333-444455556666/" + containerID,
	},
}

const containerID = "4f2a9c6e0b1d3e5f7a9c0b2d4e6f8a0c1e3f5a7b9d0c2e4f6a8b0d1c3e5f7a9b"

// relativeCgroup returns the cgroup path p as a process in a cgroup
// namespace rooted at self reads it in /proc/PID/cgroup: relative to self,
// through their common ancestor ("/../../kubepods-burstable.slice/…").
func relativeCgroup(self, p string) string {
	a, b := strings.Split(strings.Trim(self, "/"), "/"), strings.Split(strings.Trim(p, "/"), "/")
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	rel := slices.Repeat([]string{".."}, len(a)-n)
	return "/" + path.Join(append(rel, b[n:]...)...)
}

// readManifest decodes every document of the YAML file path.
func readManifest(t *testing.T, path string) []k8sObject {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []k8sObject
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, len(objs)+1, err)
		}
		objs = append(objs, o)
	}
	return objs
}

// neededCapabilities reads README.md's privilege table (which
// TestLeastPrivilege checks) and returns the capabilities a collector
// needs: always, and with kernel_stacks: true if kernelStacks.
func neededCapabilities(t *testing.T, kernelStacks bool) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata(".."), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Privileges\n")
	if !ok {
		t.Fatal("README.md has no section Privileges")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var caps []string
	rows := 0
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(line, " | ")
		if len(cells) < 2 || !strings.HasPrefix(cells[0], "| `CAP_") {
			continue
		}
		rows++
		name := strings.Trim(strings.TrimPrefix(cells[0], "| "), "`")
		switch cells[1] {
		case "always":
			caps = append(caps, name)
		case "`kernel_stacks: true`":
			if kernelStacks {
				caps = append(caps, name)
			}
		default:
			t.Errorf("README.md's privilege table: %s is needed %q, which this test does not know", name, cells[1])
		}
	}
	if rows == 0 {
		t.Fatal("README.md's section Privileges has no table of capabilities")
	}
	return caps
}

// dockerStage is a stage of the Dockerfile: its name (a --target), the
// files it copies from the build context, and the capabilities that its
// setcap gives ("CAP_PERFMON", …).
type dockerStage struct {
	name   string
	copies []string
	setcap []string
}

// readDockerfile returns the stages of the Dockerfile.
func readDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata(".."), k8sDockerfile))
	if err != nil {
		t.Fatal(err)
	}
	var stages []dockerStage
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "FROM" {
			st := dockerStage{}
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				st.name = f[3]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			continue
		}
		st := &stages[len(stages)-1]
		switch i := slices.Index(f, "setcap"); {
		case f[0] == "COPY" && len(f) >= 3:
			st.copies = append(st.copies, f[1:len(f)-1]...)
		case f[0] == "RUN" && i >= 0 && i+1 < len(f):
			set, ok := strings.CutSuffix(f[i+1], "+ep")
			if !ok {
				t.Fatalf("%s: setcap %s: want the capabilities +ep", k8sDockerfile, f[i+1])
			}
			for _, c := range strings.Split(set, ",") {
				st.setcap = append(st.setcap, strings.ToUpper(c))
			}
		}
	}
	return stages
}

// stage returns the Dockerfile's stage that copies the binary of the
// collector that the example runs: the image of that collector.
func (e *k8sExample) stage(t *testing.T) dockerStage {
	t.Helper()
	var found []dockerStage
	for _, st := range readDockerfile(t) {
		if slices.Contains(st.copies, e.build.binary) {
			found = append(found, st)
		}
	}
	if len(found) != 1 || found[0].name == "" {
		t.Fatalf("%s has %d stages that copy %s, want one with a name (its --target)", k8sDockerfile, len(found), e.build.binary)
	}
	return found[0]
}

func sameSet(a, b []string) bool {
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	return slices.Equal(a, b)
}

// checkK8sCost holds what the README says the k8sattributes processor
// costs a collector that has it, used or not: the binary about 79 MB
// instead of 48 MB, an idle collector's RSS about 61 MiB instead of 45.
// Each build runs the same configuration, which uses none of the
// processor, waiting for a program that never starts, for 3 s.
func checkK8sCost(t *testing.T) {
	type cost struct {
		size int64  // bytes
		rss  uint64 // KiB
	}
	measure := func(b *build) cost {
		bin := filepath.Join(testdata(".."), b.binary)
		fi, err := os.Stat(bin)
		if err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(t.TempDir(), "idle.yaml")
		if err := os.WriteFile(cfg, []byte(idleConfig), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "--config", cfg, "--feature-gates=service.profilesSupport")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}()
		time.Sleep(3 * time.Second)
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		if err != nil {
			t.Fatalf("%s exited: %v\n%s", b, err, out.String())
		}
		var rss uint64
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				rss, _ = strconv.ParseUint(f[1], 10, 64)
			}
		}
		return cost{fi.Size(), rss}
	}
	lean, k8s := measure(leanBuild), measure(k8sBuild)
	t.Logf("binary %.0f MB (lean) and %.0f MB (per node); idle RSS %d MiB and %d MiB",
		float64(lean.size)/1e6, float64(k8s.size)/1e6, lean.rss>>10, k8s.rss>>10)
	if lean.size > 54e6 || k8s.size < lean.size*3/2 {
		t.Errorf("binaries %d and %d bytes: the README says about 48 MB and 79 MB", lean.size, k8s.size)
	}
	if lean.rss == 0 || lean.rss > 64<<10 || k8s.rss < lean.rss+6<<10 {
		t.Errorf("idle RSS %d KiB and %d KiB: the README says about 45 MiB and 61 MiB", lean.rss, k8s.rss)
	}
}

// idleConfig is a collector that profiles a program that never runs and
// sends what it would have to the debug exporter.
const idleConfig = `
receivers:
  perfprof:
    targets:
      executables: [perfprof-idle-no-such-program]
exporters:
  debug:
service:
  pipelines:
    profiles:
      receivers: [perfprof]
      exporters: [debug]
  telemetry:
    metrics:
      level: none
`
