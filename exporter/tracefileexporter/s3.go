package tracefileexporter

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.uber.org/zap"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/s3upload"
	"github.com/perfprof/perfprof/internal/segment"
)

// newS3Client makes the client of the s3 block: the SDK's default chain
// for credentials (and the region when none is given), the endpoint and
// addressing of the configuration, and the SDK's standard retryer without
// its retry quota, which a long outage would spend (after ~16 failed puts
// the SDK stops retrying a dropped connection): the uploader backs off
// itself between failed puts.
func newS3Client(ctx context.Context, c *S3Config) (*s3.Client, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if c.Region != "" {
		opts = append(opts, awsconfig.WithRegion(c.Region))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracefile: s3: load the AWS configuration: %w", err)
	}
	return s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = c.PathStyle
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) { so.RateLimiter = ratelimit.None })
	}), nil
}

// startUpload starts the uploader of the s3 block, if any. Called with mu
// held, after the rotator and counts are made.
func (e *traceFile) startUpload(ctx context.Context, rot *segment.Rotator) error {
	if !e.cfg.S3.HasValue() {
		return nil
	}
	c := e.cfg.S3.Get()
	client, err := newS3Client(ctx, c)
	if err != nil {
		return err
	}
	var logMu sync.Mutex
	var last time.Time
	u, err := s3upload.New(s3upload.Options{
		Client:            client,
		Bucket:            c.Bucket,
		Prefix:            c.Prefix,
		Dir:               e.cfg.Directory,
		FilePrefix:        e.cfg.FilePrefix,
		GzipOnly:          e.cfg.Compress,
		Service:           c.Service,
		Instance:          c.Instance,
		DefaultBoot:       bootID(),
		DeleteAfterUpload: c.DeleteAfterUpload,
		// Retention no longer counts a segment deleted once uploaded.
		OnDelete:   rot.Forget,
		FileMode:   os.FileMode(e.cfg.FileMode),
		Counts:     e.counts,
		PutTimeout: c.PutTimeout,
		MaxBackoff: c.MaxBackoff,
		OnError: func(err error) {
			logMu.Lock()
			defer logMu.Unlock()
			if time.Since(last) < errLogEvery {
				return
			}
			last = time.Now()
			e.logger.Warn("tracefile: S3 upload failed; the segments stay on disk and are uploaded later "+
				"(otelcol_exporter_tracefile_uploads{outcome=\"failed\"} counts the failures)",
				zap.Error(err), zap.String("bucket", c.Bucket))
		},
	})
	if err != nil {
		return fmt.Errorf("tracefile: %w", err)
	}
	e.upl = u
	return nil
}

// lastPassTimeout bounds the uploads at shutdown (the collector's
// shutdown context often has no deadline, and a backend that does not
// answer would hold it for put_timeout per segment).
const lastPassTimeout = 10 * time.Second

// stopUpload makes the uploader's last pass, bounded by ctx and
// lastPassTimeout, and stops it; what is left is uploaded after the next
// start.
func (e *traceFile) stopUpload(ctx context.Context) error {
	if e.upl == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, lastPassTimeout)
	defer cancel()
	err := e.upl.Close(ctx)
	e.upl = nil
	return err
}
