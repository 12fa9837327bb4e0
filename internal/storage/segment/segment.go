package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cespare/xxhash/v2"
	"github.com/malachi-log/malachi/internal/vfs"
)

// Errors of segment operations.
var (
	// ErrOffsetRegression: a batch's base offset is below the segment's end.
	ErrOffsetRegression = errors.New("offset regression")
	// ErrSealed: the segment is sealed and takes no more appends.
	ErrSealed = errors.New("segment sealed")
	// ErrTornCreate: the .log file is too short to hold its file header,
	// which happens only when a crash interrupted Create; it holds no data.
	ErrTornCreate = errors.New("segment file header missing (interrupted create)")
)

// Log file header, little-endian, 32 bytes:
//
//	0  4  magic "MLOG"     16  8  base offset
//	4  2  version (1)      24  4  owner tag (0 = not recorded)
//	6  2  reserved (0)     28  4  CRC32C of bytes 0..27
//	8  8  segment id
//
// The owner tag names what the segment was created for (the broker stores a
// hash of the range id), so recovery can refuse a file whose id matches a
// metadata segment of another range instead of adopting its records. Files
// written before the tag existed carry 0 there, which checks nothing.
const (
	// FileHeaderSize is the size of the .log file header; batches follow it.
	FileHeaderSize = 32
	fileMagic      = "MLOG"
	fileVersion    = 1
)

