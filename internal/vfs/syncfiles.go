package vfs

import (
	"errors"
	"sync"
)

// FilesSyncer makes the written data of many files durable with as few
// calls as the filesystem allows. It is opened once per directory tree
// (NewFilesSyncer) and used by one goroutine at a time.
type FilesSyncer interface {
	// SyncFiles makes durable everything written to files before the
	// call, as a Sync of each would, and may make more durable besides
	// (other files of the same filesystem). It returns how many sync
	// calls it made. After an error nothing is known of any of the
	// files: the whole batch must be treated as a failed Sync.
	SyncFiles(files []File) (syncs int, err error)
	Close() error
}

// SyncfsMinFiles is the batch size from which the OS filesystem makes a
// batch durable with one syncfs(2) rather than an fdatasync per file:
// below it the per-file syncs cost less than flushing the whole
// filesystem may.
const SyncfsMinFiles = 32

// NewFilesSyncer returns a FilesSyncer for files under dir. Open it
// before the files it will sync are written: on Linux a filesystem sync
// reports the write-back errors that happened since the syncer was
// opened, not earlier ones. Filesystems with nothing better (MemFS)
// sync each file, the conservative model of a batch. With minFiles 0
// the OS filesystem uses SyncfsMinFiles; with minFiles < 0 it never
// syncs the whole filesystem.
func NewFilesSyncer(fs FS, dir string, minFiles int) (FilesSyncer, error) {
	if minFiles == 0 {
		minFiles = SyncfsMinFiles
	}
	if b, ok := fs.(batchSyncFS); ok {
		return b.newFilesSyncer(dir, minFiles)
	}
	return eachSyncer{}, nil
}

// batchSyncFS is a filesystem with a way to sync many files at once.
type batchSyncFS interface {
	newFilesSyncer(dir string, minFiles int) (FilesSyncer, error)
}

// PerFileSyncer returns a FilesSyncer that syncs every file on its own.
func PerFileSyncer() FilesSyncer { return eachSyncer{} }

// eachSyncer syncs every file on its own.
type eachSyncer struct{}

func (eachSyncer) SyncFiles(files []File) (int, error) { return SyncEach(files) }
func (eachSyncer) Close() error                        { return nil }

// syncParallel bounds the fdatasyncs SyncEach runs at once: enough for
// the filesystem to fold them into fewer journal commits.
const syncParallel = 16

// SyncEach syncs every file, several at a time, and returns how many it
// synced and every error.
func SyncEach(files []File) (int, error) {
	switch len(files) {
	case 0:
		return 0, nil
	case 1:
		return 1, files[0].Sync()
	}
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	sem := make(chan struct{}, syncParallel)
	for i, f := range files {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = f.Sync()
		}()
	}
	wg.Wait()
	return len(files), errors.Join(errs...)
}
