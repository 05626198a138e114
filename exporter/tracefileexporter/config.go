package tracefileexporter

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configretry"
	"go.opentelemetry.io/collector/exporter/exporterhelper"

	"github.com/perfprof/perfprof/internal/convention"
)

// Formats of the trace files.
const (
	FormatTRC      = "trc"      // dial9 TRC v1, self-describing
	FormatTokioTRC = "tokiotrc" // legacy TOKIOTRC v13 layout
)

// legacyVersion is the TOKIOTRC version written by format tokiotrc.
const legacyVersion = 13

// Config is the configuration of the tracefile exporter.
type Config struct {
	// Directory receives the segments; it is created if missing and must
	// be writable at start.
	Directory string `mapstructure:"directory"`
	// FilePrefix names the segments: PREFIX.N.bin.active while written,
	// PREFIX.N.bin (or PREFIX.N.bin.gz) once sealed.
	FilePrefix string `mapstructure:"file_prefix"`
	// Format is "trc" (default) or "tokiotrc".
	Format string `mapstructure:"format"`
	// MaxFileSize seals a segment once it holds more than this (it may
	// exceed it by one batch). 0 = no size rotation.
	MaxFileSize ByteSize `mapstructure:"max_file_size"`
	// RotationInterval seals segments at wall-clock multiples of it (the
	// top of each minute for 60s). 0 = no time rotation.
	RotationInterval time.Duration `mapstructure:"rotation_interval"`
	// MaxTotalSize bounds the bytes of all segments in Directory (counted
	// before compression); the oldest sealed segments are deleted first.
	// 0 = unlimited.
	MaxTotalSize ByteSize `mapstructure:"max_total_size"`
	// Compress gzips sealed segments.
	Compress bool `mapstructure:"compress"`
	// FileMode is the permission of the segments (default 0600); the
	// directories the exporter creates get it with x wherever it has r.
	FileMode FileMode `mapstructure:"file_mode"`
	// Correlation names the span attributes that say where a span ran,
	// as the perfprof receiver's correlation section does: give both
	// components the same names.
	Correlation CorrelationConfig `mapstructure:"correlation"`
	// SpanAttributes names the span attributes written on each span's
	// close event (the contract's close-time attributes), when the span
	// has them; values are cut to 256 bytes.
	SpanAttributes []string `mapstructure:"span_attributes"`
	// S3, when given, uploads sealed segments to a bucket in the
	// background (see S3Config).
	S3 configoptional.Optional[S3Config] `mapstructure:"s3"`
	// Keep holds the segments around slow spans past max_total_size (see
	// KeepConfig); off without rules.
	Keep KeepConfig `mapstructure:"keep"`

	TimeoutConfig exporterhelper.TimeoutConfig                             `mapstructure:",squash"`
	QueueConfig   configoptional.Optional[exporterhelper.QueueBatchConfig] `mapstructure:"sending_queue"`
	RetryConfig   configretry.BackOffConfig                                `mapstructure:"retry_on_failure"`

	_ struct{} // prevent unkeyed literals
}

// CorrelationConfig names the span attributes that say where a span ran.
// A span with either becomes a SpanEvent; one with a worker id is also a
// poll or a park. The attributes of the samples the perfprof receiver
// writes keep convention's keys whatever these are.
type CorrelationConfig struct {
	// ThreadIDAttribute names the integer span attribute that holds the
	// OS thread id (gettid) the span ran on.
	ThreadIDAttribute string `mapstructure:"thread_id_attribute"`
	// WorkerIDAttribute names the integer span attribute that holds a
	// runtime worker's id (tokio worker, goroutine pool slot, ...); ""
	// when spans carry none.
	WorkerIDAttribute string `mapstructure:"worker_id_attribute"`

	_ struct{} // prevent unkeyed literals
}

