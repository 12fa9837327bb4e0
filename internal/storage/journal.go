package storage

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/malachi-log/malachi/internal/slab"
	"github.com/malachi-log/malachi/internal/vfs"
)

// The node journal: one append-only file sequence per store that makes
// every group-commit round durable with a single fdatasync, however many
// segment files the round touched. The segment files are written in the
// same round, published to readers once the journal's fsync returns, and
// fsynced later, a whole journal file's worth at a time (a checkpoint),
// after which that journal file is deleted. Recovery replays what is left.
// docs/storage-format.md has the bytes.
//
// File (journal/<seq:020d>.jnl), little-endian:
//
//	header, 40 bytes:  "MJNL" | version u16 | 0 u16 | file seq u64 |
//	                   first round seq u64 | salt u64 | 0 u32 |
//	                   CRC32C of bytes 0..35
//	rounds:            "MJRD" | salt u64 | round seq u64 | body length u32 |
//	                   body CRC32C u32 | CRC32C of the round header's bytes 0..27
//	body:              records, each kind u8 | segment id u64 |
//	                   file position u64 | length u32 | batch (length bytes);
//	                   a create record's position is the base offset and its
//	                   4 bytes the owner tag; a cut record's position is the
//	                   file size after the cut and its 8 bytes the end offset
//
// Round sequence numbers run on across files without a gap. A round is
// written with one write, and the next round only after its fdatasync
// returned, so only the last round of the last file can be torn.
//
// Journal files are recycled: a checkpointed file becomes the spare
// (spare-<seq>.jnl) that the next file is made from, so rounds overwrite
// blocks the file already has and an fdatasync flushes data only, not the
// file's size and block map (on ext4 several times cheaper than appending
// to a growing file). A recycled file keeps its old rounds past the new
// ones; the salt, new for every file, tells them apart: a file's rounds
// end at the first round that does not carry its salt and the next number.
const (
	journalDir       = "journal"
	journalExt       = ".jnl"
	journalMagic     = "MJNL"
	journalVersion   = 1
	journalHeaderLen = 40
	roundMagic       = "MJRD"
	roundHeaderLen   = 32
	recordHeaderLen  = 21
	spareName        = "spare-"

	recBatch  = 1 // a batch appended to a segment at a file position
	recTomb   = 2 // the segment was deleted: its earlier records are void
	recCreate = 3 // the segment was created: position = base, owner u32
	recCut    = 4 // the segment was cut back: position = file size, end u64
)

// DefaultJournalFileBytes is the size from which the journal moves to a new
// file and checkpoints the old one.
const DefaultJournalFileBytes = 64 << 20

var (
	errJournalTorn = errors.New("torn journal round")
	castagnoli     = crc32.MakeTable(crc32.Castagnoli)
)

func journalName(seq uint64) string { return fmt.Sprintf("%020d%s", seq, journalExt) }

// parseJournalName returns the sequence number of a journal file name.
func parseJournalName(name string) (uint64, bool) {
	stem, ok := strings.CutSuffix(name, journalExt)
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(stem, 10, 64)
	if err != nil || journalName(seq) != name {
		return 0, false
	}
	return seq, true
}

