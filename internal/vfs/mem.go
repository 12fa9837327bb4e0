package vfs

import (
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
)

// MemFS is an in-memory FS that models what survives a power loss.
//
// Every file keeps two states: the content readers see now, and the content
// made durable by the last File.Sync. Writes and truncations since that Sync
// are kept as an ordered list of operations. Every directory likewise keeps
// its live entries and the entries made durable by the last SyncDir on it;
// creating, renaming or removing a file or directory changes only the live
// entries.
//
// PowerLoss returns a new MemFS holding only durable state, optionally with a
// torn tail: a random prefix of the unsynced operations of each file applied,
// the last of them possibly cut short or zero-filled. Clone returns a copy of the live state,
// which is what a process crash (kill -9) leaves behind: the kernel still has
// the unsynced data, which is still not durable in the clone either.
//
// MemFS is safe for concurrent use. Paths are slash-separated; relative paths
// are taken from the root.
type MemFS struct {
	mu   sync.Mutex
	root *memNode
}

// memNode is a file (an inode) or a directory.
type memNode struct {
	dir bool

	// Directory entries: live, and durable as of the last SyncDir.
	live, durable map[string]*memNode

	// File content: data is what reads see; synced is what survives a power
	// loss; ops are the changes since the last Sync, oldest first.
	data   []byte
	synced []byte
	ops    []memOp
}

// memOp is an unsynced write (data at off) or truncation (to size).
type memOp struct {
	trunc bool
	off   int64
	data  []byte
	size  int64
}

func newMemDir() *memNode {
	return &memNode{dir: true, live: map[string]*memNode{}, durable: map[string]*memNode{}}
}

// NewMem returns an empty MemFS holding only the root directory.
func NewMem() *MemFS { return &MemFS{root: newMemDir()} }

func memPathErr(op, name string, err error) error {
	return &os.PathError{Op: op, Path: name, Err: err}
}

// split cleans name into its parent directory path and base name.
func memSplit(name string) (dir, base string) {
	p := path.Clean("/" + name)
	return path.Dir(p), path.Base(p)
}

// lookupDir walks to the directory dir through live entries.
func (m *MemFS) lookupDir(dir string) (*memNode, bool) {
	n := m.root
	for _, part := range strings.Split(path.Clean("/"+dir), "/") {
		if part == "" {
			continue
		}
		child, ok := n.live[part]
		if !ok || !child.dir {
			return nil, false
		}
		n = child
	}
	return n, true
}

// lookup returns the node called name and its parent directory.
func (m *MemFS) lookup(name string) (parent, n *memNode, base string, ok bool) {
	dir, base := memSplit(name)
	if base == "/" {
		return nil, m.root, base, true
	}
	parent, ok = m.lookupDir(dir)
	if !ok {
		return nil, nil, base, false
	}
	n, ok = parent.live[base]
	return parent, n, base, ok
}

// OpenFile opens name. O_CREATE adds a live (not yet durable) entry.
func (m *MemFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	parent, n, base, ok := m.lookup(name)
	if parent == nil && !ok {
		return nil, memPathErr("open", name, os.ErrNotExist)
	}
	switch {
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, memPathErr("open", name, os.ErrExist)
	case ok && n.dir:
		return nil, memPathErr("open", name, errors.New("is a directory"))
	case !ok && flag&os.O_CREATE == 0:
		return nil, memPathErr("open", name, os.ErrNotExist)
	case !ok:
		n = &memNode{}
		parent.live[base] = n
	}
	f := &memFile{fs: m, n: n, name: name, flag: flag}
	if flag&os.O_TRUNC != 0 && f.writable() {
		m.truncate(n, 0)
	}
	return f, nil
}

// Remove removes a file or an empty directory (live entry only).
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	parent, n, base, ok := m.lookup(name)
	if !ok || parent == nil {
		return memPathErr("remove", name, os.ErrNotExist)
	}
	if n.dir && len(n.live) > 0 {
		return memPathErr("remove", name, errors.New("directory not empty"))
	}
	delete(parent.live, base)
	return nil
}