func marshalFileHeader(id, base uint64, owner uint32) []byte {
	b := make([]byte, 0, FileHeaderSize)
	b = append(b, fileMagic...)
	b = binary.LittleEndian.AppendUint16(b, fileVersion)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint64(b, id)
	b = binary.LittleEndian.AppendUint64(b, base)
	b = binary.LittleEndian.AppendUint32(b, owner)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// fileHeader is a parsed .log file header.
type fileHeader struct {
	id, base uint64
	owner    uint32
}

func parseFileHeader(b []byte) (fileHeader, error) {
	le := binary.LittleEndian
	if len(b) < FileHeaderSize || string(b[:4]) != fileMagic || le.Uint16(b[4:]) != fileVersion ||
		crc32.Checksum(b[:28], castagnoli) != le.Uint32(b[28:]) {
		return fileHeader{}, corruptf("bad segment file header")
	}
	return fileHeader{id: le.Uint64(b[8:]), base: le.Uint64(b[16:]), owner: le.Uint32(b[24:])}, nil
}

// Options tune a Segment.
type Options struct {
	// IndexIntervalBytes is the sparse index spacing; default 4096.
	IndexIntervalBytes int
}

func (o Options) interval() int {
	if o.IndexIntervalBytes <= 0 {
		return 4096
	}
	return o.IndexIntervalBytes
}

// Stats summarise the batches of a segment.
type Stats struct {
	Base uint64
	// End is the offset after the last batch (Base when empty), or the
	// explicit end recorded at seal.
	End          uint64
	Bytes        int64 // batch bytes: the .log size minus FileHeaderSize
	Records      uint64
	MaxExpiry    int64 // 0 when empty or when some record never expires
	MaxTimestamp int64 // 0 when empty
}

// add accounts one more batch.
func (s *Stats) add(h BatchHeader) {
	if s.Records == 0 {
		s.MaxExpiry, s.MaxTimestamp = h.MaxExpiry, h.MaxTimestamp
	} else {
		if s.MaxExpiry != 0 && h.MaxExpiry != 0 {
			s.MaxExpiry = max(s.MaxExpiry, h.MaxExpiry)
		} else {
			s.MaxExpiry = 0
		}
		s.MaxTimestamp = max(s.MaxTimestamp, h.MaxTimestamp)
	}
	s.Records += uint64(h.RecordCount)
	s.Bytes += int64(h.Length)
	s.End = h.LastOffset() + 1
}

// Segment is one segment's .log file and its sparse index.
//
// One goroutine at a time may write (Append, Sync); any number may Read
// concurrently with it. Reads see only what the last successful Sync
// covered, so they never return bytes a crash could take back.
type Segment struct {
	f        vfs.File
	id, base uint64
	owner    uint32
	interval int

	// io is held shared by every read of the file and exclusively by
	// ApplyCut, so that no read runs into a cut while the file shrinks.
	io sync.RWMutex

	mu      sync.RWMutex // guards the fields below
	idx     Index
	written Stats // everything written, durable or not
	durable Stats // what the last successful Sync covered
	sealed  bool
	err     error  // sticky: after a failed write or sync nothing more is written
	cuts    uint64 // cuts applied since the file was opened (see Cut)

	// peeked is the header of the batch the last read stopped at for want
	// of room, at its position (ReadInto, BatchHeaderAt). A reader whose
	// next page may not have room for that batch asks for its header, and
	// this answers without a system call: durable bytes change only by a
	// cut, which clears it. One entry: readers of one segment take turns
	// at it, and a miss costs the read it saves.
	peeked atomic.Pointer[peekedHeader]

	// Owned by the writer.
	hash     *xxhash.Digest
	unhashed [][]byte // written batches the content hash has not seen yet
	buf      []byte
}

// peekedHeader is a batch header read at file position pos.
type peekedHeader struct {
	pos int64
	h   BatchHeader
}

func newSegment(f vfs.File, fh fileHeader, o Options) *Segment {
	id, base := fh.id, fh.base
	st := Stats{Base: base, End: base}
	return &Segment{f: f, id: id, base: base, owner: fh.owner, interval: o.interval(),
		idx: NewIndex(o.interval()), written: st, durable: st, hash: xxhash.New()}
}

// Create creates an empty segment file at path (which must not exist) and
// makes its header durable. The caller must SyncDir the directory before
// relying on the file's existence.
func Create(fs vfs.FS, path string, id, base uint64, o Options) (*Segment, error) {
	return CreateFor(fs, path, id, base, 0, o)
}

// CreateFor is Create with an owner tag recorded in the header (see the
// file header layout).
func CreateFor(fs vfs.FS, path string, id, base uint64, owner uint32, o Options) (*Segment, error) {
	return create(fs, path, id, base, owner, o, true)
}

// CreateUnsynced is CreateFor without the fsync: for a caller that makes
// the segment's creation durable another way (the store's node journal)
// and fsyncs the file later.
func CreateUnsynced(fs vfs.FS, path string, id, base uint64, owner uint32, o Options) (*Segment, error) {
	return create(fs, path, id, base, owner, o, false)
}

func create(fs vfs.FS, path string, id, base uint64, owner uint32, o Options, sync bool) (*Segment, error) {
	f, err := fs.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, vfs.FileMode)
	if err != nil {
		return nil, err
	}
	if _, err = f.WriteAt(marshalFileHeader(id, base, owner), 0); err == nil && sync {
		err = f.Sync()
	}
	if err != nil {
		_ = f.Close()
		_ = fs.Remove(path)
		return nil, err
	}
	return newSegment(f, fileHeader{id: id, base: base, owner: owner}, o), nil
}

// ID is the segment id from the file header.
func (s *Segment) ID() uint64 { return s.id }

// Base is the segment's base offset.
func (s *Segment) Base() uint64 { return s.base }

// Owner is the owner tag from the file header; 0 when none was recorded.
func (s *Segment) Owner() uint32 { return s.owner }

// Stats returns what has been written and what of it is durable.
func (s *Segment) Stats() (written, durable Stats) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.written, s.durable
}

// Err returns the sticky write or sync error, if any.
func (s *Segment) Err() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.err
}