func marshalJournalHeader(seq, firstRound, salt uint64) []byte {
	b := make([]byte, 0, journalHeaderLen)
	b = append(b, journalMagic...)
	b = binary.LittleEndian.AppendUint16(b, journalVersion)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint64(b, seq)
	b = binary.LittleEndian.AppendUint64(b, firstRound)
	b = binary.LittleEndian.AppendUint64(b, salt)
	b = binary.LittleEndian.AppendUint32(b, 0)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// jheader is a parsed journal file header.
type jheader struct{ seq, firstRound, salt uint64 }

func parseJournalHeader(b []byte) (jheader, error) {
	le := binary.LittleEndian
	if len(b) < journalHeaderLen || string(b[:4]) != journalMagic || le.Uint16(b[4:]) != journalVersion ||
		crc32.Checksum(b[:36], castagnoli) != le.Uint32(b[36:]) {
		return jheader{}, fmt.Errorf("%w: bad journal file header", ErrCorrupt)
	}
	return jheader{seq: le.Uint64(b[8:]), firstRound: le.Uint64(b[16:]), salt: le.Uint64(b[24:])}, nil
}

// appendRecordHeader appends one record's header; a batch record's bytes
// follow it.
func appendRecordHeader(b []byte, kind byte, id SegmentID, pos int64, n int) []byte {
	b = append(b, kind)
	b = binary.LittleEndian.AppendUint64(b, uint64(id))
	b = binary.LittleEndian.AppendUint64(b, uint64(pos))
	return binary.LittleEndian.AppendUint32(b, uint32(n))
}

// maxKeptRound is the largest round buffer kept for the next round. At
// 1,024 ranges, rounds of 4-16 MiB are common (a round's segment writes
// take long, so the next round gathers more); reallocated for each, such
// a round cost a fifth of the node's time in copies and page clearing.
const maxKeptRound = 32 << 20

// sealRound fills in the round header reserved at the start of b.
func sealRound(b []byte, salt, seq uint64) {
	le := binary.LittleEndian
	body := b[roundHeaderLen:]
	copy(b, roundMagic)
	le.PutUint64(b[4:], salt)
	le.PutUint64(b[12:], seq)
	le.PutUint32(b[20:], uint32(len(body)))
	le.PutUint32(b[24:], crc32.Checksum(body, castagnoli))
	le.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
}

// parseRound checks the round at the start of b, written into the file
// with salt, and returns its sequence number and body; anything else
// there (torn, zeros, a round of the file's earlier life) is errJournalTorn.
func parseRound(b []byte, salt uint64) (seq uint64, body []byte, err error) {
	le := binary.LittleEndian
	if len(b) < roundHeaderLen || string(b[:4]) != roundMagic || le.Uint64(b[4:]) != salt ||
		crc32.Checksum(b[:28], castagnoli) != le.Uint32(b[28:]) {
		return 0, nil, errJournalTorn
	}
	n := int64(le.Uint32(b[20:]))
	if int64(len(b)-roundHeaderLen) < n {
		return 0, nil, errJournalTorn
	}
	body = b[roundHeaderLen : roundHeaderLen+n]
	if crc32.Checksum(body, castagnoli) != le.Uint32(b[24:]) {
		return 0, nil, errJournalTorn
	}
	return le.Uint64(b[12:]), body, nil
}

// jrecord is one record of a round's body.
type jrecord struct {
	kind  byte
	id    SegmentID
	pos   int64
	batch []byte
}

// eachRecord calls fn for every record of a verified round body; a body
// whose records do not parse is damage (its CRC matched).
func eachRecord(body []byte, fn func(jrecord) error) error {
	le := binary.LittleEndian
	for len(body) > 0 {
		if len(body) < recordHeaderLen {
			return fmt.Errorf("%w: journal record header cut short", ErrCorrupt)
		}
		r := jrecord{kind: body[0], id: SegmentID(le.Uint64(body[1:])), pos: int64(le.Uint64(body[9:]))}
		n := int(le.Uint32(body[17:]))
		body = body[recordHeaderLen:]
		if n > len(body) || r.kind < recBatch || r.kind > recCut || (r.kind == recCreate && n != 4) ||
			(r.kind == recCut && n != 8) {
			return fmt.Errorf("%w: journal record of kind %d and length %d does not fit its round", ErrCorrupt, r.kind, n)
		}
		r.batch, body = body[:n], body[n:]
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// journal is the writer's side: the current file and what it covers. It is
// owned by the commit goroutine.
type journal struct {
	fs    vfs.FS
	dir   string
	f     vfs.File
	seq   uint64 // current file's sequence number
	salt  uint64 // current file's salt
	size  int64  // end of the current file's rounds
	round uint64 // next round's sequence number
	buf   []byte
	dirty map[*seg]struct{} // segments written since the current file began
}

// openFile starts journal file seq at round round, made from spare when
// one is given, else created. Its header, and its name, are durable before
// any round relies on them.
func (j *journal) openFile(seq, round uint64, spare string) error {
	path := filepath.Join(j.dir, journalName(seq))
	salt := newSalt()
	var f vfs.File
	var err error
	if spare != "" {
		f, err = j.fs.OpenFile(spare, os.O_RDWR, 0)
	} else {
		f, err = j.fs.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, vfs.FileMode)
	}
	if err != nil {
		return err
	}
	if _, err = f.WriteAt(marshalJournalHeader(seq, round, salt), 0); err == nil {
		err = f.Sync()
	}
	// The header first, then the name: a crash between the two leaves a
	// spare with a new header, never a journal file with an old one.
	if err == nil && spare != "" {
		err = j.fs.Rename(spare, path)
	}
	if err == nil {
		err = j.fs.SyncDir(j.dir)
	}
	if err != nil {
		_ = f.Close()
		if spare == "" {
			_ = j.fs.Remove(path) // so that a later attempt can create it
		}
		return err
	}
	j.f, j.seq, j.salt, j.size, j.round = f, seq, salt, journalHeaderLen, round
	j.dirty = map[*seg]struct{}{}
	return nil
}

func newSalt() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	return binary.LittleEndian.Uint64(b[:])
}

// begin starts a round's bytes, with room for n more: the header is
// filled in by write. A round of many ranges' batches runs to megabytes;
// grown by appends, its buffer was copied over and over. A buffer of
// 1 MiB or more is on huge pages (slab.Large): the round's batches
// are copied into it, a fresh 4 KiB page every few batches, and a TLB
// miss on each cost the node about a seventh of its CPU per record. A
// smaller round takes heap memory, so that a store of small rounds (a
// test's, say) does not fill a huge page for them. It is the journal's
// one buffer, held until a bigger round needs more, or until close.
func (j *journal) begin(n int) []byte {
	if need := roundHeaderLen + n; cap(j.buf) < need {
		slab.FreeLarge(j.buf)
		if need >= slab.RegionSize/2 {
			j.buf = slab.Large(need)
		} else {
			j.buf = make([]byte, 0, need) // exactly: nothing to copy over
		}
	}
	return append(j.buf[:0], make([]byte, roundHeaderLen)...)
}

// release hands the round buffer back: at close, and after a round larger
// than is kept.
func (j *journal) release() {
	slab.FreeLarge(j.buf)
	j.buf = nil
}

// write writes the round b (from begin) after the current file's rounds.
func (j *journal) write(b []byte) error {
	sealRound(b, j.salt, j.round)
	if _, err := j.f.WriteAt(b, j.size); err != nil {
		return err
	}
	j.size += int64(len(b))
	j.round++
	if cap(j.buf) > maxKeptRound {
		j.release() // do not pin huge buffers
	}
	return nil
}

// path is the current file's path.
func (j *journal) path() string { return filepath.Join(j.dir, journalName(j.seq)) }

// sparePath names the spare made from journal file seq.
func sparePath(dir string, seq uint64) string {
	return filepath.Join(dir, spareName+journalName(seq))
}
