// Package s3upload uploads the sealed segments of the tracefile exporter to
// S3 (or an S3-compatible store) under dial9's S3 layout v1, in the
// background: writing never waits for it. It finds what to upload by
// scanning the segments' directory, so a backend that is down leaves the
// segments pending on disk (as long as retention keeps them), and segments
// sealed by an earlier process are uploaded after a restart. The package
// does not import the collector.
package s3upload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/counter"
)

// The series of the uploads, named as the exporter's metadata.yaml names
// the metrics.
var (
	CUploaded      = counter.Define("exporter_tracefile_uploads", "outcome", "uploaded")
	CAlreadyThere  = counter.Define("exporter_tracefile_uploads", "outcome", "already_present")
	CFailed        = counter.Define("exporter_tracefile_uploads", "outcome", "failed")
	CLost          = counter.Define("exporter_tracefile_uploads", "outcome", "lost")
	CUploadedBytes = counter.Define("exporter_tracefile_uploaded_bytes")
	CPending       = counter.Define("exporter_tracefile_upload_pending")
	CManifests     = counter.Define("exporter_tracefile_uploaded_manifests")
)

// errNotReady is a segment still being compressed when its upload began.
var errNotReady = errors.New("s3upload: segment not ready")

// PutAPI is the part of *s3.Client the uploader uses.
type PutAPI interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, optFns ...func(*s3.Options)) (*s3.PutObjectOutput, error)
}

// Options configures an [Uploader].
type Options struct {
	Client PutAPI
	Bucket string
	// Prefix starts every key, verbatim ("" = none).
	Prefix string
	// Dir and FilePrefix are the rotator's: sealed segments are
	// Dir/FilePrefix.N.bin[.gz].
	Dir, FilePrefix string
	// GzipOnly uploads .bin.gz only (the rotator compresses its .bin).
	GzipOnly bool
	// Service and Instance name the segments in the keys. A segment's own
	// metadata wins where these are empty: service and host (the
	// instance); then Service "unknown", Instance the host name. Boot is
	// always the segment metadata's boot_id (the run that wrote it), and
	// DefaultBoot only for a segment whose metadata has none (written
	// before boot_id was).
	Service, Instance string
	DefaultBoot       string
	// DeleteAfterUpload deletes a segment once it is in the bucket, and
	// tells OnDelete its number (the rotator's retention forgets it).
	DeleteAfterUpload bool
	OnDelete          func(index int)
	// Held, if set, reports the segments kept around slow spans: they are
	// not deleted after upload until they are no longer held.
	Held func(index int) bool
	// ManifestDir, if set, holds the keeps' manifests (keep.ManifestDir):
	// each complete one is uploaded to {Prefix}/dumps/{dump_id}.json once
	// all its segments are in the bucket, their keys in its segments.
	ManifestDir string
	// FileMode is the state file's permission (0 = 0600).
	FileMode os.FileMode
	// Counts receives the counts (see the C… series); nil = not counted.
	Counts *counter.Set
	// ScanInterval is the time between two scans of Dir (default 1s);
	// Notify scans at once.
	ScanInterval time.Duration
	// PutTimeout bounds one put with the SDK's own attempts (default 30s,
	// plus a second per MiB).
	PutTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait after a failed put, which
	// doubles from MinBackoff (default 1s) to MaxBackoff (default 1min),
	// with jitter; a success resets it.
	MinBackoff, MaxBackoff time.Duration
	// OnError is told of failed puts and state errors (nil = ignored).
	OnError func(err error)
}

// Uploader uploads sealed segments in the background until Close.
type Uploader struct {
	opts   Options
	st     *state
	notify chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	final  chan context.Context
	mu     sync.Mutex // st, plainPut
	// deferred are segments uploaded while held (Options.Held), to
	// delete once let go.
	deferred map[segID]bool
	// settling are the manifests last read not complete, by their
	// modification time.
	settling map[segID]time.Time
	// plainPut: the store refused If-None-Match (501 NotImplemented, as
	// stores without conditional writes answer); puts go without it, and a
	// put again after a crash overwrites the object with the same bytes.
	plainPut bool
}

// New opens the state of Dir and starts uploading.
func New(opts Options) (*Uploader, error) {
	if opts.Client == nil || opts.Bucket == "" || opts.Dir == "" || opts.FilePrefix == "" {
		return nil, errors.New("s3upload: Client, Bucket, Dir and FilePrefix are required")
	}
	if opts.FileMode == 0 {
		opts.FileMode = 0o600
	}
	if opts.ScanInterval <= 0 {
		opts.ScanInterval = time.Second
	}
	if opts.PutTimeout <= 0 {
		opts.PutTimeout = 30 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = time.Second
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(time.Minute, opts.MinBackoff)
	}
	if opts.Counts == nil {
		opts.Counts = counter.NewSet()
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("s3upload: %w", err)
	}
	st, err := openState(opts.Dir, opts.FilePrefix, opts.FileMode)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	u := &Uploader{opts: opts, st: st, notify: make(chan struct{}, 1), cancel: cancel, deferred: map[segID]bool{}, settling: map[segID]time.Time{},
		done: make(chan struct{}), final: make(chan context.Context)}
	go u.run(ctx)
	return u, nil
}

