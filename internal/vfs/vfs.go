// Package vfs is the only door to the filesystem. Everything that touches disk
// goes through an FS so tests can swap the real disk for an in-memory one
// (MemFS) that models power loss, or for one that injects faults (FaultyFS).
//
// The contract every implementation keeps:
//   - Data written to a File is durable only after File.Sync returns nil,
//     or a FilesSyncer's SyncFiles over it (syncfiles.go).
//   - A file's existence (create, rename, remove) is durable only after
//     SyncDir on its directory returns nil.
//   - ReadAt past the end returns io.EOF with the bytes that exist.
package vfs

import (
	"errors"
	"io"
	"os"
)

// Modes of everything a node creates. The data directory holds the cluster
// secret (the cursor MAC key) and password hashes in the metadata log, and
// the records themselves in the segments, so nothing is open to group or
// others. Callers pass these; the OS filesystem also clears group and other
// bits from any mode it is given, so a forgotten call site cannot widen them.
const (
	FileMode os.FileMode = 0o600
	DirMode  os.FileMode = 0o700
)

// private clears the group and other bits of perm.
func private(perm os.FileMode) os.FileMode { return perm &^ 0o077 }

// ErrNotExist is returned (wrapped) when a file or directory is missing.
// Test with errors.Is(err, fs.ErrNotExist) as well: OS errors satisfy both.
var ErrNotExist = os.ErrNotExist

// ErrExist is returned (wrapped) when creating a file that already exists with O_EXCL.
var ErrExist = os.ErrExist

// File is an open file. Implementations are safe for concurrent ReadAt
// calls; writes must be serialised by the caller.
type File interface {
	io.ReaderAt
	io.WriterAt
	// Write appends at the file's current write position (the end, for files
	// opened with O_APPEND or freshly created).
	io.Writer
	// Sync makes all written data durable (fdatasync on Linux).
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Size returns the current size, including unsynced writes.
	Size() (int64, error)
	Close() error
	Name() string
}

// FS is a filesystem.
type FS interface {
	// OpenFile opens name with os.O_* flags (O_RDONLY, O_RDWR, O_CREATE,
	// O_EXCL, O_TRUNC, O_APPEND are honoured).
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Remove(name string) error
	RemoveAll(name string) error
	Rename(oldname, newname string) error
	MkdirAll(dir string, perm os.FileMode) error
	// ReadDir returns the names of a directory's entries, sorted.
	ReadDir(dir string) ([]string, error)
	// Stat returns a file's size and whether it is a directory.
	Stat(name string) (FileInfo, error)
	// SyncDir makes the directory's entries durable.
	SyncDir(dir string) error
}

// FileInfo is what Stat reports.
type FileInfo struct {
	Size  int64
	IsDir bool
}

// IsNotExist reports whether err says a file does not exist.
func IsNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }

// ReadFile reads the whole of file name.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	data := make([]byte, size)
	n, err := f.ReadAt(data, 0)
	if err != nil && !(errors.Is(err, io.EOF) && n == len(data)) {
		return nil, err
	}
	return data, nil
}
