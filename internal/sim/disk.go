package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/cespare/xxhash/v2"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/replication"
	"github.com/malachi-log/malachi/internal/vfs"
)

// dir holds a node's copies: <segment>-<base>.log holds the copy's
// batches back to back, <segment>.seal the sealed end (8 bytes, written
// atomically once the log is cut and fsynced).
const dir = "/segments"

// copyFile is one node's copy of one segment.
type copyFile struct {
	id, base uint64
	f        vfs.File
	index    []batchPos // every batch in the file, in offset order
	end      uint64     // the end of everything written
	size     int64
	// syncedSize and syncedEnd are what the last fsync covered: the
	// durable prefix of the file.
	syncedSize int64
	syncedEnd  uint64
	dirty      bool
	sealed     bool
	sealEnd    uint64
	// fenced marks a durable fence record: the copy answered a failover's
	// fence and takes no more appends, across restarts too.
	fenced bool
	// failed marks a copy whose write or fsync failed: its unsynced tail
	// is gone and it takes no more appends in this life of the node.
	failed bool
	// damaged marks a copy a scrub or a read found bad: never served
	// again, kept until the list without it is recorded (S4). It is
	// found again after a restart by the next scrub.
	damaged bool
}

type batchPos struct {
	span     replication.Span
	pos, len int64
}

// disk is a node's store over a vfs.MemFS. Writes land in the file at
// once; an fsync is an event a seeded delay later that makes every dirty
// copy durable (group commit) and reports each copy's fsynced end.
type disk struct {
	fs     *vfs.MemFS
	copies map[uint64]*copyFile
	// full answers ENOSPC to every write that needs space; failSync
	// makes the next group commit's first fsync fail. Both are faults,
	// lost in a crash like the rest of the node's memory (a full disk is
	// set again by its fault).
	full, failSync bool
	// trustFailedSync is BugTrustFailedFsync.
	trustFailedSync bool
}

// errNoSpace is a write refused by a full disk.
var errNoSpace = fmt.Errorf("sim: %w", syscall.ENOSPC)

// errSyncFailed is an injected fsync failure.
var errSyncFailed = errors.New("sim: fsync: input/output error")

func newDisk(fs *vfs.MemFS) *disk { return &disk{fs: fs, copies: map[uint64]*copyFile{}} }

func logName(id, base uint64) string { return fmt.Sprintf("%s/%d-%d.log", dir, id, base) }
func sealName(id uint64) string      { return fmt.Sprintf("%s/%d.seal", dir, id) }
func fenceName(id uint64) string     { return fmt.Sprintf("%s/%d.fence", dir, id) }

// create makes an empty copy of segment id at base, durable (file and
// directory entry) before it is used.
func (d *disk) create(id, base uint64) (*copyFile, error) {
	if c := d.copies[id]; c != nil {
		return c, nil
	}
	if d.full {
		return nil, errNoSpace
	}
	if err := vfs.EnsureDir(d.fs, dir); err != nil {
		return nil, err
	}
	f, err := d.fs.OpenFile(logName(id, base), os.O_CREATE|os.O_RDWR, vfs.FileMode)
	if err != nil {
		return nil, err
	}
	if err := d.fs.SyncDir(dir); err != nil {
		return nil, err
	}
	c := &copyFile{id: id, base: base, f: f, end: base, syncedEnd: base}
	d.copies[id] = c
	return c, nil
}

// append writes one batch, whose CRC it checks (S1), at the copy's end.
func (d *disk) append(id uint64, b []byte) error {
	if err := batch.Verify(b); err != nil {
		return err
	}
	return d.write(id, b)
}

