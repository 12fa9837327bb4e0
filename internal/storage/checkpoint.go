package storage

import (
	"errors"
	"fmt"
	"os"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// checkpoint is a journal file to retire: once every segment written while
// it was current has been fsynced, nothing needs the file any more.
type checkpoint struct {
	path string
	seq  uint64
	segs []*seg
}

// checkpointLoop is the store's checkpoint goroutine, started by Open when
// the journal is on and ended when the commit goroutine closes s.ckpt. It
// first prepares a preallocated spare if asked to, then retires journal
// files in order; after a failure it keeps them (and the store is failed),
// so the next Open replays them. It owns syncer and closes it.
func (s *Store) checkpointLoop(prealloc bool, syncer vfs.FilesSyncer) {
	defer close(s.ckptDone)
	defer syncer.Close()
	if prealloc {
		// A spare saves time, not data: on a full disk the next file
		// grows instead.
		if err := s.preallocSpare(); err != nil && !isNoSpace(err) {
			s.fail(err)
		}
	}
	for ck := range s.ckpt {
		if s.failure() != nil {
			continue
		}
		err := s.syncSegments(syncer, ck.segs)
		if err == nil {
			// Segments created while the file was current exist only by
			// their journal record until their directory entry is durable.
			err = s.fs.SyncDir(s.cfg.Dir)
		}
		if err != nil {
			s.fail(err)
			continue
		}
		if s.failure() != nil {
			continue // a failed round or delete may count on this file
		}
		if err := s.recycle(ck.path, ck.seq); err != nil {
			s.fail(err)
			continue
		}
		s.stats.checkpoints.Add(1)
	}
}

// recycle turns a journal file whose rounds are all checkpointed into the
// spare, or deletes it when there is one already. Either way it is no
// longer replayed once the directory change is durable; replaying it
// before that is harmless.
func (s *Store) recycle(path string, seq uint64) error {
	if len(s.spares) == 0 {
		spare := sparePath(s.jr.dir, seq)
		err := s.fs.Rename(path, spare)
		if isNoSpace(err) {
			return s.removeJournal(path) // a spare saves time, not data
		}
		if err != nil {
			return err
		}
		if err := s.fs.SyncDir(s.jr.dir); err != nil {
			return err
		}
		select {
		case s.spares <- spare:
			return nil
		default: // only this goroutine offers spares, so this does not happen
			path = spare
		}
	}
	return s.removeJournal(path)
}

func (s *Store) removeJournal(path string) error {
	if err := s.fs.Remove(path); err != nil {
		return err
	}
	return s.fs.SyncDir(s.jr.dir)
}

// preallocSpare writes a zero-filled spare of JournalFileBytes when there
// is none, so that even a new node's second journal file overwrites
// blocks it already has instead of growing.
func (s *Store) preallocSpare() error {
	if len(s.spares) > 0 {
		return nil
	}
	spare, err := s.writeZeroSpare()
	if err != nil {
		return err
	}
	s.spares <- spare // empty: checked above, and only this goroutine offers
	return nil
}

// writeZeroSpare writes, fsyncs and names a zero-filled journal file of
// JournalFileBytes, returning its path.
func (s *Store) writeZeroSpare() (string, error) {
	dir := s.journalPath()
	spare, err := freeName(s.fs, dir, spareName+"prealloc", journalExt)
	if err != nil {
		return "", err
	}
	tmp := spare + ".tmp"
	f, err := s.fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_RDWR, vfs.FileMode)
	if err != nil {
		return "", err
	}
	zeros := make([]byte, 1<<20)
	for pos := int64(0); pos < s.cfg.JournalFileBytes && err == nil; pos += int64(len(zeros)) {
		_, err = f.WriteAt(zeros[:min(int64(len(zeros)), s.cfg.JournalFileBytes-pos)], pos)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(tmp, spare)
	}
	if err == nil {
		err = s.fs.SyncDir(dir)
	}
	if err != nil {
		if rerr := s.fs.Remove(tmp); rerr == nil {
			err = errors.Join(err, s.fs.SyncDir(dir)) // what it held is free again
		}
		return "", fmt.Errorf("preallocating a journal file: %w", err)
	}
	return spare, nil
}

