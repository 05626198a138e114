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

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/keep"
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
	// Segments kept around slow spans stay on disk while kept, and the
	// keeps' manifests follow their segments to the bucket.
	var held func(int) bool
	var manifests string
	if e.keeper != nil {
		held = e.keeper.Held
		manifests = keep.ManifestDir(e.cfg.Directory, e.cfg.FilePrefix)
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
		OnDelete:    rot.Forget,
		Held:        held,
		ManifestDir: manifests,
		FileMode:    os.FileMode(e.cfg.FileMode),
		Counts:      e.counts,
		PutTimeout:  c.PutTimeout,
		MaxBackoff:  c.MaxBackoff,
		OnError: func(err error) {
			logMu.Lock()
			defer logMu.Unlock()
			if time.Since(last) < errLogEvery {
				return
			}
			last = time.Now()
			if hint := s3upload.ConfigProblem(err); hint != "" {
				e.logger.Error("tracefile: S3 upload failed: "+hint+"; the segments stay on disk and are uploaded once it is fixed "+
					"(otelcol_exporter_tracefile_uploads{outcome=\"failed\"} counts the failures)",
					zap.Error(err), zap.String("bucket", c.Bucket))
				return
			}
			e.logger.Warn("tracefile: S3 upload failed; the segments stay on disk and are uploaded later "+
				"(otelcol_exporter_tracefile_uploads{outcome=\"failed\"} counts the failures)",
				zap.Error(err), zap.String("bucket", c.Bucket))
		},
	})
	if err != nil {
		return fmt.Errorf("tracefile: %w", err)
	}
	e.upl = u
	// A bucket that does not exist or credentials the store refuses are
	// mistakes of the configuration, not an outage: say so at start,
	// loudly, rather than only as failed uploads retried forever. The
	// segments stay on disk either way, and the collector runs.
	go checkBucket(client, c.Bucket, e.logger)
	return nil
}

// checkBucket asks the store for the bucket once, and logs an error when
// the answer says the configuration is wrong.
func checkBucket(client *s3.Client, bucket string, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)})
	if err == nil {
		return
	}
	if hint := s3upload.ConfigProblem(err); hint != "" {
		log.Error("tracefile: s3: "+hint+"; segments stay on disk (within max_total_size) and are uploaded once it is fixed",
			zap.String("bucket", bucket), zap.Error(err))
		return
	}
	log.Warn("tracefile: s3: cannot reach the bucket at start; uploads are retried", zap.String("bucket", bucket), zap.Error(err))
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
