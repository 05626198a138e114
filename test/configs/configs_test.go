// Package configs checks the collector configurations in the repository's
// testdata/, which the README, `make run` and the end-to-end test use: each
// resolves as the collector resolves it (file and env providers), every
// component's section unmarshals into the config of the real factory of a
// component that the collector running it has (no unknown keys) and passes
// its validation, every component supports the signals of the pipelines it
// is in, and every pipeline names components that are defined. A broken
// example then fails here, in seconds, instead of in the e2e test or in a
// user's first run. The collector configurations of the Kubernetes examples
// (examples/kubernetes) are checked the same way, with their manifests
// (kubernetes_test.go). The repository builds two collectors, the lean one
// and the per-node one with Kubernetes metadata (builder-config.yaml,
// builder-config-k8s.yaml); each configuration is checked against the
// components of the one that runs it.
package configs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/exporter/otlphttpexporter"
	"go.opentelemetry.io/collector/pipeline"
	"go.opentelemetry.io/collector/pipeline/xpipeline"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.yaml.in/yaml/v3"

	"github.com/open-telemetry/opentelemetry-collector-contrib/processor/k8sattributesprocessor"

	"github.com/perfprof/perfprof/exporter/tracefileexporter"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver"
)

// The components of the repository's collectors, by section and by the
// package that ocb imports.
var (
	// both collectors'
	leanComponents = map[string]map[string]factory{
		"receivers": {
			"github.com/perfprof/perfprof/receiver/perfprofreceiver": perfprofreceiver.NewFactory(),
			"go.opentelemetry.io/collector/receiver/otlpreceiver":    otlpreceiver.NewFactory(),
		},
		"exporters": {
			"github.com/perfprof/perfprof/exporter/tracefileexporter": tracefileexporter.NewFactory(),
			"go.opentelemetry.io/collector/exporter/debugexporter":    debugexporter.NewFactory(),
			"go.opentelemetry.io/collector/exporter/otlpexporter":     otlpexporter.NewFactory(),
			"go.opentelemetry.io/collector/exporter/otlphttpexporter": otlphttpexporter.NewFactory(),
		},
	}
	// the per-node collector's only: client-go costs every collector that
	// has it 31 MB of binary and 12 MiB of idle RSS (builder-config.yaml)
	k8sComponents = map[string]map[string]factory{
		"processors": {
			"github.com/open-telemetry/opentelemetry-collector-contrib/processor/k8sattributesprocessor": k8sattributesprocessor.NewFactory(),
		},
	}
)

// The repository's two collectors (TestBuilderConfig keeps each equal to its
// manifest). Each configuration is checked against the components of the
// collector that runs it: one that names a component its collector lacks
// does not start ("unknown type").
var (
	// make build: make run, the README and the e2e test run it with
	// testdata's configurations, and the sidecar example runs it
	leanBuild = newBuild("builder-config.yaml", "_build/otelcol-perfprof", leanComponents)
	// make build-k8s: the DaemonSet example runs it
	k8sBuild = newBuild("builder-config-k8s.yaml", "_build/k8s/otelcol-perfprof-k8s", leanComponents, k8sComponents)

	builds = []*build{leanBuild, k8sBuild}
)

// build is a collector that an ocb manifest of the repository builds.
type build struct {
	manifest string // relative to the repository
	binary   string // the collector's binary, relative to the repository
	// factories are its components by section and type, imports their
	// packages by section
	factories map[string]map[component.Type]factory
	imports   map[string][]string
}

// newBuild returns the build of manifest that has the components of each
// of sets, by section and package.
func newBuild(manifest, binary string, sets ...map[string]map[string]factory) *build {
	b := &build{manifest: manifest, binary: binary, factories: map[string]map[component.Type]factory{}, imports: map[string][]string{}}
	for _, set := range sets {
		for section, fs := range set {
			if b.factories[section] == nil {
				b.factories[section] = map[component.Type]factory{}
			}
			for pkg, f := range fs {
				b.factories[section][f.Type()] = f
				b.imports[section] = append(b.imports[section], pkg)
			}
		}
	}
	return b
}

func (b *build) String() string { return path.Base(b.binary) }

// sections are the component sections of a configuration, in pipeline
// order.
var sections = []string{"receivers", "processors", "exporters"}