// S3Config uploads sealed segments to S3 or an S3-compatible store under
// dial9's S3 layout v1:
// {prefix}/version=1/date=YYYY-MM-DD/service=S/time=HHMM/instance=I/boot=B/{epoch}-{index}.bin.gz.
// Credentials come from the AWS SDK's default chain (environment, shared
// files, web identity, container and instance roles).
type S3Config struct {
	// Bucket receives the segments.
	Bucket string `mapstructure:"bucket"`
	// Prefix starts every key, as given ("" = keys start at version=1).
	Prefix string `mapstructure:"prefix"`
	// Region of the bucket; "" = the default chain's (AWS_REGION, the
	// profile).
	Region string `mapstructure:"region"`
	// Endpoint is the URL of an S3-compatible store ("" = AWS, or
	// AWS_ENDPOINT_URL_S3).
	Endpoint string `mapstructure:"endpoint"`
	// PathStyle addresses buckets as ENDPOINT/BUCKET/KEY rather than
	// BUCKET.ENDPOINT/KEY, as most S3-compatible stores need.
	PathStyle bool `mapstructure:"path_style"`
	// DeleteAfterUpload deletes a segment from Directory once it is in the
	// bucket.
	DeleteAfterUpload bool `mapstructure:"delete_after_upload"`
	// Service and Instance name the segments in the keys; "" = the
	// segment's metadata (its service, its host), else "unknown" and the
	// collector's host name.
	Service  string `mapstructure:"service"`
	Instance string `mapstructure:"instance"`
	// PutTimeout bounds one upload with the SDK's own attempts (plus one
	// second per MiB of the segment).
	PutTimeout time.Duration `mapstructure:"put_timeout"`
	// MaxBackoff bounds the wait after failed uploads, which doubles from
	// one second.
	MaxBackoff time.Duration `mapstructure:"max_backoff"`

	_ struct{} // prevent unkeyed literals
}

// KeepConfig holds the segments around slow spans: when a span over a
// rule reaches the exporter, the segments with events from Lookback before
// its start to its end are kept for For, whatever max_total_size says, and
// listed in a manifest, Directory/PREFIX.kept/slow-TRACE-SPAN.json (with
// s3, uploaded to {prefix}/dumps/ once its segments are in the bucket).
type KeepConfig struct {
	// Rules name the spans to keep; the first rule a span is over keeps it.
	Rules []KeepRule `mapstructure:"rules"`
	// Lookback is the time before a kept span's start that is kept with
	// it.
	Lookback time.Duration `mapstructure:"lookback"`
	// Settle is how long after a kept span came the segments written with
	// events in its time are still taken: its samples come after it, by
	// the receiver's correlation window and report interval.
	Settle time.Duration `mapstructure:"settle"`
	// For is how long a kept span's segments are kept.
	For time.Duration `mapstructure:"for"`
	// MaxSize bounds the bytes of the segments kept; past it the oldest
	// keeps are let go (exporter_tracefile_keeps{outcome="released"}).
	// 0 = unbounded.
	MaxSize ByteSize `mapstructure:"max_size"`

	_ struct{} // prevent unkeyed literals
}

// KeepRule keeps the spans named SpanName ("" = any) that last longer
// than MinDuration and, with Percentile, longer than that percentile of
// the last few thousand durations of the name (the larger of the two).
type KeepRule struct {
	SpanName    string        `mapstructure:"span_name"`
	MinDuration time.Duration `mapstructure:"min_duration"`
	Percentile  float64       `mapstructure:"percentile"`

	_ struct{} // prevent unkeyed literals
}

func defaultKeepConfig() KeepConfig {
	return KeepConfig{Lookback: time.Second, Settle: 30 * time.Second, For: 24 * time.Hour, MaxSize: 1 << 30}
}

