package vfs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// Op names a filesystem operation that FaultyFS can fail.
type Op uint8

// Operations checked by a FaultyFS rule.
const (
	OpOpen Op = iota + 1
	OpRead
	OpWrite
	OpSync
	OpTruncate
	OpClose
	OpRemove
	OpRename
	OpMkdir
	OpReadDir
	OpStat
	OpSyncDir
	// OpSyncFiles is a FilesSyncer's batch, named by its directory.
	OpSyncFiles
)

var opNames = [...]string{"", "open", "read", "write", "sync", "truncate", "close",
	"remove", "rename", "mkdir", "readdir", "stat", "syncdir", "syncfiles"}

func (o Op) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// ErrInjected is the error FaultyFS rules conventionally return.
var ErrInjected = errors.New("vfs: injected fault")

// Rule decides the fate of one operation: nil lets it through; any other
// error fails it without touching the wrapped FS, except a *TornWriteError
// returned for OpWrite, which writes a prefix first. name is the path the
// operation is on (for Rename, the old name).
type Rule func(op Op, name string) error

// TornWriteError, returned by a Rule for OpWrite, makes the write store its
// first Keep bytes and then fail with Err: a write cut short by a crash or a
// full disk.
type TornWriteError struct {
	Keep int
	Err  error
}

func (e *TornWriteError) Error() string {
	return fmt.Sprintf("torn write after %d bytes: %v", e.Keep, e.Err)
}

func (e *TornWriteError) Unwrap() error { return e.Err }

// Torn returns a *TornWriteError keeping keep bytes and failing with err
// (ErrInjected if nil).
func Torn(keep int, err error) error {
	if err == nil {
		err = ErrInjected
	}
	return &TornWriteError{Keep: keep, Err: err}
}

// FailOn returns a rule that fails op on every path containing substr with
// err (ErrInjected if nil).
func FailOn(op Op, substr string, err error) Rule {
	if err == nil {
		err = ErrInjected
	}
	return func(o Op, name string) error {
		if o == op && strings.Contains(name, substr) {
			return err
		}
		return nil
	}
}

// FaultyFS wraps an FS and consults a Rule before every operation. The rule
// can be replaced at any time (SetRule), so a test can run cleanly up to a
// point and then start failing.
type FaultyFS struct {
	inner FS
	mu    sync.Mutex
	rule  Rule
}

// NewFaulty wraps inner; a nil rule lets everything through.
func NewFaulty(inner FS, rule Rule) *FaultyFS {
	return &FaultyFS{inner: inner, rule: rule}
}

// SetRule replaces the rule; nil lets everything through.
func (f *FaultyFS) SetRule(rule Rule) {
	f.mu.Lock()
	f.rule = rule
	f.mu.Unlock()
}

func (f *FaultyFS) check(op Op, name string) error {
	f.mu.Lock()
	rule := f.rule
	f.mu.Unlock()
	if rule == nil {
		return nil
	}
	err := rule(op, name)
	if err == nil {
		return nil
	}
	var torn *TornWriteError
	if errors.As(err, &torn) {
		if op == OpWrite {
			return err // the caller writes the prefix
		}
		err = torn.Err
	}
	return &os.PathError{Op: op.String(), Path: name, Err: err}
}

// OpenFile consults OpOpen.
func (f *FaultyFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if err := f.check(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultyFile{fs: f, f: file, name: name}, nil
}

// Remove consults OpRemove.
func (f *FaultyFS) Remove(name string) error {
	if err := f.check(OpRemove, name); err != nil {
		return err
	}
	return f.inner.Remove(name)
}

// RemoveAll consults OpRemove.
func (f *FaultyFS) RemoveAll(name string) error {
	if err := f.check(OpRemove, name); err != nil {
		return err
	}
	return f.inner.RemoveAll(name)
}

// Rename consults OpRename with the old name.
func (f *FaultyFS) Rename(oldname, newname string) error {
	if err := f.check(OpRename, oldname); err != nil {
		return err
	}
	return f.inner.Rename(oldname, newname)
}

// MkdirAll consults OpMkdir.
func (f *FaultyFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := f.check(OpMkdir, dir); err != nil {
		return err
	}
	return f.inner.MkdirAll(dir, perm)
}

// ReadDir consults OpReadDir.
func (f *FaultyFS) ReadDir(dir string) ([]string, error) {
	if err := f.check(OpReadDir, dir); err != nil {
		return nil, err
	}
	return f.inner.ReadDir(dir)
}

// Stat consults OpStat.
func (f *FaultyFS) Stat(name string) (FileInfo, error) {
	if err := f.check(OpStat, name); err != nil {
		return FileInfo{}, err
	}
	return f.inner.Stat(name)
}

// SyncDir consults OpSyncDir.
func (f *FaultyFS) SyncDir(dir string) error {
	if err := f.check(OpSyncDir, dir); err != nil {
		return err
	}
	return f.inner.SyncDir(dir)
}

type faultyFile struct {
	fs   *FaultyFS
	f    File
	name string
}

// write runs a write through the rule: a torn write stores a prefix of p
// with do and then fails.
func (w *faultyFile) write(p []byte, do func([]byte) (int, error)) (int, error) {
	err := w.fs.check(OpWrite, w.name)
	if err == nil {
		return do(p)
	}
	var torn *TornWriteError
	if !errors.As(err, &torn) {
		return 0, err
	}
	keep := min(max(torn.Keep, 0), len(p))
	n, werr := do(p[:keep])
	if werr != nil {
		return n, werr
	}
	return n, &os.PathError{Op: "write", Path: w.name, Err: torn.Err}
}

func (w *faultyFile) Write(p []byte) (int, error) {
	return w.write(p, w.f.Write)
}

func (w *faultyFile) WriteAt(p []byte, off int64) (int, error) {
	return w.write(p, func(b []byte) (int, error) { return w.f.WriteAt(b, off) })
}

func (w *faultyFile) ReadAt(p []byte, off int64) (int, error) {
	if err := w.fs.check(OpRead, w.name); err != nil {
		return 0, err
	}
	return w.f.ReadAt(p, off)
}

func (w *faultyFile) Sync() error {
	if err := w.fs.check(OpSync, w.name); err != nil {
		return err
	}
	return w.f.Sync()
}

func (w *faultyFile) Truncate(size int64) error {
	if err := w.fs.check(OpTruncate, w.name); err != nil {
		return err
	}
	return w.f.Truncate(size)
}

func (w *faultyFile) Size() (int64, error) {
	if err := w.fs.check(OpStat, w.name); err != nil {
		return 0, err
	}
	return w.f.Size()
}

// Close always closes the wrapped file, so a failed Close leaks nothing.
func (w *faultyFile) Close() error {
	err := w.fs.check(OpClose, w.name)
	cerr := w.f.Close()
	if err != nil {
		return err
	}
	return cerr
}

func (w *faultyFile) Name() string { return w.name }
