package vfs

import (
	"os"
	"path/filepath"
)

// TempSuffix ends the names of files being written by WriteFileAtomic; a
// crash can leave them behind, and they are safe to remove.
const TempSuffix = ".tmp"

// WriteFileAtomic replaces name with data: it writes name+TempSuffix,
// fsyncs and closes it, and renames it over name, removing the temporary
// file when any step fails. The caller must SyncDir the directory to make
// the rename durable; until then a crash leaves the old file or none.
func WriteFileAtomic(fs FS, name string, data []byte) error {
	tmp := name + TempSuffix
	f, err := fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, FileMode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, name)
	}
	if err != nil {
		_ = fs.Remove(tmp) // best effort; whoever lists the directory removes leftovers too
	}
	return err
}

// EnsureDir creates dir if needed and fsyncs its parent every time, not
// only when it creates dir: a process killed between the two leaves a
// directory that exists but whose entry is not durable, and no later call
// would otherwise make it so.
func EnsureDir(fs FS, dir string) error {
	if err := fs.MkdirAll(dir, DirMode); err != nil {
		return err
	}
	return fs.SyncDir(filepath.Dir(filepath.Clean(dir)))
}