// builderConfig is an ocb manifest. It has every key that the repository's
// manifests use, and reading one with a key it lacks fails, so that
// TestBuilderConfig compares whole manifests.
type builderConfig struct {
	Dist struct {
		Name        string `yaml:"name,omitempty"`
		Description string `yaml:"description,omitempty"`
		OutputPath  string `yaml:"output_path,omitempty"`
		Version     string `yaml:"version,omitempty"`
	} `yaml:"dist,omitempty"`
	Receivers  []module `yaml:"receivers,omitempty"`
	Processors []module `yaml:"processors,omitempty"`
	Exporters  []module `yaml:"exporters,omitempty"`
	Extensions []module `yaml:"extensions,omitempty"`
	Providers  []module `yaml:"providers,omitempty"`
	Replaces   []string `yaml:"replaces,omitempty"`
}

type module struct {
	GoMod  string `yaml:"gomod,omitempty"`
	Import string `yaml:"import,omitempty"`
}

// pkg is the package that ocb imports of the module.
func (m module) pkg() string {
	if m.Import != "" {
		return m.Import
	}
	pkg, _, _ := strings.Cut(m.GoMod, " ") // the module's root package
	return pkg
}

// modules returns the manifest's modules of a section of sections.
func (c *builderConfig) modules(section string) *[]module {
	return map[string]*[]module{"receivers": &c.Receivers, "processors": &c.Processors, "exporters": &c.Exporters}[section]
}

func readBuilderConfig(t *testing.T, name string) *builderConfig {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata(".."), name))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var c builderConfig
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("%s: %v (a key that builderConfig lacks: add it)", name, err)
	}
	return &c
}

// TestBuilderConfig keeps the factories that these tests decode each
// collector's configurations with equal to the components that its manifest
// builds into it, and the two manifests equal apart from their dist's
// name, description and output path, the components of the per-node
// collector only, and their replaces' paths, which are relative to the
// output path.
func TestBuilderConfig(t *testing.T) {
	manifests := map[*build]*builderConfig{}
	for _, b := range builds {
		c := readBuilderConfig(t, b.manifest)
		manifests[b] = c
		if got := path.Join(c.Dist.OutputPath, c.Dist.Name); got != b.binary {
			t.Errorf("%s builds %s; these tests expect %s", b.manifest, got, b.binary)
		}
		for _, section := range sections {
			var built []string
			for _, m := range *c.modules(section) {
				built = append(built, m.pkg())
			}
			if !sameSet(built, b.imports[section]) {
				t.Errorf("%s's %s are %v; these tests know %v", b.manifest, section, built, b.imports[section])
			}
		}
	}

	// The per-node manifest, without what only it has, is the lean one.
	lean, k8s := *manifests[leanBuild], *manifests[k8sBuild]
	for _, c := range []*builderConfig{&lean, &k8s} {
		c.Dist.Name, c.Dist.Description, c.Dist.OutputPath = "", "", ""
	}
	lean.Replaces, k8s.Replaces = replaces(manifests[leanBuild]), replaces(manifests[k8sBuild])
	for section, only := range k8sComponents {
		ms := k8s.modules(section)
		*ms = slices.DeleteFunc(slices.Clone(*ms), func(m module) bool { _, ok := only[m.pkg()]; return ok })
		if len(*ms) == 0 {
			*ms = nil
		}
	}
	if !reflect.DeepEqual(lean, k8s) {
		got, _ := yaml.Marshal(k8s)
		want, _ := yaml.Marshal(lean)
		t.Errorf("%s, without the components of %s only, differs from %s (names and local paths aside):\n%s\nwant:\n%s", k8sBuild.manifest, k8sBuild, leanBuild.manifest, got, want)
	}
}

// replaces returns the manifest's replaces with local paths relative to the
// repository rather than to its output path.
func replaces(c *builderConfig) []string {
	var out []string
	for _, r := range c.Replaces {
		mod, target, ok := strings.Cut(r, " => ")
		if ok && (strings.HasPrefix(target, "./") || strings.HasPrefix(target, "../")) {
			target = path.Join(c.Dist.OutputPath, target)
		}
		out = append(out, mod+" => "+target)
	}
	return out
}