func (c *KeepConfig) validate() error {
	var errs []error
	for i, r := range c.Rules {
		switch {
		case r.Percentile < 0 || r.Percentile >= 100:
			errs = append(errs, fmt.Errorf("keep.rules[%d].percentile %g: must be above 0 and below 100 (99 = the running p99)", i, r.Percentile))
		case r.Percentile > 0 && r.SpanName == "":
			errs = append(errs, fmt.Errorf("keep.rules[%d]: a percentile needs a span_name (the durations of one name)", i))
		case r.MinDuration < 0:
			errs = append(errs, fmt.Errorf("keep.rules[%d].min_duration %s: must not be negative", i, r.MinDuration))
		case r.MinDuration == 0 && r.Percentile == 0:
			errs = append(errs, fmt.Errorf("keep.rules[%d]: needs min_duration, percentile or both", i))
		}
	}
	if c.Lookback < 0 {
		errs = append(errs, fmt.Errorf("keep.lookback %s: must not be negative", c.Lookback))
	}
	if c.Settle < 0 {
		errs = append(errs, fmt.Errorf("keep.settle %s: must not be negative", c.Settle))
	}
	if c.For < time.Minute {
		errs = append(errs, fmt.Errorf("keep.for %s: must be at least 1m", c.For))
	}
	if c.MaxSize < 0 {
		errs = append(errs, fmt.Errorf("keep.max_size %d: must not be negative", c.MaxSize))
	}
	return errors.Join(errs...)
}

func defaultS3Config() S3Config {
	return S3Config{PutTimeout: 30 * time.Second, MaxBackoff: time.Minute}
}

// bucketName is S3's rule for new buckets: 3 to 63 lower-case letters,
// digits, dots and hyphens, starting and ending with a letter or digit.
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

func (c *S3Config) validate() error {
	var errs []error
	if c.Bucket == "" {
		errs = append(errs, errors.New("s3.bucket: must name the bucket"))
	} else if !bucketName.MatchString(c.Bucket) {
		errs = append(errs, fmt.Errorf("s3.bucket %q: must be 3 to 63 lower-case letters, digits, dots and hyphens, starting and ending with a letter or digit", c.Bucket))
	}
	if strings.HasPrefix(c.Prefix, "/") {
		errs = append(errs, fmt.Errorf("s3.prefix %q: must not start with a slash (keys are relative to the bucket)", c.Prefix))
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("s3.endpoint %q: must be an http:// or https:// URL with a host", c.Endpoint))
		}
	}
	if c.PutTimeout < time.Second {
		errs = append(errs, fmt.Errorf("s3.put_timeout %s: must be at least 1s", c.PutTimeout))
	}
	if c.MaxBackoff < time.Second {
		errs = append(errs, fmt.Errorf("s3.max_backoff %s: must be at least 1s", c.MaxBackoff))
	}
	return errors.Join(errs...)
}

func createDefaultConfig() *Config {
	return &Config{
		Directory:        "./traces",
		FilePrefix:       "trace",
		Format:           FormatTRC,
		MaxFileSize:      100 << 20,
		RotationInterval: 60 * time.Second,
		MaxTotalSize:     1 << 30,
		Compress:         true,
		FileMode:         0o600,
		TimeoutConfig:    exporterhelper.NewDefaultTimeoutConfig(),
		// Off by default: a failed write goes straight back to the
		// pipeline (the perfprof receiver counts what it could not
		// deliver) instead of holding the sender while the disk is full.
		QueueConfig:    configoptional.Default(exporterhelper.NewDefaultQueueConfig()),
		RetryConfig:    retryOff(),
		S3:             configoptional.Default(defaultS3Config()),
		Keep:           defaultKeepConfig(),
		SpanAttributes: []string{convention.HTTPRoute, "http.request.method", "http.response.status_code", "rpc.method"},
		Correlation: CorrelationConfig{
			ThreadIDAttribute: convention.ThreadID,
			WorkerIDAttribute: convention.WorkerID,
		},
	}
}

func retryOff() configretry.BackOffConfig {
	c := configretry.NewDefaultBackOffConfig()
	c.Enabled = false
	return c
}

