// Package configs checks the collector configurations in the repository's
// testdata/, which the README, `make run` and the end-to-end test use: each
// resolves as the collector resolves it (file and env providers), every
// component's section unmarshals into the config of the real factory (no
// unknown keys) and passes its validation, every component supports the
// signals of the pipelines it is in, and every pipeline names components
// that are defined. A broken example then fails here, in seconds, instead
// of in the e2e test or in a user's first run. The collector configurations
// of the Kubernetes examples (examples/kubernetes) are checked the same way,
// with their manifests (kubernetes_test.go).
package configs

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/exporter/otlphttpexporter"
	"go.opentelemetry.io/collector/pipeline"
	"go.opentelemetry.io/collector/pipeline/xpipeline"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.yaml.in/yaml/v3"

	"github.com/open-telemetry/opentelemetry-collector-contrib/processor/k8sattributesprocessor"

	"github.com/perfprof/perfprof/exporter/tracefileexporter"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver"
)

// The components of the collector that builder-config.yaml builds, by the
// package that ocb imports (TestBuilderConfig keeps the two equal).
var (
	receivers = factories("receivers", map[string]receiver.Factory{
		"github.com/perfprof/perfprof/receiver/perfprofreceiver": perfprofreceiver.NewFactory(),
		"go.opentelemetry.io/collector/receiver/otlpreceiver":    otlpreceiver.NewFactory(),
	})
	processors = factories("processors", map[string]processor.Factory{
		"github.com/open-telemetry/opentelemetry-collector-contrib/processor/k8sattributesprocessor": k8sattributesprocessor.NewFactory(),
	})
	exporters = factories("exporters", map[string]exporter.Factory{
		"github.com/perfprof/perfprof/exporter/tracefileexporter": tracefileexporter.NewFactory(),
		"go.opentelemetry.io/collector/exporter/debugexporter":    debugexporter.NewFactory(),
		"go.opentelemetry.io/collector/exporter/otlpexporter":     otlpexporter.NewFactory(),
		"go.opentelemetry.io/collector/exporter/otlphttpexporter": otlphttpexporter.NewFactory(),
	})
)

// sections are the component sections of a configuration, in pipeline
// order, and the stability of a component type of each for a signal.
var sections = []struct {
	name      string
	stability func(component.Type, pipeline.Signal) component.StabilityLevel
}{
	{"receivers", func(t component.Type, s pipeline.Signal) component.StabilityLevel { return stability(receivers[t], s) }},
	{"processors", func(t component.Type, s pipeline.Signal) component.StabilityLevel { return stability(processors[t], s) }},
	{"exporters", func(t component.Type, s pipeline.Signal) component.StabilityLevel { return stability(exporters[t], s) }},
}

// imports are the packages of the factories above, by section.
var imports = map[string][]string{}

func factories[F component.Factory](section string, fs map[string]F) map[component.Type]F {
	m := map[component.Type]F{}
	for pkg, f := range fs {
		m[f.Type()] = f
		imports[section] = append(imports[section], pkg)
	}
	return m
}

// TestBuilderConfig keeps the factories that these tests decode
// configurations with equal to the components that builder-config.yaml
// builds into the collector.
func TestBuilderConfig(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testdata(".."), "builder-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type module struct {
		GoMod  string `yaml:"gomod"`
		Import string `yaml:"import"`
	}
	var manifest struct {
		Receivers  []module `yaml:"receivers"`
		Processors []module `yaml:"processors"`
		Exporters  []module `yaml:"exporters"`
	}
	if err := yaml.Unmarshal(b, &manifest); err != nil {
		t.Fatalf("builder-config.yaml: %v", err)
	}
	for section, modules := range map[string][]module{
		"receivers": manifest.Receivers, "processors": manifest.Processors, "exporters": manifest.Exporters,
	} {
		want := imports[section]
		var built []string
		for _, c := range modules {
			pkg := c.Import
			if pkg == "" { // ocb imports the module's root package
				pkg, _, _ = strings.Cut(c.GoMod, " ")
			}
			built = append(built, pkg)
		}
		if !sameSet(built, want) {
			t.Errorf("builder-config.yaml's %s are %v; these tests know %v", section, built, want)
		}
	}
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

func TestConfigs(t *testing.T) {
	for _, c := range configs {
		t.Run(c.file, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			checkConfig(t, testdata(c.file))
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
// component and pipeline of it.
func checkConfig(t *testing.T, path string) checked {
	t.Helper()
	conf := resolve(t, path)
	c := checked{components: map[string]map[component.ID]component.Config{
		"receivers":  components(t, conf, "receivers", receivers),
		"processors": components(t, conf, "processors", processors),
		"exporters":  components(t, conf, "exporters", exporters),
	}}
	c.pipelines = checkPipelines(t, conf, c.components)
	return c
}

// resolve reads path as the collector does with --config path.
func resolve(t *testing.T, path string) *confmap.Conf {
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
// ("receivers", "exporters") with its factory.
func components[F component.Factory](t *testing.T, conf *confmap.Conf, section string, fs map[component.Type]F) map[component.ID]component.Config {
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
		f, ok := fs[id.Type()]
		if !ok {
			t.Errorf("%s: %s: the collector has no such component", section, id)
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
func checkPipelines(t *testing.T, conf *confmap.Conf, defined map[string]map[component.ID]component.Config) map[pipeline.ID]map[string][]component.ID {
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
			for _, id := range out[pid][sec.name] {
				if _, ok := defined[sec.name][id]; !ok {
					t.Errorf("pipeline %s: %s %s is not defined under %s", pid, strings.TrimSuffix(sec.name, "s"), id, sec.name)
					continue
				}
				if used[sec.name] == nil {
					used[sec.name] = map[component.ID]bool{}
				}
				used[sec.name][id] = true
				if sec.stability(id.Type(), pid.Signal()) == component.StabilityLevelUndefined {
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
// stability level per signal, undefined for a signal the component does not
// support.
type factory interface {
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
