package segment

import (
	"os"
	"path/filepath"
)

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
