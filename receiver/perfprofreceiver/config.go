package perfprofreceiver

import (
	"errors"
	"fmt"
	"time"
)

// Config configures the perfprof receiver. The mapstructure names are part
// of the user-facing contract.
type Config struct {
	// Targets says which processes to sample.
	Targets TargetsConfig `mapstructure:"targets"`
	// Scope is "process" (events per thread of each target, like
	// `perf record -p`) or "system" (one event per CPU, records of the
	// targets kept; needs CAP_PERFMON).
	Scope string `mapstructure:"scope"`
	// Frequency is the on-CPU sampling frequency in Hz, 1 to 10000.
	Frequency uint64 `mapstructure:"frequency"`
	// KernelStacks adds the kernel part of each stack.
	KernelStacks bool `mapstructure:"kernel_stacks"`
	// ReportInterval is how often profiles are emitted.
	ReportInterval time.Duration `mapstructure:"report_interval"`
	// DiscoveryInterval is how often /proc is scanned for new processes
	// of the target executables and for exited targets.
	DiscoveryInterval time.Duration `mapstructure:"discovery_interval"`
	// RingPages is the size of each per-CPU perf ring in 4 KiB pages, a
	// power of two. Raise it when receiver_perfprof_lost_records grows.
	RingPages int `mapstructure:"ring_pages"`
	// MaxSamplesPerReport bounds the samples held between two reports;
	// samples over it are dropped and counted
	// (receiver_perfprof_dropped_samples{reason="buffer_full"}).
	MaxSamplesPerReport int `mapstructure:"max_samples_per_report"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// TargetsConfig names the processes to sample. A process matches when its
// pid is listed, or its executable's base name (or comm) is.
type TargetsConfig struct {
	// Pids must exist when the receiver starts; each is released when it
	// exits.
	Pids []int `mapstructure:"pids"`
	// Executables are matched against running processes at start and
	// every discovery_interval after, so that processes started later are
	// sampled too.
	Executables []string `mapstructure:"executables"`
}

const (
	scopeProcess = "process"
	scopeSystem  = "system"
	maxFrequency = 10000
)

func createDefaultConfig() *Config {
	return &Config{
		Scope:               scopeProcess,
		Frequency:           99,
		ReportInterval:      10 * time.Second,
		DiscoveryInterval:   time.Second,
		RingPages:           64,
		MaxSamplesPerReport: 1_000_000,
	}
}

// Validate checks the configuration; the collector refuses to start on an
// error and prints it.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Targets.Pids) == 0 && len(c.Targets.Executables) == 0 {
		errs = append(errs, errors.New("targets: name at least one process in targets.pids or targets.executables"))
	}
	for _, p := range c.Targets.Pids {
		if p <= 0 {
			errs = append(errs, fmt.Errorf("targets.pids: %d is not a process id", p))
		}
	}
	for _, e := range c.Targets.Executables {
		if e == "" {
			errs = append(errs, errors.New("targets.executables: empty name"))
		}
	}
	if c.Scope != scopeProcess && c.Scope != scopeSystem {
		errs = append(errs, fmt.Errorf("scope: %q is not one of %q, %q", c.Scope, scopeProcess, scopeSystem))
	}
	if c.Frequency == 0 || c.Frequency > maxFrequency {
		errs = append(errs, fmt.Errorf("frequency: %d Hz is outside 1..%d", c.Frequency, maxFrequency))
	}
	if c.ReportInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("report_interval: %v is below the minimum of 100ms", c.ReportInterval))
	}
	if c.DiscoveryInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("discovery_interval: %v is below the minimum of 100ms", c.DiscoveryInterval))
	}
	if c.RingPages < 1 || c.RingPages&(c.RingPages-1) != 0 || c.RingPages > 1<<16 {
		errs = append(errs, fmt.Errorf("ring_pages: %d is not a power of two in 1..65536", c.RingPages))
	}
	if c.MaxSamplesPerReport < 1 {
		errs = append(errs, fmt.Errorf("max_samples_per_report: %d must be at least 1", c.MaxSamplesPerReport))
	}
	return errors.Join(errs...)
}
