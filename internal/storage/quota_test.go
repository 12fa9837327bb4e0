package storage

import (
	"os"
	"sync"
	"syscall"

	"github.com/malachi-log/malachi/internal/vfs"
)

// quotaFS is a filesystem of limited capacity, counted in blocks of
// quotaBlock as a real one allocates them: a write past the last free
// block keeps what fits, up to a block boundary, and fails with ENOSPC;
// overwriting allocated blocks (a preallocated journal) needs none, and
// truncating or removing a file frees its blocks.
type quotaFS struct {
	vfs.FS
	mu    sync.Mutex
	size  map[string]int64 // files written through it
	limit int64            // capacity in blocks; < 0: none
}

const quotaBlock = 4096

func newQuotaFS(inner vfs.FS) *quotaFS {
	return &quotaFS{FS: inner, size: map[string]int64{}, limit: -1}
}

func blocks(n int64) int64 { return (n + quotaBlock - 1) / quotaBlock }

// fill leaves extra free blocks; extra < 0 lifts the limit.
func (q *quotaFS) fill(extra int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if extra < 0 {
		q.limit = -1
		return
	}
	q.limit = q.usedLocked() + extra
}

func (q *quotaFS) usedLocked() int64 {
	var n int64
	for _, sz := range q.size {
		n += blocks(sz)
	}
	return n
}

func (q *quotaFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := q.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	sz, _ := f.Size()
	q.mu.Lock()
	q.size[name] = sz
	q.mu.Unlock()
	return &quotaFile{File: f, q: q, name: name}, nil
}

func (q *quotaFS) Remove(name string) error {
	err := q.FS.Remove(name)
	if err == nil {
		q.mu.Lock()
		delete(q.size, name)
		q.mu.Unlock()
	}
	return err
}

func (q *quotaFS) Rename(oldname, newname string) error {
	err := q.FS.Rename(oldname, newname)
	if err == nil {
		q.mu.Lock()
		if sz, ok := q.size[oldname]; ok {
			q.size[newname] = sz
			delete(q.size, oldname)
		}
		q.mu.Unlock()
	}
	return err
}

type quotaFile struct {
	vfs.File
	q    *quotaFS
	name string
}

// room is how much of a write of n bytes at off fits.
func (f *quotaFile) room(off int64, n int) int {
	q := f.q
	q.mu.Lock()
	defer q.mu.Unlock()
	cur := q.size[f.name]
	end := off + int64(n)
	if q.limit < 0 || end <= cur || blocks(end) <= blocks(cur) {
		return n
	}
	free := q.limit - q.usedLocked()
	if blocks(end)-blocks(cur) <= free {
		return n
	}
	fit := (blocks(cur) + max(free, 0)) * quotaBlock
	return int(max(0, min(int64(n), fit-off)))
}

func (f *quotaFile) grew(end int64) {
	f.q.mu.Lock()
	if end > f.q.size[f.name] {
		f.q.size[f.name] = end
	}
	f.q.mu.Unlock()
}

func (f *quotaFile) WriteAt(p []byte, off int64) (int, error) {
	keep := f.room(off, len(p))
	n, err := f.File.WriteAt(p[:keep], off)
	f.grew(off + int64(n))
	if err == nil && keep < len(p) {
		err = &os.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
	}
	return n, err
}

func (f *quotaFile) Write(p []byte) (int, error) {
	off, err := f.File.Size()
	if err != nil {
		return 0, err
	}
	return f.WriteAt(p, off)
}

func (f *quotaFile) Truncate(size int64) error {
	err := f.File.Truncate(size)
	if err == nil {
		f.q.mu.Lock()
		f.q.size[f.name] = size
		f.q.mu.Unlock()
	}
	return err
}