// config is a file of testdata/ and the environment it runs with.
type config struct {
	file string
	env  map[string]string
}

var configs = []config{
	{file: "demo.yaml"},    // make run (Makefile CONFIG, scripts/run-demo.sh)
	{file: "example.yaml"}, // README.md, section Configuration
	{file: "e2e.yaml", env: map[string]string{ // test/e2e, with what it sets
		"PERFPROF_E2E_SPANS_ENDPOINT":    "127.0.0.1:43170",
		"PERFPROF_E2E_PROFILES_ENDPOINT": "127.0.0.1:43171",
		"PERFPROF_E2E_TRACE_DIR":         "/tmp/perfprof-e2e-traces",
	}},
}

func testdata(name string) string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..", "testdata", name)
}

// TestEveryFileChecked keeps the list above complete.
func TestEveryFileChecked(t *testing.T) {
	files, err := filepath.Glob(testdata("*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !slices.ContainsFunc(configs, func(c config) bool { return c.file == filepath.Base(f) }) {
			t.Errorf("testdata/%s is not checked: add it to configs", filepath.Base(f))
		}
	}
}

// TestConfigs checks the configurations of testdata/ against the lean
// collector, which runs them.
func TestConfigs(t *testing.T) {
	for _, c := range configs {
		t.Run(c.file, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			checkConfig(t, leanBuild, testdata(c.file))
		})
	}
}

// checked is what checkConfig found in a configuration: the decoded config
// of each component by section ("receivers", "processors", "exporters"),
// and the components of each pipeline by section.
type checked struct {
	components map[string]map[component.ID]component.Config
	pipelines  map[pipeline.ID]map[string][]component.ID
}

// checkConfig resolves the configuration in path and checks every
// component and pipeline of it against the components of the collector b.
func checkConfig(t testing.TB, b *build, path string) checked {
	t.Helper()
	conf := resolve(t, path)
	c := checked{components: map[string]map[component.ID]component.Config{}}
	for _, section := range sections {
		c.components[section] = components(t, conf, b, section)
	}
	c.pipelines = checkPipelines(t, conf, b, c.components)
	return c
}

// resolve reads path as the collector does with --config path.
func resolve(t testing.TB, path string) *confmap.Conf {
	t.Helper()
	res, err := confmap.NewResolver(confmap.ResolverSettings{
		URIs:              []string{"file:" + path},
		ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory(), envprovider.NewFactory()},
		DefaultScheme:     "env",
	})
	if err != nil {
		t.Fatal(err)
	}
	conf, err := res.Resolve(context.Background())
	if err != nil {
		t.Fatalf("resolve %s: %v", path, err)
	}
	if err := res.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	return conf
}

// components unmarshals and validates each component of a section
// ("receivers", "processors", "exporters") with its factory in the
// collector b.
func components(t testing.TB, conf *confmap.Conf, b *build, section string) map[component.ID]component.Config {
	t.Helper()
	sec, err := conf.Sub(section)
	if err != nil {
		t.Fatalf("%s: %v", section, err)
	}
	out := map[component.ID]component.Config{}
	for key := range sec.ToStringMap() {
		var id component.ID
		if err := id.UnmarshalText([]byte(key)); err != nil {
			t.Errorf("%s: %q: %v", section, key, err)
			continue
		}
		f, ok := b.factories[section][id.Type()]
		if !ok {
			t.Errorf("%s: %s: %s has no such component", section, id, b)
			continue
		}
		cfg := f.CreateDefaultConfig()
		sub, err := sec.Sub(key)
		if err == nil {
			err = sub.Unmarshal(cfg)
		}
		if err == nil {
			err = confmap.Validate(cfg)
		}
		if err != nil {
			t.Errorf("%s: %s: %v", section, id, err)
		}
		out[id] = cfg
	}
	return out
}

