package s3upload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/keep"
)

// maxSettling bounds the manifests remembered as not complete.
const maxSettling = 1 << 14

// DumpKey returns the key of a keep's manifest: dial9's dump manifest key,
// {prefix}/dumps/{dump_id}.json.
func DumpKey(prefix, dumpID string) string {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return prefix + "dumps/" + dumpID + ".json"
}

// manifests uploads the complete manifests whose segments are all in the
// bucket, with the segments' keys, and records each in the state (as a
// file of the directory, PREFIX.kept/ID.json): the manifest's presence
// says its segments are there, as dial9's dump manifests do. A manifest
// whose segments are not all uploaded waits for the next pass. Called with
// mu held.
func (u *Uploader) manifests(ctx context.Context) error {
	if u.opts.ManifestDir == "" {
		return nil
	}
	ents, err := os.ReadDir(u.opts.ManifestDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("s3upload: manifests: %w", err)
	}
	sub := filepath.Base(u.opts.ManifestDir)
	for _, e := range ents {
		if ctx.Err() != nil {
			return nil
		}
		if !strings.HasSuffix(e.Name(), ".json") || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		id := segID{filepath.Join(sub, e.Name()), info.Size()}
		if u.st.done[id] {
			continue
		}
		// A manifest read while settling is read again once it changed:
		// not every one of thousands of keeps every second.
		if t, ok := u.settling[id]; ok && t.Equal(info.ModTime()) {
			continue
		}
		m, err := keep.ReadManifest(filepath.Join(u.opts.ManifestDir, e.Name()))
		if err != nil || !m.Complete {
			if len(u.settling) >= maxSettling {
				clear(u.settling)
			}
			u.settling[id] = info.ModTime()
			continue // being written, or not settled
		}
		delete(u.settling, id)
		keys, ready := u.segmentKeys(m.Files)
		if !ready {
			continue
		}
		m.Segments = keys
		body, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			return err
		}
		key := DumpKey(u.opts.Prefix, m.DumpID)
		pctx, cancel := context.WithTimeout(ctx, u.opts.PutTimeout)
		_, err = u.opts.Client.PutObject(pctx, &s3.PutObjectInput{
			Bucket:        aws.String(u.opts.Bucket),
			Key:           aws.String(key),
			Body:          bytes.NewReader(body),
			ContentLength: aws.Int64(int64(len(body))),
			ContentType:   aws.String("application/json"),
		})
		cancel()
		if err != nil {
			return fmt.Errorf("s3upload: put manifest %s to s3://%s/%s: %w", e.Name(), u.opts.Bucket, key, err)
		}
		u.opts.Counts.Add(CManifests, 1)
		if err := u.st.uploaded(id); err != nil {
			u.report(err)
		}
	}
	return nil
}

// segmentKeys returns the keys of the segment files, and false while one
// of them is not in the bucket yet. A file gone from the directory (lost
// before its upload) is left out.
func (u *Uploader) segmentKeys(files []string) ([]string, bool) {
	keys := make([]string, 0, len(files))
	for _, f := range files {
		path := filepath.Join(u.opts.Dir, f)
		st, err := os.Stat(path)
		if err != nil {
			continue
		}
		id := segID{f, st.Size()}
		n, gz, ok := sealedIndex(f, u.opts.FilePrefix, u.opts.GzipOnly)
		if !ok || !u.st.done[id] {
			return nil, false
		}
		k, err := u.key(path, seg{id: id, index: n, gz: gz})
		if err != nil {
			return nil, false
		}
		keys = append(keys, k)
	}
	return keys, true
}
