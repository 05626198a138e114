//go:build unix

package tracefileexporter

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFileMode: the exporter's segments, active, sealed and compressed, and
// the directory it creates have file_mode (0600 by default), x where r is
// for the directory.
func TestSegmentFileMode(t *testing.T) {
	for _, tt := range []struct {
		name           string
		mode           FileMode // 0: the default
		wantF, wantDir os.FileMode
	}{
		{"default", 0, 0o600, 0o700},
		{"0640", 0o640, 0o640, 0o750},
	} {
		for _, compress := range []bool{false, true} {
			dir := filepath.Join(t.TempDir(), "traces")
			e := newTestFile(t, dir, func(c *Config) {
				c.Compress = compress
				if tt.mode != 0 {
					c.FileMode = tt.mode
				}
			})
			b, tr, _ := buildTestData()
			require.NoError(t, e.pushProfiles(t.Context(), b.Profiles))
			require.NoError(t, e.pushTraces(t.Context(), tr))
			active, err := filepath.Glob(filepath.Join(dir, "*.bin.active"))
			require.NoError(t, err)
			require.Len(t, active, 1)
			mode := func(p string) os.FileMode {
				fi, err := os.Stat(p)
				require.NoError(t, err)
				return fi.Mode().Perm()
			}
			assert.Equal(t, tt.wantF, mode(active[0]), "%s: active segment", tt.name)
			require.NoError(t, e.shutdown(t.Context()))
			segs := segmentFiles(t, dir)
			require.Len(t, segs, 1)
			assert.Equal(t, tt.wantF, mode(segs[0]), "%s: %s", tt.name, filepath.Base(segs[0]))
			assert.Equal(t, tt.wantDir, mode(dir), "%s: directory", tt.name)
		}
	}
}