// Append writes batches, in order, at the end of the file, without
// syncing. Each must be exactly one batch whose CRC the caller has
// verified; their base offsets must not go below the end
// (ErrOffsetRegression), so offsets only grow, with holes allowed. The
// batches must stay unmodified until the next Sync returns: Sync feeds
// them to the content hash while the disk works. After a failed write the
// segment refuses all further writes: the file's tail is then unknown
// until recovery rereads it. A write that found the disk full (ENOSPC,
// EDQUOT) is the exception: its torn bytes are cut off, the cut fsynced,
// and the segment takes writes again from where it ended, or fails as any
// other if the cut or its fsync fails.
func (s *Segment) Append(batches ...[]byte) error {
	s.mu.RLock()
	end, pos, sealed, err := s.written.End, FileHeaderSize+s.written.Bytes, s.sealed, s.err
	s.mu.RUnlock()
	switch {
	case err != nil:
		return err
	case sealed:
		return ErrSealed
	}
	hdrs := make([]BatchHeader, len(batches))
	for i, b := range batches {
		h, err := ParseHeader(b)
		if err != nil {
			return err
		}
		if h.Length != len(b) {
			return fmt.Errorf("%w: %d bytes given for a batch of %d", ErrInvalid, len(b), h.Length)
		}
		if h.BaseOffset < end {
			return fmt.Errorf("%w: batch base %d below end %d", ErrOffsetRegression, h.BaseOffset, end)
		}
		end, hdrs[i] = h.LastOffset()+1, h
	}
	if err := s.write(batches, pos); err != nil {
		if noSpace(err) {
			if cerr := s.cutTorn(pos); cerr != nil {
				err = fmt.Errorf("%w; cutting the torn bytes off failed: %w", err, cerr)
				s.fail(err)
			}
			return err
		}
		s.fail(err)
		return err
	}
	s.unhashed = append(s.unhashed, batches...)
	s.mu.Lock()
	for _, h := range hdrs {
		s.idx.Add(h, pos)
		s.written.add(h)
		pos += int64(h.Length)
	}
	s.mu.Unlock()
	return nil
}

// cutTorn cuts off, at pos, what a write that found the disk full left
// past the end, and makes the cut durable. Out of space is not a broken
// file: the file ends where it did and the same batches may be written
// again there once space returns. The fsync matters: the torn bytes may
// hold whole batches the caller refuses as never written, and a crash
// that undid an unsynced cut would bring them back.
func (s *Segment) cutTorn(pos int64) error {
	if err := s.f.Truncate(pos); err != nil {
		return err
	}
	return s.f.Sync()
}

// directWrite is the batch size from which a batch is written from the
// caller's memory rather than copied into the gather buffer: above it the
// copy costs more than the extra system call.
const directWrite = 64 << 10

// write writes batches contiguously from pos. Runs of small batches are
// gathered into one buffer so one system call covers them.
func (s *Segment) write(batches [][]byte, pos int64) error {
	buf := s.buf[:0]
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		_, err := s.f.WriteAt(buf, pos)
		pos += int64(len(buf))
		buf = buf[:0]
		return err
	}
	for _, b := range batches {
		if len(b) < directWrite && len(batches) > 1 {
			buf = append(buf, b...)
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		if _, err := s.f.WriteAt(b, pos); err != nil {
			return err
		}
		pos += int64(len(b))
	}
	err := flush()
	if cap(buf) <= 4<<20 {
		s.buf = buf[:0] // reuse, but do not pin huge buffers
	}
	return err
}

// noSpace reports an error of a filesystem out of space or quota.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func (s *Segment) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// Sync makes everything written durable (fdatasync) and only then lets
// readers see it.
func (s *Segment) Sync() error {
	s.mu.RLock()
	w, d, err := s.written, s.durable, s.err
	s.mu.RUnlock()
	if err != nil {
		return err
	}
	if w == d {
		return nil
	}
	if err := s.syncAndHash(); err != nil {
		// After a failed fsync the kernel may have dropped the dirty
		// pages; nothing written since the last good sync can be trusted.
		s.fail(err)
		return err
	}
	s.mu.Lock()
	s.durable = w
	s.mu.Unlock()
	return nil
}

// WriteEnd is the file position the next appended batch will be written at.
func (s *Segment) WriteEnd() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return FileHeaderSize + s.written.Bytes
}

// Publish lets readers see everything written, as Sync does, but without
// syncing the file: the caller has made the same bytes durable elsewhere
// (the store's node journal) and syncs the file later with SyncFile. It
// brings the content hash up to date.
func (s *Segment) Publish() error {
	s.mu.RLock()
	w, err := s.written, s.err
	s.mu.RUnlock()
	if err != nil {
		return err
	}
	s.hashWritten()
	s.mu.Lock()
	s.durable = w
	s.mu.Unlock()
	return nil
}

