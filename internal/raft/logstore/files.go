package logstore

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/malachi-log/malachi/internal/vfs"
)

// File names carry the file's sequence number, 20 digits so they sort by
// name.
const (
	filePrefix = "raftlog-"
	tmpSuffix  = vfs.TempSuffix
	// dumpChunk is the size past which a dump starts a new entries
	// record, so that a group with a long log does not make one record
	// near the format's limit.
	dumpChunk = 1 << 20
)

func fileName(seq uint64) string { return fmt.Sprintf("%s%020d", filePrefix, seq) }

func parseName(name string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, filePrefix)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil
}

// listFiles returns the sequence numbers of the log files in dir,
// ascending, and removes files a rotation left before their rename.
func listFiles(fs vfs.FS, dir string) ([]uint64, error) {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, name := range names {
		if n, ok := parseName(name); ok {
			seqs = append(seqs, n)
		} else if base, ok := strings.CutSuffix(name, tmpSuffix); ok {
			if _, ok := parseName(base); ok {
				if err := fs.Remove(filepath.Join(dir, name)); err != nil {
					return nil, err
				}
			}
		}
	}
	slices.Sort(seqs)
	return seqs, nil
}

// dumpFile returns a whole new file: its header, then every group's live
// state as one committed batch. Recovery needs nothing older.
func dumpFile(seq uint64, groups map[uint64]*groupState) []byte {
	out := make([]byte, headerRecordLen, headerRecordLen+1024)
	ids := make([]uint64, 0, len(groups))
	for id := range groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		out = appendGroup(out, id, groups[id])
	}
	out = appendCommit(out)
	copy(out, appendHeader(nil, seq, uint64(len(out)-headerRecordLen)))
	return out
}

// appendGroup appends the records that rebuild one group's state.
func appendGroup(dst []byte, id uint64, g *groupState) []byte {
	dst = appendReset(dst, id, g.ents[0], g.snap)
	ents := g.ents[1:]
	for len(ents) > 0 {
		n, size := 0, 0
		for n < len(ents) && (n == 0 || size < dumpChunk) {
			size += proto.Size(ents[n])
			n++
		}
		dst = appendEntries(dst, id, ents[:n])
		ents = ents[n:]
	}
	if g.hard != nil {
		dst = appendHardState(dst, id, g.hard)
	}
	return dst
}

// installFile writes a file atomically (vfs.WriteFileAtomic), fsyncs the
// directory and opens the file for appends. A named file
// is therefore always whole up to the end of its dump. renamed reports
// whether the rename happened: after it, a failure leaves in doubt which
// file recovery would use.
func installFile(fs vfs.FS, dir string, seq uint64, data []byte) (f vfs.File, renamed bool, err error) {
	final := filepath.Join(dir, fileName(seq))
	if err := vfs.WriteFileAtomic(fs, final, data); err != nil {
		return nil, false, err
	}
	if err := fs.SyncDir(dir); err != nil {
		return nil, true, err
	}
	f, err = fs.OpenFile(final, os.O_RDWR, 0)
	return f, true, err
}

// maybeRotate starts a new file when the active one has passed
// Options.FileBytes and holds at least as much appended as dumped. A
// failure before the rename leaves the active file as it was, so the
// write that asked is refused and the store carries on; after the rename
// the store fails stop.
// REQUIRES: s.wmu is held.
func (s *Store) maybeRotate() error {
	if s.size < s.opts.FileBytes || s.size-s.dumpSize < s.dumpSize {
		return nil
	}
	next := s.seq + 1
	data := dumpFile(next, s.groups)
	f, renamed, err := installFile(s.fs, s.dir, next, data)
	if err != nil {
		if renamed {
			return s.fail(err)
		}
		return fmt.Errorf("logstore: rotating to %s: %w", fileName(next), err)
	}
	old := s.active
	s.active, s.seq, s.size, s.dumpSize = f, next, int64(len(data)), int64(len(data))
	_ = old.Close() // its content is durable and superseded
	removeOlder(s.fs, s.dir, next)
	return nil
}

// removeOlder deletes the files before seq, which its dump supersedes.
// Failures are left for the next rotation or Open, which try again.
func removeOlder(fs vfs.FS, dir string, seq uint64) {
	seqs, err := listFiles(fs, dir)
	if err != nil {
		return
	}
	for _, n := range seqs {
		if n < seq {
			_ = fs.Remove(filepath.Join(dir, fileName(n)))
		}
	}
}