// Notify asks for a scan now (a segment was sealed). It never blocks.
func (u *Uploader) Notify() {
	select {
	case u.notify <- struct{}{}:
	default:
	}
}

// Close makes a last pass over the pending segments, until ctx ends, then
// stops. What is left is uploaded after the next start.
func (u *Uploader) Close(ctx context.Context) error {
	select {
	case u.final <- ctx:
	case <-u.done:
	}
	select {
	case <-u.done:
	case <-ctx.Done():
		u.cancel()
		<-u.done
	}
	u.cancel()
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.st.close()
}

func (u *Uploader) run(ctx context.Context) {
	defer close(u.done)
	t := time.NewTimer(0)
	defer t.Stop()
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case fctx := <-u.final:
			// A last pass, bounded by the caller's context.
			pctx, cancel := context.WithCancel(ctx)
			stop := context.AfterFunc(fctx, cancel)
			u.pass(pctx)
			stop()
			cancel()
			return
		case <-u.notify:
			if backoff > 0 {
				continue // the timer is the backoff's
			}
		case <-t.C:
		}
		if u.pass(ctx) {
			backoff = 0
			t.Reset(u.opts.ScanInterval)
			continue
		}
		if backoff == 0 {
			backoff = u.opts.MinBackoff
		} else {
			backoff = min(2*backoff, u.opts.MaxBackoff)
		}
		// Jitter: 50% to 100% of the backoff.
		t.Reset(backoff/2 + rand.N(backoff/2+1))
	}
}

// pending lists the sealed segments not uploaded, oldest first.
func (u *Uploader) pending() ([]seg, error) {
	ents, err := os.ReadDir(u.opts.Dir)
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(ents))
	for _, e := range ents {
		names[e.Name()] = true
	}
	var out []seg
	for _, e := range ents {
		n, gz, ok := sealedIndex(e.Name(), u.opts.FilePrefix, u.opts.GzipOnly)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if gz && names[strings.TrimSuffix(e.Name(), ".gz")] {
			continue // being compressed: the .gz is not whole yet
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		id := segID{e.Name(), info.Size()}
		if u.st.done[id] {
			// Uploaded while held by a keep: deleted once let go. (One
			// uploaded before delete_after_upload was set stays.)
			if u.opts.DeleteAfterUpload {
				if u.held(n) {
					u.deferred[id] = true
				} else if u.deferred[id] {
					delete(u.deferred, id)
					u.remove(filepath.Join(u.opts.Dir, e.Name()), id, n)
				}
			}
			continue
		}
		out = append(out, seg{id: id, index: n, gz: gz})
	}
	slices.SortFunc(out, func(a, b seg) int { return a.index - b.index })
	return out, nil
}

type seg struct {
	id    segID
	index int
	gz    bool
}

// pass uploads what is pending; false after a failed put (back off).
func (u *Uploader) pass(ctx context.Context) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	segs, err := u.pending()
	if err != nil {
		u.report(fmt.Errorf("s3upload: scan %s: %w", u.opts.Dir, err))
		return false
	}
	u.opts.Counts.Store(CPending, int64(len(segs)))
	for i, s := range segs {
		if ctx.Err() != nil {
			return true
		}
		err := u.upload(ctx, s)
		switch {
		case errors.Is(err, errNotReady):
			// Seen again at the next scan.
		case errors.Is(err, fs.ErrNotExist):
			// Retention deleted it before its upload.
			u.st.forget(s.id)
			u.opts.Counts.Add(CLost, 1)
		case err != nil:
			u.opts.Counts.Add(CFailed, 1)
			u.report(err)
			return false
		}
		u.opts.Counts.Store(CPending, int64(len(segs)-i-1))
	}
	if err := u.manifests(ctx); err != nil {
		u.opts.Counts.Add(CFailed, 1)
		u.report(err)
		return false
	}
	return true
}

func (u *Uploader) report(err error) {
	if u.opts.OnError != nil {
		u.opts.OnError(err)
	}
}

