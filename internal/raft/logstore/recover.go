package logstore

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/malachi-log/malachi/internal/vfs"
)

// Open recovers every group's state from the files in dir, creating dir
// if needed. Files are read in order and each must be whole; only the
// newest may end in a torn tail (a batch without its commit record, or a
// damaged record with no well-formed record after it), which is cut off.
// Any other damage fails with ErrCorrupt and leaves every file in place.
// Everything recovered is durable before Open returns, even what a killed
// process left only in the page cache. Only one Store may use dir at a
// time; nothing enforces it.
func Open(fs vfs.FS, dir string, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := vfs.EnsureDir(fs, dir); err != nil {
		return nil, err
	}
	seqs, err := listFiles(fs, dir)
	if err != nil {
		return nil, err
	}
	s := &Store{fs: fs, dir: dir, opts: opts, groups: map[uint64]*groupState{}}
	if len(seqs) == 0 {
		data := dumpFile(1, nil)
		f, _, err := installFile(fs, dir, 1, data)
		if err != nil {
			return nil, err
		}
		s.active, s.seq, s.size, s.dumpSize = f, 1, int64(len(data)), int64(len(data))
		return s, nil
	}
	var last *scanned
	for i, seq := range seqs {
		if last, err = scanFile(fs, dir, seq, i == len(seqs)-1); err != nil {
			return nil, err
		}
	}
	if err := s.settle(last); err != nil {
		return nil, err
	}
	removeOlder(fs, dir, last.seq)
	return s, nil
}

// scanned is one file replayed.
type scanned struct {
	seq      uint64
	groups   map[uint64]*groupState
	valid    int64 // bytes up to the end of the last commit record
	size     int64
	dumpSize int64
}

// scanFile replays one file from an empty state: each file starts with a
// dump of everything live, so only the newest one's state is kept, but
// every file is checked.
func scanFile(fs vfs.FS, dir string, seq uint64, newest bool) (*scanned, error) {
	name := fileName(seq)
	data, err := vfs.ReadFile(fs, filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	sc := &scanned{seq: seq, groups: map[uint64]*groupState{}, size: int64(len(data))}
	off, err := sc.replay(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, name, err)
	}
	switch {
	case sc.dumpSize == 0:
		// installFile writes the header before the file gets its name.
		return nil, fmt.Errorf("%w: %s has no header", ErrCorrupt, name)
	case off < len(data) && recordAfter(data, off+1):
		return nil, fmt.Errorf("%w: %s: bad record at byte %d followed by valid records", ErrCorrupt, name, off)
	case sc.valid < sc.dumpSize:
		// The dump was fsynced before the file got its name.
		return nil, fmt.Errorf("%w: %s: the dump ends at byte %d but the file holds %d whole bytes", ErrCorrupt, name, sc.dumpSize, sc.valid)
	case !newest && sc.valid != sc.size:
		return nil, fmt.Errorf("%w: %s is damaged at byte %d and is not the newest file", ErrCorrupt, name, sc.valid)
	}
	return sc, nil
}

// replay applies the committed batches of data and returns the offset
// where well-formed records stop.
func (sc *scanned) replay(data []byte) (int, error) {
	var pending []record
	off := 0
	for {
		p, ok := recordAt(data, off)
		if !ok {
			break
		}
		r, err := decode(p)
		if err != nil {
			return off, fmt.Errorf("record at byte %d: %w", off, err)
		}
		if (off == 0) != (r.kind == kindHeader) {
			return off, fmt.Errorf("record at byte %d: a header must open the file, and only there", off)
		}
		off += headerLen + len(p)
		switch r.kind {
		case kindHeader:
			if r.seq != sc.seq {
				return off, fmt.Errorf("header names file %d", r.seq)
			}
			sc.dumpSize = int64(off) + int64(r.dumpLen)
		case kindCommit:
			for _, r := range pending {
				if err := sc.apply(r); err != nil {
					return off, fmt.Errorf("group %d: %w", r.group, err)
				}
			}
			pending, sc.valid = pending[:0], int64(off)
		default:
			pending = append(pending, r)
		}
	}
	return off, nil
}

// apply replays one record. The writer checked it against the same state,
// so a refusal here means the file and the rules disagree.
func (sc *scanned) apply(r record) error {
	g, ok := sc.groups[r.group]
	if !ok {
		g = emptyGroup
	}
	var err error
	switch r.kind {
	case kindReset:
		g = g.withReset(dummyEntry(r.index, r.term), r.snap)
	case kindEntries:
		g, err = g.withEntries(r.ents)
	case kindHardState:
		g = g.withHardState(r.hard)
	case kindSnapshot:
		g, err = g.withSnapshot(r.snap)
	case kindCompact:
		g, err = g.withCompact(r.index)
	case kindRemove:
		delete(sc.groups, r.group)
		return nil
	}
	if err != nil {
		return err
	}
	sc.groups[r.group] = g
	return nil
}

// settle makes the newest file the active one: it cuts the torn tail,
// fsyncs the file and the directory (a killed process may have left the
// tail, or the file's rename, only in the page cache, and Storage serves
// it from now on), and loads its state.
func (s *Store) settle(sc *scanned) error {
	f, err := s.fs.OpenFile(filepath.Join(s.dir, fileName(sc.seq)), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if sc.valid != sc.size {
		err = f.Truncate(sc.valid)
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = s.fs.SyncDir(s.dir)
	}
	if err != nil {
		f.Close()
		return err
	}
	s.active, s.seq, s.size, s.dumpSize = f, sc.seq, sc.valid, sc.dumpSize
	s.groups = sc.groups
	for _, g := range s.groups {
		s.live += g.size
	}
	return nil
}
