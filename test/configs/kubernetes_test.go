package configs

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.yaml.in/yaml/v3"

	"github.com/perfprof/perfprof/receiver/perfprofreceiver"
)

// The Kubernetes example: its manifest, the Dockerfile of its images, and
// the container that runs the collector.
const (
	k8sManifest   = "examples/kubernetes/perfprof-sidecar.yaml"
	k8sDockerfile = "examples/kubernetes/Dockerfile"
	k8sCollector  = "perfprof"
)

// k8sObject is what the test reads of a Kubernetes object: a ConfigMap's
// data, a Deployment's pod template.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Template struct {
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	ShareProcessNamespace bool        `yaml:"shareProcessNamespace"`
	Containers            []container `yaml:"containers"`
	Volumes               []struct {
		Name      string `yaml:"name"`
		ConfigMap struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type container struct {
	Name string   `yaml:"name"`
	Args []string `yaml:"args"`
	Env  []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
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

// TestKubernetesExample keeps examples/kubernetes working: the ConfigMap's
// config.yaml is checked as the configurations of testdata/ are, the pod
// shares its process namespace, mounts that ConfigMap where the collector
// reads its config, points the app's OTLP exporter at the collector's span
// endpoint, and gives the collector, as a non-root user, exactly the
// capabilities of README.md's privilege table that its configuration
// needs, as the Dockerfile's setcap does.
func TestKubernetesExample(t *testing.T) {
	objs := readManifest(t, filepath.Join(testdata(".."), k8sManifest))
	configMaps := map[string]map[string]string{}
	var pod *podSpec
	for _, o := range objs {
		switch o.Kind {
		case "ConfigMap":
			configMaps[o.Metadata.Name] = o.Data
		case "Deployment":
			if pod != nil {
				t.Fatalf("%s: more than one Deployment", k8sManifest)
			}
			pod = &o.Spec.Template.Spec
		}
	}
	if pod == nil {
		t.Fatalf("%s: no Deployment", k8sManifest)
	}
	if !pod.ShareProcessNamespace {
		t.Errorf("the pod does not set shareProcessNamespace: the collector would not see the app")
	}
	var coll *container
	var apps []container
	for i, c := range pod.Containers {
		if c.Name == k8sCollector {
			coll = &pod.Containers[i]
		} else {
			apps = append(apps, c)
		}
	}
	if coll == nil || len(apps) == 0 {
		t.Fatalf("the pod needs a container %q and an app container beside it", k8sCollector)
	}

	// The collector's config: the ConfigMap mounted where --config says.
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
		for _, v := range pod.Volumes {
			if v.Name == m.Name {
				config = configMaps[v.ConfigMap.Name][key]
			}
		}
	}
	if config == "" {
		t.Fatalf("the collector's --config %q is no key of a ConfigMap of %s mounted in its container", configPath, k8sManifest)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	defined := checkConfig(t, path).components
	recv, ok := defined["receivers"][component.MustNewID("perfprof")].(*perfprofreceiver.Config)
	if !ok {
		t.Fatalf("the collector's config has no receiver perfprof")
	}

	// The app sends its spans to the sidecar's span endpoint.
	grpc := recv.Protocols.GRPC.Get()
	if grpc == nil {
		t.Fatalf("the perfprof receiver takes no spans over OTLP/gRPC")
	}
	_, port, err := net.SplitHostPort(grpc.NetAddr.Endpoint)
	if err != nil {
		t.Fatalf("protocols.grpc.endpoint %q: %v", grpc.NetAddr.Endpoint, err)
	}
	for _, app := range apps {
		endpoint := ""
		for _, e := range app.Env {
			if e.Name == "OTEL_EXPORTER_OTLP_ENDPOINT" {
				endpoint = e.Value
			}
		}
		u, err := url.Parse(endpoint)
		if err != nil || u.Hostname() != "localhost" && u.Hostname() != "127.0.0.1" || u.Port() != port {
			t.Errorf("container %s: OTEL_EXPORTER_OTLP_ENDPOINT %q, want the sidecar's span endpoint, localhost:%s", app.Name, endpoint, port)
		}
	}

	// Exactly the capabilities of the table, for this configuration.
	want := neededCapabilities(t, recv.KernelStacks)
	sc := coll.SecurityContext
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
	if got := dockerfileCapabilities(t); !sameSet(got, want) {
		t.Errorf("%s gives the collector's binary %v, want those of README.md's privilege table: %v", k8sDockerfile, got, want)
	}
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

// dockerfileCapabilities returns the capabilities that the Dockerfile's
// setcap gives the collector's binary.
func dockerfileCapabilities(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata(".."), k8sDockerfile))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		i := slices.Index(f, "setcap")
		if len(f) == 0 || f[0] != "RUN" || i < 0 || i+1 >= len(f) {
			continue
		}
		set, ok := strings.CutSuffix(f[i+1], "+ep")
		if !ok {
			t.Fatalf("%s: setcap %s: want the capabilities +ep", k8sDockerfile, f[i+1])
		}
		var caps []string
		for _, c := range strings.Split(set, ",") {
			caps = append(caps, strings.ToUpper(c))
		}
		return caps
	}
	t.Fatalf("%s runs no setcap", k8sDockerfile)
	return nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	return slices.Equal(a, b)
}
