package s3upload

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/perfprof/perfprof/internal/counter"
)

// noCondStore refuses If-None-Match as stores without conditional writes
// do, and keeps what it is given.
type noCondStore struct {
	mu   sync.Mutex
	objs map[string][]byte
}

func (s *noCondStore) PutObject(_ context.Context, in *s3.PutObjectInput, _ ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	if in.IfNoneMatch != nil {
		return nil, &smithy.GenericAPIError{Code: "NotImplemented", Message: "A header you provided implies functionality that is not implemented"}
	}
	b, err := io.ReadAll(in.Body)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objs[*in.Key] = b
	return &s3.PutObjectOutput{}, nil
}

// TestNoConditionalPut: a store that refuses If-None-Match gets plain
// puts, whole, without a failure counted.
func TestNoConditionalPut(t *testing.T) {
	dir := t.TempDir()
	writeSegments(t, dir, 2, 0)
	store := &noCondStore{objs: map[string][]byte{}}
	set := counter.NewSet()
	u, err := New(Options{Client: store, Bucket: bucket, Prefix: "company/date=archive/%25", Dir: dir, FilePrefix: "trace",
		GzipOnly: true, Counts: set, ScanInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "2 uploads", func() bool { return set.Load(CUploaded) == 2 })
	closeUploader(t, u)
	want := local(t, dir, 2, 0)
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.objs) != 2 {
		t.Fatalf("%d objects", len(store.objs))
	}
	for k, b := range want {
		if string(store.objs[k]) != string(b) {
			t.Errorf("%s: %d bytes, want %d", k, len(store.objs[k]), len(b))
		}
	}
	if f := set.Load(CFailed); f != 0 {
		t.Errorf("failed %d", f)
	}
}
