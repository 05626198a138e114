// Package sourcesum hashes the C sources of the eBPF programs, so that a
// test can tell, without clang, whether the committed objects were built
// from the sources as they are.
package sourcesum

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
)

// Dir returns the SHA-256, in hex, of the C sources and headers (.c, .h)
// directly in dir: each file's name, length and contents, in name order.
func Dir(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var names []string
	for _, e := range ents {
		if ext := filepath.Ext(e.Name()); e.Type().IsRegular() && (ext == ".c" || ext == ".h") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	h := sha256.New()
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", err
		}
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write(n[:])
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