// RemoveAll removes name and everything below it; a missing name is not an error.
func (m *MemFS) RemoveAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	parent, _, base, ok := m.lookup(name)
	if ok && parent != nil {
		delete(parent.live, base)
	}
	return nil
}

// Rename moves a live entry, replacing any file at newname.
func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	op, n, ob, ok := m.lookup(oldname)
	if !ok || op == nil {
		return memPathErr("rename", oldname, os.ErrNotExist)
	}
	ndir, nb := memSplit(newname)
	np, ok := m.lookupDir(ndir)
	if !ok {
		return memPathErr("rename", newname, os.ErrNotExist)
	}
	if old, exists := np.live[nb]; exists && old.dir {
		return memPathErr("rename", newname, errors.New("is a directory"))
	}
	delete(op.live, ob)
	np.live[nb] = n
	return nil
}

// MkdirAll creates dir and missing parents as live entries.
func (m *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.root
	for _, part := range strings.Split(path.Clean("/"+dir), "/") {
		if part == "" {
			continue
		}
		child, ok := n.live[part]
		if !ok {
			child = newMemDir()
			n.live[part] = child
		} else if !child.dir {
			return memPathErr("mkdir", dir, errors.New("not a directory"))
		}
		n = child
	}
	return nil
}

// ReadDir lists the live entries of dir, sorted.
func (m *MemFS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.lookupDir(dir)
	if !ok {
		return nil, memPathErr("readdir", dir, os.ErrNotExist)
	}
	names := make([]string, 0, len(n.live))
	for name := range n.live {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// Stat reports the live size of a file, or that name is a directory.
func (m *MemFS) Stat(name string) (FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, n, _, ok := m.lookup(name)
	if !ok {
		return FileInfo{}, memPathErr("stat", name, os.ErrNotExist)
	}
	return FileInfo{Size: int64(len(n.data)), IsDir: n.dir}, nil
}

// SyncDir makes the live entries of dir durable.
func (m *MemFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.lookupDir(dir)
	if !ok {
		return memPathErr("syncdir", dir, os.ErrNotExist)
	}
	n.durable = make(map[string]*memNode, len(n.live))
	for k, v := range n.live {
		n.durable[k] = v
	}
	return nil
}

// PowerLoss returns a new MemFS holding what a power loss would leave: the
// durable directory entries and, for each file reachable through them, its
// synced content. With rng non-nil each file also keeps a random prefix of
// its unsynced operations, the last one possibly torn (a prefix of its
// bytes, the rest of its extent either missing or zero-filled). The
// receiver is unchanged.
func (m *MemFS) PowerLoss(rng *rand.Rand) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[*memNode]*memNode{}
	return &MemFS{root: cloneDurable(m.root, rng, seen)}
}

// CrashClone is PowerLoss without a torn tail: only synced state survives.
func (m *MemFS) CrashClone() *MemFS { return m.PowerLoss(nil) }

// Clone returns a deep copy of the live state, durability bookkeeping
// included: what a process crash leaves, with the kernel still holding the
// unsynced bytes.
func (m *MemFS) Clone() *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[*memNode]*memNode{}
	return &MemFS{root: cloneLive(m.root, seen)}
}

func cloneDurable(n *memNode, rng *rand.Rand, seen map[*memNode]*memNode) *memNode {
	if c, ok := seen[n]; ok {
		return c
	}
	if n.dir {
		c := newMemDir()
		seen[n] = c
		for k, v := range n.durable {
			child := cloneDurable(v, rng, seen)
			c.live[k], c.durable[k] = child, child
		}
		return c
	}
	content := append([]byte(nil), n.synced...)
	if rng != nil && len(n.ops) > 0 {
		content = applyTorn(content, n.ops, rng)
	}
	c := &memNode{data: content, synced: append([]byte(nil), content...)}
	seen[n] = c
	return c
}