// SyncFile fdatasyncs the file. Unlike Sync it changes nothing readers
// see, so it may run beside the writer: it makes durable at least what was
// written before it was called. A failure is sticky, as for Sync.
func (s *Segment) SyncFile() error {
	if err := s.Err(); err != nil {
		return err
	}
	if err := s.f.Sync(); err != nil {
		s.fail(err)
		return err
	}
	return nil
}

// SyncFiles is SyncFile for many segments with one call of syncer, which
// may make them all durable with one filesystem sync. Like SyncFile it
// changes nothing readers see (Publish did). After a failure no segment
// of the batch is known to be durable, so the failure is sticky for
// every one of them. It returns the sync calls made.
func SyncFiles(syncer vfs.FilesSyncer, segs []*Segment) (int, error) {
	files := make([]vfs.File, 0, len(segs))
	for _, s := range segs {
		if err := s.Err(); err != nil {
			return 0, err
		}
		files = append(files, s.f)
	}
	n, err := syncer.SyncFiles(files)
	if err != nil {
		for _, s := range segs {
			s.fail(err)
		}
	}
	return n, err
}

// overlapHash is the amount of unhashed data from which hashing runs
// beside the fsync rather than before it; below it, handing the fsync to
// another goroutine costs more than the hash.
const overlapHash = 256 << 10

// syncAndHash fdatasyncs the file and brings the content hash up to date,
// the two side by side when there is enough to hash.
func (s *Segment) syncAndHash() error {
	n := 0
	for _, b := range s.unhashed {
		n += len(b)
	}
	var errc chan error
	if n >= overlapHash {
		errc = make(chan error, 1)
		go func() { errc <- s.f.Sync() }()
	}
	s.hashWritten()
	if errc != nil {
		return <-errc
	}
	return s.f.Sync()
}

// hashWritten feeds the batches written since the last call to the
// content hash. Writer only.
func (s *Segment) hashWritten() {
	for _, b := range s.unhashed {
		_, _ = s.hash.Write(b)
	}
	clear(s.unhashed) // do not keep callers' buffers alive
	s.unhashed = s.unhashed[:0]
}

// Footer computes the seal footer with end offset end, which must be at
// least the durable end. Everything written must be durable.
func (s *Segment) Footer(end uint64, gen uint32) (Footer, error) {
	s.mu.RLock()
	w, d, err := s.written, s.durable, s.err
	s.mu.RUnlock()
	switch {
	case err != nil:
		return Footer{}, err
	case w != d:
		return Footer{}, fmt.Errorf("segment %d: unsynced data at seal", s.id)
	case end < d.End:
		return Footer{}, fmt.Errorf("%w: seal end %d below segment end %d", ErrOffsetRegression, end, d.End)
	}
	return Footer{Base: s.base, End: end, Records: d.Records, Bytes: d.Bytes,
		ContentHash: s.hash.Sum64(), MaxExpiry: d.MaxExpiry, MaxTimestamp: d.MaxTimestamp,
		Generation: gen}, nil
}

// MarkSealed refuses further appends and records end as the segment's
// end. The caller has written the footer.
func (s *Segment) MarkSealed(end uint64) {
	s.mu.Lock()
	s.sealed = true
	s.written.End, s.durable.End = end, end
	s.mu.Unlock()
}

// WriteIndex persists the sparse index at path atomically; the caller must
// SyncDir. A missing or bad index file only costs a rebuild at open.
func (s *Segment) WriteIndex(fs vfs.FS, path string) error {
	s.mu.RLock()
	b, _ := s.idx.MarshalBinary()
	s.mu.RUnlock()
	return WriteFileAtomic(fs, path, b)
}

// IndexEntries returns a copy of the sparse index.
func (s *Segment) IndexEntries() []IndexEntry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]IndexEntry(nil), s.idx.entries...)
}

// Close closes the file.
func (s *Segment) Close() error { return s.f.Close() }