// checkPipelines checks that every pipeline names defined components that
// support its signal, and that every defined component is in a pipeline. It
// returns each pipeline's components by section.
func checkPipelines(t testing.TB, conf *confmap.Conf, b *build, defined map[string]map[component.ID]component.Config) map[pipeline.ID]map[string][]component.ID {
	t.Helper()
	pipes, err := conf.Sub("service::pipelines")
	if err != nil {
		t.Fatal(err)
	}
	if len(pipes.AllKeys()) == 0 {
		t.Fatal("no pipelines")
	}
	used := map[string]map[component.ID]bool{}
	out := map[pipeline.ID]map[string][]component.ID{}
	for key := range pipes.ToStringMap() {
		var pid pipeline.ID
		if err := pid.UnmarshalText([]byte(key)); err != nil {
			t.Errorf("pipeline %q: %v", key, err)
			continue
		}
		var p struct {
			Receivers  []component.ID `mapstructure:"receivers"`
			Processors []component.ID `mapstructure:"processors"`
			Exporters  []component.ID `mapstructure:"exporters"`
		}
		sub, err := pipes.Sub(key)
		if err == nil {
			err = sub.Unmarshal(&p)
		}
		if err != nil {
			t.Errorf("pipeline %s: %v", pid, err)
			continue
		}
		if len(p.Receivers) == 0 || len(p.Exporters) == 0 {
			t.Errorf("pipeline %s: needs at least one receiver and one exporter", pid)
		}
		out[pid] = map[string][]component.ID{"receivers": p.Receivers, "processors": p.Processors, "exporters": p.Exporters}
		for _, sec := range sections {
			for _, id := range out[pid][sec] {
				if _, ok := defined[sec][id]; !ok {
					t.Errorf("pipeline %s: %s %s is not defined under %s", pid, strings.TrimSuffix(sec, "s"), id, sec)
					continue
				}
				if used[sec] == nil {
					used[sec] = map[component.ID]bool{}
				}
				used[sec][id] = true
				if stability(b.factories[sec][id.Type()], pid.Signal()) == component.StabilityLevelUndefined {
					t.Errorf("pipeline %s: %s does not support %s", pid, id, pid.Signal())
				}
			}
		}
	}
	for section, ids := range defined {
		for id := range ids {
			if !used[section][id] {
				t.Errorf("%s: %s is in no pipeline", section, id)
			}
		}
	}
	return out
}

// factory is what receiver, processor and exporter factories share: a
// default config, and a stability level per signal, undefined for a signal
// the component does not support.
type factory interface {
	component.Factory
	TracesStability() component.StabilityLevel
	MetricsStability() component.StabilityLevel
	LogsStability() component.StabilityLevel
}

func stability(f factory, sig pipeline.Signal) component.StabilityLevel {
	switch sig {
	case pipeline.SignalTraces:
		return f.TracesStability()
	case pipeline.SignalMetrics:
		return f.MetricsStability()
	case pipeline.SignalLogs:
		return f.LogsStability()
	case xpipeline.SignalProfiles:
		// Profiles are in the x-factories (xreceiver, xprocessor,
		// xexporter) only.
		if pf, ok := f.(interface {
			ProfilesStability() component.StabilityLevel
		}); ok {
			return pf.ProfilesStability()
		}
	}
	return component.StabilityLevelUndefined
}

// TestReadmeShowsExample keeps README.md's configuration example equal to
// testdata/example.yaml, which TestConfigs checks.
func TestReadmeShowsExample(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testdata(".."), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(testdata("example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := string(file)
	for strings.HasPrefix(want, "#") { // the file's own header comment
		_, want, _ = strings.Cut(want, "\n")
	}
	_, sec, ok := strings.Cut(string(readme), "\n## Configuration\n")
	if !ok {
		t.Fatal("README.md has no section Configuration")
	}
	_, block, ok := strings.Cut(sec, "```yaml\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatal("README.md's section Configuration has no yaml block")
	}
	if block != want {
		t.Errorf("README.md's configuration example differs from testdata/example.yaml:\nREADME:\n%s\nfile:\n%s", block, want)
	}
}

// failures runs check on a testing.TB that records the failures it reports
// (Error, Errorf, Fatal, Fatalf) instead of failing t, and returns them.
func failures(t *testing.T, check func(testing.TB)) []string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { // Fatal ends this goroutine, as it ends a test's
		defer close(done)
		check(r)
	}()
	<-done
	return r.failures
}

type recorder struct {
	testing.TB
	failures []string
}

func (r *recorder) Error(args ...any) { r.failures = append(r.failures, fmt.Sprint(args...)) }
func (r *recorder) Errorf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatal(args ...any)                 { r.Error(args...); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); runtime.Goexit() }