// write puts one batch at copy id's end without checking it: what
// append does after its check, and what BugRecordUnverified's fill does
// with whatever it was sent.
func (d *disk) write(id uint64, b []byte) error {
	c := d.copies[id]
	switch {
	case c == nil || c.sealed:
		return fmt.Errorf("sim: no open copy of segment %d", id)
	case c.failed:
		return fmt.Errorf("sim: the copy of segment %d failed", id)
	case d.full:
		return errNoSpace
	}
	h, err := batch.ParseHeader(b)
	if err != nil || h.Length > len(b) {
		return fmt.Errorf("sim: an unreadable batch header for segment %d: %v", id, err)
	}
	b = b[:h.Length]
	if h.BaseOffset != c.end {
		return fmt.Errorf("sim: batch at %d appended to a copy of %d ending at %d", h.BaseOffset, id, c.end)
	}
	if _, err := c.f.WriteAt(b, c.size); err != nil {
		return err
	}
	c.index = append(c.index, batchPos{span: replication.Span{Base: h.BaseOffset, End: h.LastOffset() + 1}, pos: c.size, len: int64(len(b))})
	c.size += int64(len(b))
	c.end = h.LastOffset() + 1
	c.dirty = true
	return nil
}

// synced is one copy's fsynced end after a group commit.
type synced struct{ id, end uint64 }

// syncAll fsyncs every dirty copy, in segment order. A failed fsync
// fails its copy (failCopy) and reports it in failed; the others go on.
func (d *disk) syncAll() (done []synced, failed []uint64, err error) {
	for _, id := range d.ids() {
		c := d.copies[id]
		if !c.dirty {
			continue
		}
		if d.failSync {
			d.failSync = false
			if d.trustFailedSync {
				// The bug: the kernel dropped the unsynced pages and the
				// node, not knowing, reports the end fsynced.
				if err := c.f.Truncate(c.syncedSize); err != nil {
					return done, failed, err
				}
				c.dirty = false
				done = append(done, synced{id, c.end})
				continue
			}
			if err := d.failCopy(id); err != nil {
				return done, failed, err
			}
			failed = append(failed, id)
			continue
		}
		if err := c.f.Sync(); err != nil {
			return done, failed, err
		}
		c.dirty, c.syncedSize, c.syncedEnd = false, c.size, c.end
		done = append(done, synced{id, c.end})
	}
	return done, failed, nil
}

// failCopy is what a store does when a write or an fsync of a copy
// failed: after a failed fsync the kernel may have dropped the unsynced
// pages, so nothing above the last good fsync is trusted. The copy is cut
// back to it and takes no more appends. Its fsynced prefix stays: a
// fence may still be answered with it.
func (d *disk) failCopy(id uint64) error {
	c := d.copies[id]
	if c == nil {
		return nil
	}
	i := len(c.index)
	for i > 0 && c.index[i-1].span.End > c.syncedEnd {
		i--
	}
	if err := c.f.Truncate(c.syncedSize); err != nil {
		return err
	}
	c.index, c.size, c.end = c.index[:i], c.syncedSize, c.syncedEnd
	c.dirty, c.failed = false, true
	return nil
}