// syncSegments makes the files of segs that are still open durable with
// one batch of the checkpoint's syncer: on Linux, from
// vfs.SyncfsMinFiles files on, one syncfs of the data directory's
// filesystem instead of an fdatasync (a journal commit) per file. A
// segment being deleted stays open until its tombstone is durable, so it
// is synced until then; once its handle is retired it needs nothing. A
// sealed one was fsynced by its seal.
func (s *Store) syncSegments(syncer vfs.FilesSyncer, segs []*seg) error {
	s.mu.Lock()
	hs := make([]*handle, 0, len(segs))
	for _, sg := range segs {
		if sg.sealed {
			continue
		}
		if h := s.refLocked(sg); h != nil {
			hs = append(hs, h)
		}
	}
	s.mu.Unlock()
	defer func() {
		for _, h := range hs {
			s.release(h)
		}
	}()
	logs := make([]*segment.Segment, len(hs))
	for i, h := range hs {
		logs[i] = h.log
	}
	n, err := segment.SyncFiles(syncer, logs)
	s.stats.syncs.Add(uint64(n))
	return err
}

// openSyncer opens the checkpoints' syncer on the data directory. It
// runs before the journal takes its first round, so the syncer sees
// every later write-back error; when it cannot be opened, checkpoints
// sync file by file, which needs nothing opened beforehand.
func (s *Store) openSyncer() vfs.FilesSyncer {
	syncer, err := vfs.NewFilesSyncer(s.fs, s.cfg.Dir, 0)
	if err != nil {
		return vfs.PerFileSyncer()
	}
	return syncer
}

// retire hands the current journal file to the checkpoint goroutine and
// starts the next one, from the spare when there is one. It blocks while
// the previous file's checkpoint runs, so at most two files wait for their
// segments' fsyncs. The next file is opened before the current one is
// closed: when the disk is too full for it, the current file goes on
// taking rounds (a full store takes few) and retire is tried again.
func (s *Store) retire() error {
	ck := checkpoint{path: s.jr.path(), seq: s.jr.seq, segs: dirtySegs(s.jr.dirty)}
	old := s.jr.f
	spare := s.takeSpare()
	if err := s.jr.openFile(s.jr.seq+1, s.jr.round, spare); err != nil {
		if spare != "" {
			s.giveSpareBack(spare)
		}
		return err
	}
	if err := old.Close(); err != nil {
		return err
	}
	s.ckpt <- ck
	return nil
}

// giveSpareBack returns a spare that openFile could not rename: its
// header may be new, but its name still says spare.
func (s *Store) giveSpareBack(spare string) {
	if _, err := s.fs.Stat(spare); err != nil {
		return // renamed after all (a failed directory sync): no longer a spare
	}
	select {
	case s.spares <- spare:
	default: // a checkpoint offered one meanwhile: this one waits for Open
	}
}

// takeSpare returns the spare's path, or "" when there is none yet.
func (s *Store) takeSpare() string {
	select {
	case p := <-s.spares:
		return p
	default:
		return ""
	}
}

func dirtySegs(m map[*seg]struct{}) []*seg {
	out := make([]*seg, 0, len(m))
	for sg := range m {
		out = append(out, sg)
	}
	return out
}

// closeJournal, at Close, checkpoints the current file too, so a clean
// shutdown leaves no journal to replay, and waits for the checkpoints.
func (s *Store) closeJournal() {
	if s.jr == nil {
		return
	}
	_ = s.jr.f.Close()
	s.jr.release()
	s.ckpt <- checkpoint{path: s.jr.path(), seq: s.jr.seq, segs: dirtySegs(s.jr.dirty)}
	close(s.ckpt)
	<-s.ckptDone
}
