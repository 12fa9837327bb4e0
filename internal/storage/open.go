package storage

import (
	"container/list"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// File names: <id as 20 digits><ext>, so a directory listing sorts by id.
const (
	logExt  = ".log"
	sealExt = ".seal"
	idxExt  = ".idx"
	// damageExt marks damage only a journal replay could see (replay.go):
	// it keeps the segment reported damaged, and its file untouched, on
	// every later Open, after the journal that showed it is gone.
	damageExt = ".damage"
	// fenceExt marks an active copy fenced (Store.Fence). The latch must
	// outlive a restart: a copy that answered a failover's fence and then
	// took appends again would hand a stale primary the quorum the fence
	// denied it (W4, W6).
	fenceExt = ".fence"
)

// segFiles records which of a segment's files exist.
type segFiles struct{ log, seal, idx, damage, fence bool }

// parseName splits a segment file name; ok is false for foreign files,
// which Open leaves alone.
func parseName(name string) (SegmentID, string, bool) {
	ext := filepath.Ext(name)
	if ext != logExt && ext != sealExt && ext != idxExt && ext != damageExt && ext != fenceExt {
		return 0, "", false
	}
	stem := strings.TrimSuffix(name, ext)
	id, err := strconv.ParseUint(stem, 10, 64)
	if err != nil || fmt.Sprintf("%020d", id) != stem {
		return 0, "", false
	}
	return SegmentID(id), ext, true
}

// Open opens the store in cfg.Dir, creating the directory if needed, and
// recovers every segment in it:
//
//   - an active segment (a .log without .seal) has every batch verified; a
//     torn tail is truncated, and what remains is fsynced. An invalid batch
//     followed by valid ones is damage: reported in Info.Damage, kept.
//   - a sealed segment (.log and .seal) is trusted: its footer is read and
//     the file length checked, nothing more until it is read. Damage is
//     reported (ErrCorrupt), never truncated.
//   - leftovers of interrupted operations are removed: temporary files,
//     and .seal/.idx files whose .log is gone (an interrupted Delete).
//
// Open fails only when the disk cannot be read; damaged segments are
// listed with their damage so the node can start and repair them. A disk
// too full to replay the node journal into the segment files opens the
// store full, the replay resumed once space returns (replay_wait.go).
func Open(cfg Config) (*Store, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Store{
		cfg:    cfg,
		fs:     cfg.FS,
		opts:   segment.Options{IndexIntervalBytes: cfg.IndexIntervalBytes},
		segs:   map[SegmentID]*seg{},
		space:  make(chan struct{}),
		lru:    list.New(),
		wake:   make(chan struct{}, 1),
		exited: make(chan struct{}),
		known:  newKnownIDs(),
	}
	s.stats.init()
	if err := s.prepareDir(); err != nil {
		return nil, err
	}
	if err := s.recoverWithJournal(); err != nil {
		for _, sg := range s.segs {
			if sg.h != nil {
				_ = sg.h.log.Close()
			}
		}
		return nil, err
	}
	go s.commitLoop()
	return s, nil
}

// recoverWithJournal recovers the segments, replays the node journal into
// them (see replay.go) and, unless the journal is off, starts a new one.
func (s *Store) recoverWithJournal() error {
	plan, err := s.scanJournal()
	if err != nil {
		return err
	}
	fenced, err := s.recoverAll(plan)
	if err != nil {
		return err
	}
	// A full disk may stop the replay or the journal's start: the store
	// then opens full and goes on once space returns (replay_wait.go).
	// Fences are restored after the replay: every batch the journal holds
	// of a fenced copy was durable before its fence was answered.
	u := &startup{plan: plan, r: newReplayer(s, plan), fenced: fenced}
	err = s.replayRest(u)
	switch {
	case err == nil:
		if err = s.restoreFencesOrWait(u); err == nil {
			err = s.startJournalOrWait(u)
		}
	case errors.Is(err, errOpenWaits):
		// Latch the copies that came back now; those the replay has still
		// to make are latched when it is done (continueOpen).
		if ferr := s.restoreFences(fenced); ferr != nil && !isNoSpace(ferr) {
			return ferr
		}
	default:
		return err
	}
	if errors.Is(err, errOpenWaits) {
		s.waitForSpace(u, err)
		return nil
	}
	return err
}

// prepareDir creates the directory and makes its entry durable.
func (s *Store) prepareDir() error {
	if err := s.fs.MkdirAll(s.cfg.Dir, vfs.DirMode); err != nil {
		return err
	}
	if err := s.fs.SyncDir(filepath.Dir(filepath.Clean(s.cfg.Dir))); err != nil {
		return err
	}
	return s.fs.SyncDir(s.cfg.Dir)
}

// recoverAll recovers every segment in the directory and returns the
// active ones a fence marker says were fenced.
func (s *Store) recoverAll(plan *journalPlan) ([]SegmentID, error) {
	names, err := s.fs.ReadDir(s.cfg.Dir)
	if err != nil {
		return nil, err
	}
	files := map[SegmentID]*segFiles{}
	changed := false
	for _, name := range names {
		if strings.HasSuffix(name, segment.TempSuffix) {
			if err := s.fs.Remove(filepath.Join(s.cfg.Dir, name)); err != nil {
				return nil, err
			}
			changed = true
			continue
		}
		id, ext, ok := parseName(name)
		if !ok {
			continue
		}
		s.noteID(id)
		if files[id] == nil {
			files[id] = &segFiles{}
		}
		switch ext {
		case logExt:
			files[id].log = true
		case sealExt:
			files[id].seal = true
		case idxExt:
			files[id].idx = true
		case damageExt:
			files[id].damage = true
		case fenceExt:
			files[id].fence = true
		}
	}
	ids := make([]SegmentID, 0, len(files))
	for id := range files {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var fenced []SegmentID
	for _, id := range ids {
		f := files[id]
		removed, err := s.recoverSegment(id, f, plan)
		if err != nil {
			return nil, err
		}
		changed = changed || removed
		switch {
		case f.fence && !f.seal && (f.log || plan.creates[id]):
			fenced = append(fenced, id)
		case f.fence:
			// A sealed copy needs no latch, and one without a .log that
			// the replay does not rebuild is gone.
			if err := s.fs.Remove(s.path(id, fenceExt)); err != nil && !vfs.IsNotExist(err) {
				return nil, err
			}
			changed = true
		}
	}
	if changed {
		return fenced, s.fs.SyncDir(s.cfg.Dir)
	}
	return fenced, nil
}

// restoreFences sets the latch of each recovered active copy in ids.
// fenceKept must say what the disk holds, since a fence asked again
// writes nothing when it is set: the marker is looked at, not assumed,
// and written again if it is missing, so a latch restored in memory
// always outlives the next restart too.
//
// It takes mu for the segment's state but not across the file work: a
// resumed Open runs it on the commit goroutine, with readers about.
func (s *Store) restoreFences(ids []SegmentID) error {
	for _, id := range ids {
		s.mu.Lock()
		sg := s.segs[id]
		if sg == nil || !sg.ready {
			s.mu.Unlock()
			continue // no copy came back (yet): the next Open drops the marker
		}
		sg.fenced = true
		writable, end := sg.h != nil && sg.damage == nil, sg.queuedEnd
		s.mu.Unlock()
		_, err := s.fs.Stat(s.path(id, fenceExt))
		switch {
		case err == nil:
			s.mu.Lock()
			sg.fenceKept = true
			s.mu.Unlock()
		case !vfs.IsNotExist(err):
			return err
		case writable:
			if err := s.keepFence(sg, end); err != nil {
				return err
			}
		}
	}
	return nil
}

// recoverSegment recovers one segment; removed reports files it deleted.
func (s *Store) recoverSegment(id SegmentID, f *segFiles, plan *journalPlan) (removed bool, err error) {
	switch {
	case f.damage:
		return false, s.recoverMarked(id, f)
	case f.log && !f.seal && plan.creates[id]:
		return false, nil // the replay recreates it from the journal
	case !f.log:
		return true, s.removeSidecars(id, plan.creates[id])
	case f.seal:
		return false, s.recoverSealed(id)
	default:
		cut, ok := plan.cuts[id]
		if !ok {
			cut = -1
		}
		return s.recoverActive(id, cut)
	}
}

// removeSidecars removes the sidecars of a segment whose .log is gone:
// those an interrupted Delete or Quarantine left (they move the .log
// first). When the journal's replay rebuilds the copy (recreated), its
// fence marker stays with it: a crash inside recreate, after it removed
// the old .log and before the new one exists, leaves a fenced copy's
// marker with no .log, and dropping it would bring the rebuilt copy back
// unfenced (W4). A .seal is removed all the same, as it cannot be the
// rebuilt copy's: recreate runs only for a copy without one, a seal
// fsyncs the directory, which makes the .log's entry durable, and Delete
// and Quarantine journal a tombstone before they touch a file, so a
// .seal without its .log never stands beside a replayed create.
func (s *Store) removeSidecars(id SegmentID, recreated bool) error {
	exts := []string{idxExt, sealExt, fenceExt}
	if recreated {
		exts = exts[:2]
	}
	for _, ext := range exts {
		if err := s.fs.Remove(s.path(id, ext)); err != nil && !vfs.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// recoverActive recovers an active segment; cut >= 0 is where the node
// journal's part of it begins (segment.RecoverCut).
func (s *Store) recoverActive(id SegmentID, cut int64) (removed bool, err error) {
	path := s.path(id, logExt)
	var log *segment.Segment
	var rec segment.Recovery
	if cut >= 0 {
		log, rec, err = segment.RecoverCut(s.fs, path, s.opts, cut)
	} else {
		log, rec, err = segment.Recover(s.fs, path, s.opts)
	}
	switch {
	case errors.Is(err, segment.ErrTornCreate):
		// Create never returned: the file holds no batch.
		return true, s.fs.Remove(path)
	case IsCorrupt(err):
		s.segs[id] = &seg{id: id, ready: true, fenced: true, damage: err}
		return false, nil
	case err != nil:
		return false, err
	}
	written, _ := log.Stats()
	sg := &seg{id: id, base: log.Base(), ready: true, queuedEnd: written.End,
		damage: rec.Damage, endPastDamage: rec.EndPastDamage, h: &handle{log: log, refs: 1}}
	if log.ID() != uint64(id) {
		sg.damage = fmt.Errorf("%w: %s holds segment %d", ErrCorrupt, path, log.ID())
	}
	s.stats.truncated.Add(uint64(rec.TruncatedBytes))
	s.segs[id] = sg
	return false, nil
}

func (s *Store) recoverSealed(id SegmentID) error {
	sg := &seg{id: id, ready: true, fenced: true, sealed: true}
	s.segs[id] = sg
	fid, ft, err := segment.ReadFooter(s.fs, s.path(id, sealExt))
	switch {
	case IsCorrupt(err):
		sg.damage = err
		return nil
	case err != nil:
		return err
	case fid != uint64(id):
		sg.damage = fmt.Errorf("%w: seal file of segment %d names segment %d", ErrCorrupt, id, fid)
		return nil
	}
	sg.base, sg.queuedEnd, sg.footer = ft.Base, ft.End, &ft
	st, err := s.fs.Stat(s.path(id, logExt))
	if err != nil {
		return err
	}
	if st.Size != segment.FileHeaderSize+ft.Bytes {
		sg.damage = fmt.Errorf("%w: segment %d is %d bytes, footer says %d",
			ErrCorrupt, id, st.Size, segment.FileHeaderSize+ft.Bytes)
	}
	return nil
}

// recoverMarked recovers a segment with a damage marker: reported damaged
// and fenced, its files read but never modified, whatever they hold.
func (s *Store) recoverMarked(id SegmentID, f *segFiles) error {
	end, reason, err := readDamageMarker(s.fs, s.path(id, damageExt))
	if err != nil {
		return err
	}
	damage := fmt.Errorf("%w: segment %d: %s", ErrCorrupt, id, reason)
	switch {
	case f.log && f.seal:
		if err := s.recoverSealed(id); err != nil {
			return err
		}
	case f.log:
		s.recoverMarkedActive(id)
	default:
		s.segs[id] = &seg{id: id, ready: true, fenced: true}
	}
	sg := s.segs[id]
	sg.damage, sg.fenced = damage, true
	sg.endPastDamage = max(sg.endPastDamage, end)
	return nil
}

// recoverMarkedActive opens a marked active segment for reading what is
// valid of it: every byte is treated as synced, so nothing is cut.
func (s *Store) recoverMarkedActive(id SegmentID) {
	path := s.path(id, logExt)
	st, err := s.fs.Stat(path)
	var log *segment.Segment
	if err == nil {
		log, _, err = segment.RecoverCut(s.fs, path, s.opts, st.Size)
	}
	sg := &seg{id: id, ready: true}
	if err == nil {
		w, _ := log.Stats()
		sg.base, sg.queuedEnd, sg.endPastDamage, sg.h = log.Base(), w.End, w.End, &handle{log: log, refs: 1}
	}
	s.segs[id] = sg
}