// remove deletes copy id: its log, seal and fence records.
func (d *disk) remove(id uint64) error {
	c := d.copies[id]
	if c == nil {
		return nil
	}
	_ = c.f.Close()
	for _, name := range []string{logName(id, c.base), sealName(id), fenceName(id)} {
		if err := d.fs.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	delete(d.copies, id)
	return d.fs.SyncDir(dir)
}

// flip inverts one bit at pos of copy id's file, at rest: the medium
// rotted, the file's bookkeeping did not change.
func (d *disk) flip(id uint64, pos int64, bit uint) error {
	c := d.copies[id]
	b := make([]byte, 1)
	if _, err := c.f.ReadAt(b, pos); err != nil {
		return err
	}
	b[0] ^= 1 << bit
	if _, err := c.f.WriteAt(b, pos); err != nil {
		return err
	}
	return c.f.Sync()
}

// readChecked returns copy id's batches in [from, to), each checked as a
// node checks what it serves (S1): its CRC, and its place in the index.
// An error means the copy is damaged.
func (d *disk) readChecked(id, from, to uint64) ([]byte, error) {
	c := d.copies[id]
	if c == nil {
		return nil, fmt.Errorf("sim: no copy of %d", id)
	}
	var out []byte
	for _, bp := range c.index {
		if bp.span.Base < from || bp.span.End > to {
			continue
		}
		buf := make([]byte, bp.len)
		if _, err := c.f.ReadAt(buf, bp.pos); err != nil {
			return out, err
		}
		h, err := batch.ParseHeader(buf)
		if err == nil {
			err = batch.Verify(buf)
		}
		if err == nil && (h.BaseOffset != bp.span.Base || int64(h.Length) != bp.len) {
			err = fmt.Errorf("%w: batch at %d says it is at %d", batch.ErrCorrupt, bp.span.Base, h.BaseOffset)
		}
		if err != nil {
			return out, fmt.Errorf("copy of %d at %d: %w", id, bp.span.Base, err)
		}
		out = append(out, buf...)
	}
	return out, nil
}

// reader is heal.Reader over copy id: whole stored batches from the one
// holding from, verbatim (heal.Verify does the checking).
func (d *disk) reader(id uint64) func(from uint64, maxBytes int) ([]byte, error) {
	return func(from uint64, maxBytes int) ([]byte, error) {
		c := d.copies[id]
		if c == nil {
			return nil, fmt.Errorf("sim: no copy of %d", id)
		}
		var out []byte
		for _, bp := range c.index {
			if bp.span.End <= from {
				continue
			}
			if len(out) > 0 && len(out)+int(bp.len) > maxBytes {
				break
			}
			buf := make([]byte, bp.len)
			if _, err := c.f.ReadAt(buf, bp.pos); err != nil {
				return out, err
			}
			out = append(out, buf...)
		}
		return out, nil
	}
}

func (d *disk) ids() []uint64 {
	ids := make([]uint64, 0, len(d.copies))
	for id := range d.copies {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// read returns whole batches of copy id from offset from, below to, at
// most maxBytes of them (the first whole, whatever its size).
func (d *disk) read(id, from, to uint64, maxBytes int) []byte {
	c := d.copies[id]
	if c == nil {
		return nil
	}
	var out []byte
	for _, bp := range c.index {
		if bp.span.Base < from || bp.span.End > to {
			continue
		}
		if len(out) > 0 && len(out)+int(bp.len) > maxBytes {
			break
		}
		buf := make([]byte, bp.len)
		if _, err := c.f.ReadAt(buf, bp.pos); err != nil {
			return out
		}
		out = append(out, buf...)
	}
	return out
}

// batchAt returns the batch of copy id spanning sp, if it is durable.
func (d *disk) durableBatch(id uint64, sp replication.Span) ([]byte, bool) {
	c := d.copies[id]
	if c == nil || c.syncedEnd < sp.End {
		return nil, false
	}
	i, ok := slices.BinarySearchFunc(c.index, sp.Base, func(bp batchPos, off uint64) int {
		return int(int64(bp.span.Base) - int64(off))
	})
	if !ok || c.index[i].span != sp {
		return nil, false
	}
	buf := make([]byte, c.index[i].len)
	if _, err := c.f.ReadAt(buf, c.index[i].pos); err != nil {
		return nil, false
	}
	return buf, true
}

// content is the copy's bytes up to end.
func (d *disk) content(id, end uint64) ([]byte, error) {
	c := d.copies[id]
	if c == nil {
		return nil, fmt.Errorf("no copy of %d", id)
	}
	n := int64(0)
	for _, bp := range c.index {
		if bp.span.End > end {
			break
		}
		n = bp.pos + bp.len
	}
	buf := make([]byte, n)
	if _, err := c.f.ReadAt(buf, 0); err != nil && n > 0 {
		return nil, err
	}
	return buf, nil
}

// summary answers the records, bytes and content hash (xxhash64 of the
// batches, as heal.Verify computes it) of copy id below end.
func (d *disk) summary(id, end uint64) (records uint64, size int64, hash uint64, err error) {
	data, err := d.content(id, end)
	if err != nil {
		return 0, 0, 0, err
	}
	parts, err := batch.SplitBatches(data)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, b := range parts {
		h, _ := batch.ParseHeader(b)
		records += uint64(h.RecordCount)
	}
	return records, int64(len(data)), xxhash.Sum64(data), nil
}

// errNotBoundary is a cut that would split a batch.
var errNotBoundary = errors.New("sim: cut inside a batch")

// seal cuts copy id at end (which must be a batch boundary), fsyncs it
// and records the seal durably.
func (d *disk) seal(id, end uint64) error {
	c := d.copies[id]
	if c == nil {
		return fmt.Errorf("no copy of %d", id)
	}
	i := 0
	for i < len(c.index) && c.index[i].span.End <= end {
		i++
	}
	at := c.base
	size := int64(0)
	if i > 0 {
		at, size = c.index[i-1].span.End, c.index[i-1].pos+c.index[i-1].len
	}
	if at != end {
		return fmt.Errorf("%w: copy of %d at %d", errNotBoundary, id, end)
	}
	if err := c.f.Truncate(size); err != nil {
		return err
	}
	if err := c.f.Sync(); err != nil {
		return err
	}
	c.index, c.size, c.end = c.index[:i], size, end
	c.dirty, c.syncedSize, c.syncedEnd = false, size, end
	if d.full {
		return errNoSpace // the seal record needs a new file
	}
	if err := vfs.WriteFileAtomic(d.fs, sealName(id), binary.BigEndian.AppendUint64(nil, end)); err != nil {
		return err
	}
	if err := d.fs.SyncDir(dir); err != nil {
		return err
	}
	c.sealed, c.sealEnd = true, end
	return nil
}

// fence records durably that copy id answered a failover's fence.
func (d *disk) fence(id uint64) error {
	c := d.copies[id]
	if c == nil || c.fenced {
		return nil
	}
	if d.full {
		return errNoSpace
	}
	if err := vfs.WriteFileAtomic(d.fs, fenceName(id), nil); err != nil {
		return err
	}
	if err := d.fs.SyncDir(dir); err != nil {
		return err
	}
	c.fenced = true
	return nil
}

// recoverDisk opens a node's store after a restart: each copy is read
// back batch by batch, its CRCs checked (S1); a torn or unsynced tail of
// an unsealed copy is cut and what is left fsynced. Damage inside a
// sealed copy is reported, never cut.
func recoverDisk(fs *vfs.MemFS) (*disk, []error) {
	d := newDisk(fs)
	names, err := fs.ReadDir(dir)
	if err != nil {
		return d, nil // nothing was ever made durable
	}
	var errs []error
	for _, name := range names {
		var id, base uint64
		if !strings.HasSuffix(name, ".log") {
			continue
		}
		if _, err := fmt.Sscanf(name, "%d-%d.log", &id, &base); err != nil {
			continue
		}
		if err := d.load(id, base); err != nil {
			errs = append(errs, err)
		}
	}
	return d, errs
}

func (d *disk) load(id, base uint64) error {
	f, err := d.fs.OpenFile(logName(id, base), os.O_RDWR, vfs.FileMode)
	if err != nil {
		return err
	}
	data, err := vfs.ReadFile(d.fs, logName(id, base))
	if err != nil {
		return err
	}
	c := &copyFile{id: id, base: base, f: f, end: base}
	for pos := int64(0); pos < int64(len(data)); {
		b := data[pos:]
		h, err := batch.ParseHeader(b)
		if err != nil || len(b) < h.Length || batch.Verify(b) != nil || h.BaseOffset != c.end {
			break
		}
		c.index = append(c.index, batchPos{span: replication.Span{Base: h.BaseOffset, End: h.LastOffset() + 1}, pos: pos, len: int64(h.Length)})
		pos += int64(h.Length)
		c.size, c.end = pos, h.LastOffset()+1
	}
	if _, err := d.fs.Stat(fenceName(id)); err == nil {
		c.fenced = true
	}
	if seal, err := vfs.ReadFile(d.fs, sealName(id)); err == nil && len(seal) == 8 {
		c.sealed, c.sealEnd = true, binary.BigEndian.Uint64(seal)
		if c.end != c.sealEnd || c.size != int64(len(data)) {
			// Damage inside a sealed copy is kept, never cut, and the
			// copy is never served: a healthy one replaces it.
			c.damaged = true
			c.syncedSize, c.syncedEnd = c.size, c.end
			d.copies[id] = c
			return nil
		}
	}
	if c.size != int64(len(data)) {
		if err := f.Truncate(c.size); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	c.syncedSize, c.syncedEnd = c.size, c.end
	d.copies[id] = c
	return nil
}
