package storage

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// Read returns whole stored batches (verbatim bytes) starting with the
// batch containing from (or the first batch after it, if from falls in a
// hole), total <= maxBytes except that the first batch is always returned
// whole even if larger, never a batch with LastOffset >= upTo (pass
// math.MaxUint64 for no bound), and never bytes not yet fsynced. next is
// the offset after the last returned batch (or from if none). Returned
// batches have passed their CRC; damage is an error wrapping ErrCorrupt.
func (s *Store) Read(id SegmentID, from uint64, maxBytes int, upTo uint64) (batches []byte, next uint64, err error) {
	_, h, err := s.acquire(id)
	if err != nil {
		return nil, from, err
	}
	defer s.release(h)
	return h.log.Read(from, maxBytes, upTo)
}

// Owner returns the owner tag in segment id's file header (0 when none
// was recorded), opening a sealed segment's file if it is not open.
func (s *Store) Owner(id SegmentID) (uint32, error) {
	_, h, err := s.acquire(id)
	if err != nil {
		return 0, err
	}
	defer s.release(h)
	return h.log.Owner(), nil
}

// Verify rereads segment id in full: every batch's framing and CRC and,
// for a sealed segment, the footer's counts and content hash. Damage is
// reported wrapping ErrCorrupt; nothing is modified.
func (s *Store) Verify(id SegmentID) error {
	sg, h, err := s.acquire(id)
	if err != nil {
		return err
	}
	defer s.release(h)
	s.mu.Lock()
	ft, damage := sg.footer, sg.damage
	s.mu.Unlock()
	if damage != nil {
		return damage
	}
	return h.log.Verify(ft)
}

// Seal is SealWith with no options: it records the durable end.
func (s *Store) Seal(ctx context.Context, id SegmentID) (Footer, error) {
	return s.SealWith(ctx, id, SealOptions{})
}

