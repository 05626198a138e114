package segment

import (
	"os"
	"path/filepath"
)

// defaultFileMode keeps segments to their owner: they hold stacks, span
// names and attributes of the profiled programs.
const defaultFileMode os.FileMode = 0o600

// dirMode is the mode of the directories a Rotator creates: the file mode
// with x wherever it has r (0640 → 0750), so that who may read the
// segments may also list them.
func dirMode(m os.FileMode) os.FileMode { return m | (m&0o444)>>2 }

// createFile opens name with flag|O_CREATE and gives it mode exactly: the
// umask would take away bits the user asked for, and O_TRUNC keeps the
// mode of a file that exists. A file it cannot give the mode is removed.
func createFile(name string, flag int, mode os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(name, flag|os.O_CREATE, mode)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && fi.Mode().Perm() != mode {
		err = f.Chmod(mode)
	}
	if err != nil {
		f.Close()
		os.Remove(name)
		return nil, err
	}
	return f, nil
}

// mkdirAll is os.MkdirAll giving the directories it creates mode exactly,
// whatever the umask. Directories that exist keep their mode: the
// Rotator does not change what it did not make.
func mkdirAll(dir string, mode os.FileMode) error {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAll(parent, mode); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, mode); err != nil {
		if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
			return nil // made meanwhile by someone else
		}
		return err
	}
	return os.Chmod(dir, mode)
}

// syncFile is (*os.File).Sync. Sealing depends on the order of syncs,
// renames and removals, which nothing but a power cut shows; tests swap
// syncFile to see that order.
var syncFile = (*os.File).Sync

// syncDir makes the entries of dir durable: a rename or a new file is on
// disk only once its directory is synced, however synced the file is.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = syncFile(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncParent syncs the directory holding path.
func syncParent(path string) error { return syncDir(filepath.Dir(path)) }
