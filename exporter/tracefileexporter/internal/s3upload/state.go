package s3upload

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The state file, .PREFIX.s3upload in the segments' directory, is a log of
// JSON lines: an intent ({"f","s","k"}: this segment goes to this key)
// written before each put, and a done record ({"f","s","done":true}) after
// it succeeded. A segment is named by its file name and size, so that a
// segment of the same number written later (the numbering starts again
// once delete_after_upload emptied the directory) is another one.
//
// After a crash between a put and its done record, the intent gives the
// same key again, and the put (If-None-Match: *) finds the object there:
// each segment is one object, whatever the restarts.
type record struct {
	File string `json:"f"`
	Size int64  `json:"s"`
	Key  string `json:"k,omitempty"`
	Done bool   `json:"done,omitempty"`
}

type segID struct {
	file string
	size int64
}

type state struct {
	path string
	f    *os.File
	keys map[segID]string // intents
	done map[segID]bool
}

// openState reads the log, keeps the records of the segments still in
// dir (compacting the file) and opens it for appending.
func openState(dir, prefix string, mode os.FileMode) (*state, error) {
	s := &state{path: filepath.Join(dir, "."+prefix+".s3upload"), keys: map[segID]string{}, done: map[segID]bool{}}
	f, err := os.Open(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("s3upload: state: %w", err)
	default:
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r record
			if json.Unmarshal(sc.Bytes(), &r) != nil {
				continue // a line cut by a crash
			}
			id := segID{r.File, r.Size}
			if r.Done {
				s.done[id] = true
			} else if r.Key != "" {
				s.keys[id] = r.Key
			}
		}
		f.Close()
	}
	// Compact: forget the segments no longer there.
	var keep []record
	for id, k := range s.keys {
		if present(dir, id) {
			keep = append(keep, record{File: id.file, Size: id.size, Key: k})
		} else {
			delete(s.keys, id)
		}
	}
	for id := range s.done {
		if present(dir, id) {
			keep = append(keep, record{File: id.file, Size: id.size, Done: true})
		} else {
			delete(s.done, id)
		}
	}
	tmp := s.path + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return nil, fmt.Errorf("s3upload: state: %w", err)
	}
	enc := json.NewEncoder(out)
	for _, r := range keep {
		if err = enc.Encode(r); err != nil {
			break
		}
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("s3upload: state: %w", err)
	}
	s.f, err = os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, mode)
	if err != nil {
		return nil, fmt.Errorf("s3upload: state: %w", err)
	}
	return s, nil
}

func present(dir string, id segID) bool {
	st, err := os.Stat(filepath.Join(dir, id.file))
	return err == nil && st.Size() == id.size
}

func (s *state) append(r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	// One write of a whole line: a crash keeps it or not, the page cache
	// keeps it through a SIGKILL.
	if _, err := s.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("s3upload: state: %w", err)
	}
	return nil
}

// intend records that id goes to key.
func (s *state) intend(id segID, key string) error {
	if s.keys[id] == key {
		return nil
	}
	if err := s.append(record{File: id.file, Size: id.size, Key: key}); err != nil {
		return err
	}
	s.keys[id] = key
	return nil
}

// uploaded records that id is in the bucket.
func (s *state) uploaded(id segID) error {
	s.done[id] = true
	delete(s.keys, id)
	return s.append(record{File: id.file, Size: id.size, Done: true})
}

// forget drops id (deleted from the directory).
func (s *state) forget(id segID) {
	delete(s.done, id)
	delete(s.keys, id)
}

func (s *state) close() error { return s.f.Close() }