// Validate checks the configuration at startup.
func (c *Config) Validate() error {
	var errs []error
	if c.Directory == "" {
		errs = append(errs, errors.New("directory must not be empty"))
	}
	if c.FilePrefix == "" || strings.ContainsAny(c.FilePrefix, `/\`) {
		errs = append(errs, fmt.Errorf("file_prefix %q must be a non-empty file name without slashes", c.FilePrefix))
	}
	if c.Format != FormatTRC && c.Format != FormatTokioTRC {
		errs = append(errs, fmt.Errorf("format %q: must be %q or %q", c.Format, FormatTRC, FormatTokioTRC))
	}
	if c.MaxFileSize < 0 {
		errs = append(errs, fmt.Errorf("max_file_size %d must not be negative", c.MaxFileSize))
	}
	if c.MaxTotalSize < 0 {
		errs = append(errs, fmt.Errorf("max_total_size %d must not be negative", c.MaxTotalSize))
	}
	if c.MaxFileSize > 0 && c.MaxTotalSize > 0 && c.MaxTotalSize < 2*c.MaxFileSize {
		errs = append(errs, fmt.Errorf("max_total_size (%s) must be at least twice max_file_size (%s), or retention deletes every sealed segment",
			c.MaxTotalSize, c.MaxFileSize))
	}
	if c.RotationInterval != 0 && c.RotationInterval < time.Second {
		errs = append(errs, fmt.Errorf("rotation_interval %s: must be 0 (off) or at least 1s", c.RotationInterval))
	}
	if c.FileMode&^0o777 != 0 {
		errs = append(errs, fmt.Errorf("file_mode %s: only permission bits (at most 0777) may be set", c.FileMode))
	} else if c.FileMode&0o600 != 0o600 {
		errs = append(errs, fmt.Errorf("file_mode %s: the owner must be able to read and write the segments (0600 at least)", c.FileMode))
	}
	if c.Correlation.ThreadIDAttribute == "" {
		errs = append(errs, errors.New("correlation.thread_id_attribute: must name a span attribute"))
	}
	if c.S3.HasValue() {
		if err := c.S3.Get().validate(); err != nil {
			errs = append(errs, err)
		}
	}
	seen := map[string]bool{}
	for _, a := range c.SpanAttributes {
		if a == "" || seen[a] {
			errs = append(errs, fmt.Errorf("span_attributes: %q is empty or given twice", a))
		}
		seen[a] = true
	}
	if len(c.SpanAttributes) > maxSpanAttrs {
		errs = append(errs, fmt.Errorf("span_attributes: %d names, at most %d", len(c.SpanAttributes), maxSpanAttrs))
	}
	if err := c.Keep.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ByteSize is a size in bytes that the configuration may also give as a
// string with a unit: "100MiB", "1GiB", "512KiB", "10MB", "1000".
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// UnmarshalText parses a size with an optional unit.
func (b *ByteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	mult := int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || (n > 0 && n > (1<<63-1)/mult) {
		return fmt.Errorf("invalid size %q: want a byte count such as 1048576, 100MiB or 1GiB", text)
	}
	*b = ByteSize(n * mult)
	return nil
}

// String formats b with the largest binary unit that divides it.
func (b ByteSize) String() string {
	for i := 3; i >= 0; i-- {
		u := byteUnits[i]
		if b != 0 && int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// FileMode is a file permission that the configuration gives as an octal
// string ("0640", "640", "0o640"), as chmod takes it, or as a YAML number
// (0640 and 0o640 are octal in YAML; a bare 640 is decimal, and refused).
type FileMode uint32

// UnmarshalText parses an octal mode.
func (m *FileMode) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	digits := strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
	n, err := strconv.ParseUint(digits, 8, 32)
	if err != nil || digits == "" {
		return fmt.Errorf("invalid file mode %q: want octal permission bits such as \"0600\" or \"0640\"", text)
	}
	*m = FileMode(n)
	return nil
}

// String formats m in octal, as "0640".
func (m FileMode) String() string { return fmt.Sprintf("%#04o", uint32(m)) }