// applyTorn applies a random prefix of ops to content and tears the first
// op left out: a random prefix of its bytes lands and, half the time, the
// rest of its extent reads as zeros — the file size reached the disk but
// the data blocks did not, as ext4 and XFS can leave after a power loss.
func applyTorn(content []byte, ops []memOp, rng *rand.Rand) []byte {
	k := rng.IntN(len(ops) + 1)
	for _, op := range ops[:k] {
		content = applyOp(content, op)
	}
	if k < len(ops) && !ops[k].trunc {
		op := ops[k]
		keep := rng.IntN(len(op.data) + 1)
		if rng.IntN(2) == 0 {
			op.data = op.data[:keep]
		} else {
			op.data = append(append([]byte(nil), op.data[:keep]...), make([]byte, len(op.data)-keep)...)
		}
		content = applyOp(content, op)
	}
	return content
}

func cloneLive(n *memNode, seen map[*memNode]*memNode) *memNode {
	if c, ok := seen[n]; ok {
		return c
	}
	if n.dir {
		c := newMemDir()
		seen[n] = c
		for k, v := range n.live {
			c.live[k] = cloneLive(v, seen)
		}
		for k, v := range n.durable {
			c.durable[k] = cloneLive(v, seen)
		}
		return c
	}
	c := &memNode{
		data:   append([]byte(nil), n.data...),
		synced: append([]byte(nil), n.synced...),
		ops:    append([]memOp(nil), n.ops...),
	}
	seen[n] = c
	return c
}

// applyOp returns content with op applied.
func applyOp(content []byte, op memOp) []byte {
	if op.trunc {
		return resize(content, op.size)
	}
	end := op.off + int64(len(op.data))
	if end > int64(len(content)) {
		content = resize(content, end)
	}
	copy(content[op.off:], op.data)
	return content
}

// resize grows (zero-filling) or shrinks b to size.
func resize(b []byte, size int64) []byte {
	if size <= int64(len(b)) {
		return b[:size]
	}
	if size <= int64(cap(b)) {
		old := len(b)
		b = b[:size]
		clear(b[old:])
		return b
	}
	return append(b, make([]byte, size-int64(len(b)))...)
}

func (m *MemFS) truncate(n *memNode, size int64) {
	n.data = resize(n.data, size)
	n.ops = append(n.ops, memOp{trunc: true, size: size})
}

// memFile is an open handle. It keeps pointing at its inode after the name
// is removed or renamed, as a POSIX descriptor does.
type memFile struct {
	fs     *MemFS
	n      *memNode
	name   string
	flag   int
	pos    int64
	closed bool
}

func (f *memFile) writable() bool {
	return f.flag&(os.O_WRONLY|os.O_RDWR) != 0
}

func (f *memFile) check(op string, write bool) error {
	if f.closed {
		return memPathErr(op, f.name, os.ErrClosed)
	}
	if write && !f.writable() {
		return memPathErr(op, f.name, errors.New("file not open for writing"))
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, memPathErr("read", f.name, errors.New("negative offset"))
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, memPathErr("write", f.name, errors.New("negative offset"))
	}
	f.writeLocked(p, off)
	return len(p), nil
}

func (f *memFile) writeLocked(p []byte, off int64) {
	op := memOp{off: off, data: append([]byte(nil), p...)}
	f.n.data = applyOp(f.n.data, op)
	f.n.ops = append(f.n.ops, op)
}

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	off := f.pos
	if f.flag&os.O_APPEND != 0 {
		off = int64(len(f.n.data))
	}
	f.writeLocked(p, off)
	f.pos = off + int64(len(p))
	return len(p), nil
}

// Sync replays the unsynced operations onto the durable content, so the
// durable content never shares memory with what readers see.
func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("sync", false); err != nil {
		return err
	}
	for _, op := range f.n.ops {
		f.n.synced = applyOp(f.n.synced, op)
	}
	f.n.ops = nil
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return memPathErr("truncate", f.name, errors.New("negative size"))
	}
	f.fs.truncate(f.n, size)
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("stat", false); err != nil {
		return 0, err
	}
	return int64(len(f.n.data)), nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return memPathErr("close", f.name, os.ErrClosed)
	}
	f.closed = true
	return nil
}

func (f *memFile) Name() string { return f.name }
