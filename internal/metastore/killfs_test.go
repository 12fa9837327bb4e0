package metastore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/malachi-log/malachi/internal/vfs"
)

// errKilled is what every operation returns once the process is dead.
var errKilled = errors.New("killed")

// metaDir is where the MemFS tests keep the store; its parent is the root,
// which is always there.
const metaDir = "/meta"

// killedStore closes a store whose process was killed: its disk is gone,
// so the error says nothing.
func killedStore(s *Store) { _ = s.Close() }

// killFS runs a store on a MemFS until a simulated kill -9. Before each
// operation that changes the disk it asks kill whether the process dies
// there; if so it keeps a Clone of the live state as the crash image
// (unsynced bytes included, and still not durable in it) and fails that
// operation and every later one. The store answers an Apply only after a
// successful fsync, so nothing succeeds after the image is taken and
// everything acknowledged is in it.
//
// It also keeps the payload of every record written to a log before the
// kill, in write order: the order in which the store accepted commands.
type killFS struct {
	mem *vfs.MemFS

	mu      sync.Mutex
	kill    func(op, name string) bool // nil: never
	image   *vfs.MemFS                 // set at the kill
	written [][]byte
}

func newKillFS(mem *vfs.MemFS) *killFS { return &killFS{mem: mem} }

// arm sets when the process dies, counting from now.
func (k *killFS) arm(kill func(op, name string) bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kill = kill
}

// killNow kills the process if it still runs and returns the crash image.
func (k *killFS) killNow() *vfs.MemFS {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.image == nil {
		k.image = k.mem.Clone()
	}
	return k.image
}

func (k *killFS) crashImage() *vfs.MemFS {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.image
}

func (k *killFS) logged() [][]byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.written
}

// change runs fn, an operation that changes the disk, unless the process
// is dead or dies at it. The lock makes the image fall between operations.
func (k *killFS) change(op, name string, fn func() error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.image == nil && op != "" && k.kill != nil && k.kill(op, name) {
		k.image = k.mem.Clone()
	}
	if k.image != nil {
		return errKilled
	}
	return fn()
}

// read runs fn, which only reads, unless the process is dead.
func (k *killFS) read(fn func() error) error { return k.change("", "", fn) }

// nth returns a kill rule that dies at the n-th (from 1) operation op on a
// name whose base starts with prefix.
func nth(op, prefix string, n int) func(string, string) bool {
	return func(o, name string) bool {
		if o == op && strings.HasPrefix(filepath.Base(name), prefix) {
			n--
		}
		return n == 0
	}
}

// afterOps returns a kill rule that dies at the n-th (from 0) operation
// that changes the disk.
func afterOps(n int) func(string, string) bool {
	return func(string, string) bool {
		n--
		return n < 0
	}
}

func (k *killFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	var f vfs.File
	fn := func() (err error) {
		f, err = k.mem.OpenFile(name, flag, perm)
		return err
	}
	var err error
	if flag&(os.O_CREATE|os.O_TRUNC) != 0 {
		err = k.change("create", name, fn)
	} else {
		err = k.read(fn)
	}
	if err != nil {
		return nil, err
	}
	return &killFile{File: f, k: k}, nil
}

func (k *killFS) Remove(name string) error {
	return k.change("remove", name, func() error { return k.mem.Remove(name) })
}

func (k *killFS) RemoveAll(name string) error {
	return k.change("remove", name, func() error { return k.mem.RemoveAll(name) })
}

func (k *killFS) Rename(oldname, newname string) error {
	return k.change("rename", newname, func() error { return k.mem.Rename(oldname, newname) })
}

func (k *killFS) MkdirAll(dir string, perm os.FileMode) error {
	return k.change("mkdir", dir, func() error { return k.mem.MkdirAll(dir, perm) })
}

func (k *killFS) SyncDir(dir string) error {
	return k.change("syncdir", dir, func() error { return k.mem.SyncDir(dir) })
}

func (k *killFS) ReadDir(dir string) (names []string, err error) {
	err = k.read(func() (err error) {
		names, err = k.mem.ReadDir(dir)
		return err
	})
	return names, err
}

func (k *killFS) Stat(name string) (fi vfs.FileInfo, err error) {
	err = k.read(func() (err error) {
		fi, err = k.mem.Stat(name)
		return err
	})
	return fi, err
}

type killFile struct {
	vfs.File
	k *killFS
}

// WriteAt keeps the records of a log write: the committer writes each
// batch as whole records with one WriteAt.
func (f *killFile) WriteAt(p []byte, off int64) (n int, err error) {
	err = f.k.change("write", f.Name(), func() (err error) {
		n, err = f.File.WriteAt(p, off)
		if err == nil && strings.HasPrefix(filepath.Base(f.Name()), logPrefix) {
			payloads, _, _ := scanRecords(p)
			for _, pl := range payloads {
				f.k.written = append(f.k.written, append([]byte(nil), pl...))
			}
		}
		return err
	})
	return n, err
}

func (f *killFile) Write(p []byte) (n int, err error) {
	err = f.k.change("write", f.Name(), func() (err error) {
		n, err = f.File.Write(p)
		return err
	})
	return n, err
}

func (f *killFile) Sync() error {
	return f.k.change("sync", f.Name(), f.File.Sync)
}

func (f *killFile) Truncate(size int64) error {
	return f.k.change("truncate", f.Name(), func() error { return f.File.Truncate(size) })
}

func (f *killFile) ReadAt(p []byte, off int64) (n int, err error) {
	err = f.k.read(func() (err error) {
		n, err = f.File.ReadAt(p, off)
		return err
	})
	return n, err
}

func (f *killFile) Size() (size int64, err error) {
	err = f.k.read(func() (err error) {
		size, err = f.File.Size()
		return err
	})
	return size, err
}

func (f *killFile) Close() error { return f.k.read(f.File.Close) }