// SealWith fences the segment (later appends get ErrSealed), waits for its
// queued appends to be durable, writes the index and the footer durably,
// and returns the footer. Sealing a sealed segment returns its footer; it
// is an error only when o asks for a different end or generation. If ctx
// ends while waiting, the segment stays fenced and Seal may be retried.
// The same holds if ctx ends while it waits for a cut or another seal of
// the segment, before anything was fenced. A sealed segment that is
// damaged (Info.Damage) answers its damage rather than its footer.
// With o.Exact a replica copy is sealed at exactly o.End (see SealOptions);
// a crash part-way leaves it active as it was, active and cut, or sealed.
func (s *Store) SealWith(ctx context.Context, id SegmentID, o SealOptions) (Footer, error) {
	sg, err := s.lookup(id)
	if err != nil {
		return Footer{}, err
	}
	if err := sg.sealMu.lock(ctx); err != nil {
		return Footer{}, err
	}
	defer sg.sealMu.unlock()
	s.mu.Lock()
	if sg.sealed {
		ft, err := sealedFooter(sg)
		s.mu.Unlock()
		if err != nil {
			return Footer{}, err
		}
		return ft, sealedCompatible(ft, o)
	}
	if o.Exact && !sg.gone && sg.damage == nil {
		if err := s.checkExactLocked(sg, o); err != nil {
			s.mu.Unlock()
			return Footer{}, err
		}
	}
	wait, err := s.fenceLocked(sg)
	var log *segment.Segment
	if err == nil {
		log = sg.h.log // an active segment's handle stays open until it is sealed
	}
	s.mu.Unlock()
	if err != nil {
		return Footer{}, err
	}
	select {
	case <-wait:
	case <-ctx.Done():
		return Footer{}, ctx.Err()
	}
	if err := s.failure(); err != nil {
		return Footer{}, err
	}
	if o.Exact {
		if err := s.settleExact(sg, log, o); err != nil {
			return Footer{}, err
		}
	}
	ft, err := s.writeSeal(sg.id, log, o)
	if err != nil {
		return Footer{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sg.sealed, sg.footer, sg.queuedEnd = true, &ft, ft.End
	if !sg.gone && !s.closed {
		sg.h.refs-- // the store's own reference: the handle is now a cache entry
		sg.h.elem = s.lru.PushFront(sg)
		s.evictLocked()
	}
	return ft, nil
}

func sealedCompatible(ft Footer, o SealOptions) error {
	if ((o.End != 0 || o.Exact) && o.End != ft.End) || (o.Generation != 0 && o.Generation != ft.Generation) {
		return fmt.Errorf("%w: already sealed at end %d generation %d", ErrSealed, ft.End, ft.Generation)
	}
	return nil
}

// fenceLocked stops appends to sg and queues a barrier behind its appends.
func (s *Store) fenceLocked(sg *seg) (<-chan struct{}, error) {
	switch {
	case sg.gone:
		return nil, fmt.Errorf("%w: %d", ErrNotFound, sg.id)
	case sg.damage != nil:
		return nil, sg.damage
	case s.failed != nil:
		return nil, s.failed
	}
	sg.fenced = true
	return s.barrierLocked(sg)
}

// writeSeal writes the .idx and then the .seal file and syncs the
// directory. The segment is sealed once the .seal rename is durable; the
// index is only a cache, written first so a sealed segment normally has one.
func (s *Store) writeSeal(id SegmentID, log *segment.Segment, o SealOptions) (Footer, error) {
	_, d := log.Stats()
	end := d.End
	if o.End != 0 {
		end = o.End
	}
	// With the node journal the file's latest batches may be durable only
	// in the journal, which a checkpoint will drop: a sealed file must
	// stand alone.
	if err := log.SyncFile(); err != nil {
		s.fail(err)
		return Footer{}, err
	}
	ft, err := log.Footer(end, o.Generation)
	if err != nil {
		return Footer{}, err
	}
	if err := log.WriteIndex(s.fs, s.path(id, idxExt)); err != nil {
		return Footer{}, s.sealWriteError(err)
	}
	if err := segment.WriteFooter(s.fs, s.path(id, sealExt), uint64(id), ft); err != nil {
		return Footer{}, s.sealWriteError(err)
	}
	if err := s.syncDir(); err != nil {
		return Footer{}, err
	}
	log.MarkSealed(end)
	return ft, nil
}

// Delete fences segment id, waits for its queued appends to finish, and
// removes its files: the .log first, so a crash part-way leaves only
// sidecars, which Open discards.
func (s *Store) Delete(id SegmentID) error {
	release, err := s.detach(id)
	defer release()
	if err != nil {
		return err
	}
	for _, ext := range []string{logExt, idxExt, sealExt, damageExt, fenceExt} {
		if err := s.removeFile(s.path(id, ext)); err != nil && !vfs.IsNotExist(err) {
			return err
		}
	}
	return s.syncDir()
}

// QuarantineDir is the folder, below the store's directory, that holds
// quarantined segment files. Open does not look inside it.
const QuarantineDir = "quarantine"

// Quarantine takes segment id out of service without destroying a byte:
// it is fenced like Delete, and its files are moved into QuarantineDir
// (named after the id, with a numeric suffix if that id was quarantined
// before), where an operator can inspect them. The id is then free in the
// store. It returns the quarantined .log's path. A crash part-way leaves
// the .log quarantined and some sidecars behind, which the next Open
// discards: the segment never comes back into service.
func (s *Store) Quarantine(id SegmentID) (string, error) {
	release, err := s.detach(id)
	defer release()
	if err != nil {
		return "", err
	}
	qdir := filepath.Join(s.cfg.Dir, QuarantineDir)
	if err := s.fs.MkdirAll(qdir, vfs.DirMode); err != nil {
		return "", err
	}
	if err := s.fs.SyncDir(s.cfg.Dir); err != nil {
		return "", err
	}
	stem, err := s.freeQuarantineStem(qdir, id)
	if err != nil {
		return "", err
	}
	// The .log first, as Delete removes it first: a crash after it leaves
	// only sidecars in place, which Open discards. Moving the .seal first
	// would leave a sealed segment's .log without its seal, which Open
	// takes for an active segment and would append to.
	for _, ext := range []string{logExt, sealExt, idxExt, damageExt, fenceExt} {
		err := s.fs.Rename(s.path(id, ext), filepath.Join(qdir, stem+ext))
		if err == nil {
			s.removals.Add(1) // gone from the directory, as a removal
		}
		if err != nil && !vfs.IsNotExist(err) {
			return "", err
		}
	}
	if err := s.fs.SyncDir(qdir); err != nil {
		return "", err
	}
	return filepath.Join(qdir, stem+logExt), s.syncDir()
}

// freeQuarantineStem returns a file stem for id that no quarantined file
// uses yet.
func (s *Store) freeQuarantineStem(qdir string, id SegmentID) (string, error) {
	for n := 0; ; n++ {
		stem := fmt.Sprintf("%020d", uint64(id))
		if n > 0 {
			stem = fmt.Sprintf("%s-%d", stem, n)
		}
		_, err := s.fs.Stat(filepath.Join(qdir, stem+logExt))
		if vfs.IsNotExist(err) {
			return stem, nil
		}
		if err != nil {
			return "", err
		}
	}
}

// detach fences segment id, waits for its queued appends to finish, and
// forgets it: the files stay, for the caller to remove or move. Until the
// caller calls release (always, whatever the error), the id stays
// reserved: a CreateFor of it waits, so that the old copy's removal
// cannot take the new copy's files.
func (s *Store) detach(id SegmentID) (release func(), err error) {
	release = func() {}
	sg, err := s.lookup(id)
	if err != nil {
		return release, err
	}
	_ = sg.sealMu.lock(context.Background()) // cannot fail without a ctx to end
	defer sg.sealMu.unlock()
	s.mu.Lock()
	switch {
	case sg.gone:
		s.mu.Unlock()
		return release, fmt.Errorf("%w: %d", ErrNotFound, id)
	case s.closing:
		s.mu.Unlock()
		return release, ErrClosed
	case s.openPending:
		// The journal may hold batches of it not yet in its file: the
		// replay must find the file, or a tombstone, first.
		err := s.failed
		s.mu.Unlock()
		return release, err
	}
	sg.gone, sg.fenced = true, true
	release = s.holdIDLocked(id)
	var wait <-chan struct{}
	active := !sg.sealed && sg.h != nil
	if active {
		wait, _ = s.barrierLocked(sg) // cannot fail: not closing, under this lock
	}
	s.mu.Unlock()
	if wait != nil {
		<-wait
	}
	err = s.settle(sg, active)
	s.mu.Lock()
	if active {
		sg.h.refs--
	}
	s.retireLocked(sg)
	s.mu.Unlock()
	return release, err
}

// holdIDLocked puts a placeholder for id in the segment map, in place of
// a copy being taken out of service: not ready, so invisible to every
// lookup, and with creating set, so CreateFor waits for it. The returned
// func takes it out and lets those waiting go on; calling it again does
// nothing.
func (s *Store) holdIDLocked(id SegmentID) func() {
	hold := &seg{id: id, creating: make(chan struct{})}
	s.segs[id] = hold
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if hold.creating == nil {
			return
		}
		if s.segs[id] == hold {
			delete(s.segs, id)
		}
		close(hold.creating)
		hold.creating = nil
	}
}

// settle, with the journal on, makes a detached segment's file stand alone
// and then journals its tombstone, which voids its journaled batches for a
// replay: the file is fsynced first, so the files Delete or Quarantine go
// on to remove or move hold every acknowledged byte until then. Any error
// means the files must be kept: a replay then finds what the journal holds.
func (s *Store) settle(sg *seg, active bool) error {
	if s.jr == nil {
		return nil
	}
	if err := s.failure(); err != nil {
		return err
	}
	if active {
		if err := sg.h.log.SyncFile(); err != nil {
			s.fail(err)
			return err
		}
	}
	s.mu.Lock()
	wait, err := s.tombstoneLocked(sg)
	s.mu.Unlock()
	if err != nil {
		return err // closing began: the tombstone cannot be journaled
	}
	<-wait
	return s.failure()
}

// acquire returns segment id with an open handle and a reference on it,
// opening a sealed segment's file into the cache if needed.
func (s *Store) acquire(id SegmentID) (*seg, *handle, error) {
	s.mu.Lock()
	sg, err := s.lookupLocked(id)
	if err != nil {
		s.mu.Unlock()
		return nil, nil, err
	}
	if h := s.refLocked(sg); h != nil {
		s.mu.Unlock()
		return sg, h, nil
	}
	s.mu.Unlock()
	return s.openSealed(sg)
}

// refLocked takes a reference on sg's open handle, if it has one.
func (s *Store) refLocked(sg *seg) *handle {
	h := sg.h
	if h == nil {
		return nil
	}
	h.refs++
	if h.elem != nil {
		s.lru.MoveToFront(h.elem)
	}
	return h
}

func (s *Store) openSealed(sg *seg) (*seg, *handle, error) {
	sg.openMu.Lock()
	defer sg.openMu.Unlock()
	s.mu.Lock()
	if h := s.refLocked(sg); h != nil {
		s.mu.Unlock()
		return sg, h, nil
	}
	if sg.damage != nil || sg.footer == nil {
		err := sg.damage
		s.mu.Unlock()
		return nil, nil, err
	}
	ft := *sg.footer
	s.mu.Unlock()

	log, err := segment.OpenSealed(s.fs, s.path(sg.id, logExt), s.path(sg.id, idxExt), ft, s.opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if IsCorrupt(err) {
			sg.damage = err // structure is trusted; once it fails, it stays failed
		}
		return nil, nil, err
	}
	if sg.gone || s.closed {
		_ = log.Close()
		return nil, nil, fmt.Errorf("%w: %d", ErrNotFound, sg.id)
	}
	h := &handle{log: log, refs: 1}
	h.elem = s.lru.PushFront(sg)
	sg.h = h
	s.evictLocked()
	return sg, h, nil
}

func (s *Store) release(h *handle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h.refs--
	if h.refs == 0 && h.retired {
		_ = h.log.Close()
	}
}

// retireLocked detaches sg's handle; the file closes now or when its last
// reader releases it.
func (s *Store) retireLocked(sg *seg) {
	h := sg.h
	if h == nil {
		return
	}
	sg.h = nil
	if h.elem != nil {
		s.lru.Remove(h.elem)
		h.elem = nil
	}
	h.retired = true
	if h.refs == 0 {
		_ = h.log.Close()
	}
}

// evictLocked retires the least recently used sealed handles beyond
// MaxOpenFiles. A handle in use closes when its reader is done, so the
// number of open files can exceed the limit by the reads in flight.
func (s *Store) evictLocked() {
	for s.lru.Len() > s.cfg.MaxOpenFiles {
		s.retireLocked(s.lru.Back().Value.(*seg))
	}
}

// SeekTime returns the base offset of the first durable batch of segment
// id whose max timestamp is at least t (unix ms), reading batch headers
// only; ok is false when there is none. See segment.Segment.SeekTime.
func (s *Store) SeekTime(id SegmentID, t int64) (base uint64, ok bool, err error) {
	_, h, err := s.acquire(id)
	if err != nil {
		return 0, false, err
	}
	defer s.release(h)
	return h.log.SeekTime(t)
}

// MarkDamaged records, durably, that segment id is damaged: a check above
// the store (a read or a scrub whose CRC or content hash failed) found it
// so. It writes the damage marker every later Open honours, so the copy
// comes back damaged after a restart rather than served as good (S1), and
// from then on Ends, Fence, appends and a seal answer the damage. Its
// files are kept for repair or inspection; Delete and Quarantine take
// the marker with them. A copy deleted meanwhile answers ErrNotFound.
func (s *Store) MarkDamaged(id SegmentID, reason string) error {
	sg, err := s.lookup(id)
	if err != nil {
		return err
	}
	// Delete and Quarantine hold the seal lock while they remove the
	// files: holding it here keeps a marker from outliving its .log.
	_ = sg.sealMu.lock(context.Background())
	defer sg.sealMu.unlock()
	s.mu.Lock()
	switch {
	case sg.gone:
		s.mu.Unlock()
		return fmt.Errorf("%w: %d", ErrNotFound, id)
	case s.closing:
		s.mu.Unlock()
		return ErrClosed
	}
	end := max(sg.queuedEnd, sg.endPastDamage)
	s.mu.Unlock()
	if err := writeDamageMarker(s.fs, s.path(id, damageExt), end, reason); err != nil {
		return err
	}
	if err := s.syncDir(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sg.damage == nil {
		sg.damage = fmt.Errorf("%w: segment %d: %s", ErrCorrupt, id, reason)
	}
	sg.fenced, sg.endPastDamage = true, end
	return nil
}