// key names s: the intent recorded for it, or its header's.
func (u *Uploader) key(path string, s seg) (string, error) {
	if k, ok := u.st.keys[s.id]; ok {
		return k, nil
	}
	h, err := fileHeader(path)
	if err != nil {
		return "", err
	}
	pick := func(v ...string) string {
		for _, x := range v {
			if x != "" {
				return x
			}
		}
		return ""
	}
	host, _ := os.Hostname()
	return Key(KeyParts{
		Prefix:   u.opts.Prefix,
		Service:  pick(u.opts.Service, h.meta[convention.MetaService], "unknown"),
		Instance: pick(u.opts.Instance, h.meta[convention.MetaHost], host),
		Boot:     pick(h.meta[convention.MetaBootID], u.opts.DefaultBoot),
		Epoch:    h.epoch,
		Index:    s.index,
		Gzip:     s.gz,
	}), nil
}

func (u *Uploader) upload(ctx context.Context, s seg) error {
	path := filepath.Join(u.opts.Dir, s.id.file)
	key, err := u.key(path, s)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// The rotator removes the .bin once its .gz is whole and synced: with
	// the .bin gone, the size of the open .gz is final.
	if s.gz {
		if _, err := os.Stat(strings.TrimSuffix(path, ".gz")); err == nil {
			return errNotReady
		}
	}
	if st, err := f.Stat(); err != nil {
		return err
	} else if st.Size() != s.id.size {
		return errNotReady
	}
	if err := u.st.intend(s.id, key); err != nil {
		return err
	}
	ctype := "application/octet-stream"
	if s.gz {
		ctype = "application/gzip"
	}
	pctx, cancel := context.WithTimeout(ctx, u.opts.PutTimeout+time.Duration(s.id.size>>20)*time.Second)
	defer cancel()
	in := &s3.PutObjectInput{
		Bucket:        aws.String(u.opts.Bucket),
		Key:           aws.String(key),
		Body:          f,
		ContentLength: aws.Int64(s.id.size),
		ContentType:   aws.String(ctype),
		Metadata:      map[string]string{"segment-index": strconv.Itoa(s.index)},
	}
	if !u.plainPut {
		// Exactly once: a put of a key already there (after a crash
		// between the put and its done record) is refused.
		in.IfNoneMatch = aws.String("*")
	}
	_, err = u.opts.Client.PutObject(pctx, in)
	var ae smithy.APIError
	if in.IfNoneMatch != nil && errors.As(err, &ae) && ae.ErrorCode() == "NotImplemented" {
		u.plainPut = true
		u.report(fmt.Errorf("s3upload: the store does not take conditional puts (%w); putting without If-None-Match", err))
		if _, err = f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		in.IfNoneMatch = nil
		_, err = u.opts.Client.PutObject(pctx, in)
	}
	switch {
	case err == nil:
		u.opts.Counts.Add(CUploaded, 1)
		u.opts.Counts.Add(CUploadedBytes, s.id.size)
	case errors.As(err, &ae) && ae.ErrorCode() == "PreconditionFailed":
		u.opts.Counts.Add(CAlreadyThere, 1)
	default:
		return fmt.Errorf("s3upload: put %s to s3://%s/%s: %w", s.id.file, u.opts.Bucket, key, err)
	}
	if err := u.st.uploaded(s.id); err != nil {
		u.report(err)
	}
	if u.opts.DeleteAfterUpload {
		if u.held(s.index) {
			u.deferred[s.id] = true
		} else {
			u.remove(path, s.id, s.index)
		}
	}
	return nil
}

func (u *Uploader) held(index int) bool { return u.opts.Held != nil && u.opts.Held(index) }

// remove deletes an uploaded segment (delete_after_upload).
func (u *Uploader) remove(path string, id segID, index int) {
	if err := os.Remove(path); err == nil || errors.Is(err, fs.ErrNotExist) {
		u.st.forget(id)
		if u.opts.OnDelete != nil {
			u.opts.OnDelete(index)
		}
	} else {
		u.report(fmt.Errorf("s3upload: delete %s: %w", path, err))
	}
}

// ConfigProblem says what is wrong with the configuration when err is an
// answer of the store that no retry will change (the bucket does not
// exist, the credentials or the region are refused); "" for other errors
// (the store down or slow, a 5xx, throttling).
func ConfigProblem(err error) string {
	var ae smithy.APIError
	var re interface{ HTTPStatusCode() int }
	code, status := "", 0
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	switch {
	case code == "NoSuchBucket" || (code == "NotFound" && status == 404) || (code == "" && status == 404):
		return "the bucket does not exist"
	case code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" || code == "InvalidToken" || code == "ExpiredToken":
		return "the store refuses the credentials (" + code + ")"
	case code == "AccessDenied" || code == "Forbidden" || status == 403:
		return "access to the bucket is denied (credentials, bucket policy)"
	case code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" || status == 301:
		return "the bucket is in another region than s3.region (" + code + ")"
	case code == "InvalidBucketName":
		return "the store refuses the bucket name"
	}
	return ""
}
