package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/cespare/xxhash/v2"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
)

// ownerTag is what a segment file's header records of the range it was
// created for: 32 bits of a hash of the range id, never 0 (0 means "not
// recorded" in files written before the tag existed).
func ownerTag(rangeID uint64) uint32 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], rangeID)
	tag := uint32(xxhash.Sum64(b[:]))
	if tag == 0 {
		tag = 1
	}
	return tag
}

// rangeView is what the metadata says of one range's write position.
type rangeView struct {
	retired   bool
	active    metadata.Segment
	hasActive bool
	next      uint64 // the lowest base a new segment may open at
}

func (b *Broker) viewRange(rangeID uint64) rangeView {
	var v rangeView
	v.retired = true
	_ = b.plane.ViewID(rangeID, func(st *metadata.State) {
		v.retired = false
		r, ok := st.Range(rangeID)
		if !ok || !r.Active {
			v.retired = true
			return
		}
		v.next = r.NextOffset
		v.active, v.hasActive = st.ActiveSegment(rangeID)
	})
	return v
}

// reconcileLocked loads h from the metadata and the store and finishes any
// half-done operation, whatever interrupted it (a failed command, a crash,
// a damaged file):
//
//   - an active segment the store lacks (the open was recorded, the file
//     never made) is created empty at its base;
//   - a store file that is not the one the metadata describes (another
//     range's, another base) is quarantined, never adopted, and an empty
//     file created in its place;
//   - a segment the store sealed but the metadata did not (a roll cut
//     between the two) is sealed in the metadata from the store's footer;
//   - a segment found damaged at open is sealed in the metadata at its last
//     good batch; its bytes stay on disk, the good prefix stays readable,
//     and the range continues in a successor.
//
// It is idempotent: running it again on a reconciled head changes nothing.
//
// REQUIRES: h.mu held.
func (b *Broker) reconcileLocked(h *head) error {
	v := b.viewRange(h.rangeID)
	if v.retired {
		b.retireLocked(h)
		return nil
	}
	if !v.hasActive {
		h.sealedAt(v.next)
		h.ready = true
		return nil
	}
	if replicated(v.active) {
		return b.reconcileReplicatedLocked(h, v.active)
	}
	if err := b.local(v.active); err != nil {
		// Another node writes this range: nothing of it is here to adopt
		// or create. The head stays unready and looks again next time.
		return err
	}
	info, err := b.adoptable(v.active, h.rangeID)
	if err != nil {
		return err
	}
	switch {
	case info.Sealed:
		if err := b.sealInMetadata(v.active.ID, *info.Footer); err != nil {
			return err
		}
		b.log.Info("finished an interrupted roll from the store's seal", "segment", v.active.ID, "end", info.Footer.End)
		h.sealedAt(info.Footer.End)
	case info.Damage != nil:
		if err := b.sealDamaged(v.active.ID, info); err != nil {
			return err
		}
		h.sealedAt(damagedEnd(info))
	case info.Fenced:
		// A seal that failed after the fence (a write fault on the seal
		// files): the segment takes no appends, so finish the roll.
		footer, err := b.store.Seal(b.life, storage.SegmentID(v.active.ID))
		if err != nil {
			return fmt.Errorf("broker: finish seal of segment %d: %w", v.active.ID, err)
		}
		if err := b.sealInMetadata(v.active.ID, footer); err != nil {
			return err
		}
		h.sealedAt(footer.End)
	default:
		h.segment, h.next, h.repl = v.active.ID, info.End, false
		h.bytes = info.Bytes
		h.activeBytes.Store(info.Bytes)
		h.openedAt = msTime(v.active.OpenedAt)
		h.rollBytes = b.headRollBytes(h.topicID)
	}
	h.ready = true
	return nil
}

// adoptable returns the store's view of the metadata's active segment seg,
// creating the file if it is missing and replacing it (after quarantining
// it) if it belongs to something else.
func (b *Broker) adoptable(seg metadata.Segment, rangeID uint64) (storage.Info, error) {
	id := storage.SegmentID(seg.ID)
	info, err := b.store.Info(id)
	if err == nil && !info.Readable {
		// Its extent is unknown: neither sealing it nor starting over at
		// its base could be right. The range refuses writes until the file
		// is repaired or restored.
		return storage.Info{}, fmt.Errorf("broker: active segment %d of range %d is unreadable: %w", seg.ID, rangeID, info.Damage)
	}
	if err == nil && info.Sealed {
		// Only an open file reports its owner; a sealed one is read.
		if info.Owner, err = b.store.Owner(id); err != nil {
			return storage.Info{}, fmt.Errorf("broker: segment %d: %w", seg.ID, err)
		}
	}
	if err == nil {
		problem := activeMismatch(seg, info, rangeID)
		if problem == "" {
			return info, nil
		}
		path, qerr := b.store.Quarantine(id)
		if qerr != nil {
			return storage.Info{}, fmt.Errorf("broker: segment %d (%s): quarantine: %w", seg.ID, problem, qerr)
		}
		b.log.Error("a segment file did not match the metadata; it was quarantined, not adopted",
			"segment", seg.ID, "problem", problem, "moved_to", path)
	} else if !errors.Is(err, storage.ErrNotFound) {
		return storage.Info{}, fmt.Errorf("broker: segment %d: %w", seg.ID, err)
	}
	if err := b.createSegment(seg.ID, seg.Base, rangeID); err != nil {
		return storage.Info{}, err
	}
	b.log.Info("created the file of an active segment registered before an interruption", "segment", seg.ID)
	return b.store.Info(id)
}

// activeMismatch says why a store segment cannot be the metadata's active
// segment seg of range rangeID, or "" if it can.
func activeMismatch(seg metadata.Segment, info storage.Info, rangeID uint64) string {
	switch {
	case info.Base != seg.Base:
		return fmt.Sprintf("store base %d, metadata base %d", info.Base, seg.Base)
	case info.Owner != 0 && info.Owner != ownerTag(rangeID):
		return fmt.Sprintf("file made for another range (tag %08x, range %d has %08x)", info.Owner, rangeID, ownerTag(rangeID))
	case info.Sealed && info.Footer.End < seg.Base:
		return fmt.Sprintf("sealed at %d, below its base %d", info.Footer.End, seg.Base)
	}
	return ""
}

// damagedEnd is where a segment found damaged at open is sealed: past
// every valid batch in its file, the ones after the damage included, since
// their offsets were handed out and may be in readers' cursors. Reads
// serve the good prefix; the offsets from there to the end are skipped.
func damagedEnd(info storage.Info) uint64 {
	return max(info.DurableEnd, info.EndPastDamage)
}

// sealDamaged seals, in the metadata, a segment whose file was found
// damaged, at damagedEnd. The store keeps every byte and keeps reporting
// the damage.
func (b *Broker) sealDamaged(id uint64, info storage.Info) error {
	end := damagedEnd(info)
	res, err := b.apply(b.life, metadata.Command{
		Kind: "seal_segment", Segment: id, End: end,
		Records: info.Records, Bytes: info.Bytes, MaxExpiry: info.MaxExpiry,
	})
	if errors.Is(err, metadata.ErrAlreadySealed) && res.Sealed != nil && res.Sealed.End == end {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("broker: seal damaged segment %d: %w", id, err)
	}
	b.log.Error("a damaged active segment was sealed past its last valid batch; its bytes are kept, reads stop at the damage",
		"segment", id, "readable_end", info.DurableEnd, "sealed_end", end, "damage", info.Damage)
	return nil
}

// recover reconciles metadata and store after a start. Every store segment
// raises the id floor. Every active range's head is reconciled (which
// creates, finishes or replaces its active segment). Every sealed segment
// is checked against its store copy: a copy that disagrees is
// quarantined, one that is missing is reported. Store segments the
// metadata does not know are reported and kept: data is never deleted
// because the metadata looks inconsistent. In a cluster only this node's
// segments (their replicas name it) are checked, and only the ranges
// whose active segment is here get a head now: another node's segments
// are neither missing nor orphaned here.
func (b *Broker) recover() error {
	if err := b.startReplicas(); err != nil {
		return err
	}
	known := map[uint64]bool{}
	var sealed []metadata.Segment
	type active struct{ topic, rng uint64 }
	var actives []active
	_ = b.plane.ViewEach(func(_ uint64, st *metadata.State) {
		for _, t := range st.Topics() {
			for _, rid := range t.Ranges {
				for _, s := range st.RangeSegments(rid) {
					known[s.ID] = true
					if !s.Active && b.holds(s) {
						sealed = append(sealed, s)
					}
				}
				r, ok := st.Range(rid)
				if !ok || !r.Active {
					continue
				}
				if seg, has := st.ActiveSegment(rid); !has && b.cluster == nil || has && b.writesHere(seg) {
					actives = append(actives, active{t.ID, rid})
				}
			}
		}
	})
	var orphans []uint64
	for _, info := range b.store.List() {
		if !plausibleSegmentID(uint64(info.ID)) {
			// No id this large was ever handed out: a stray file, which
			// must not push the floor past what open_segment accepts.
			b.log.Warn("a segment file's id is beyond any id the node hands out; kept and ignored", "segment", uint64(info.ID))
			continue
		}
		b.segFloor.raise(uint64(info.ID))
		if !known[uint64(info.ID)] {
			orphans = append(orphans, uint64(info.ID))
		}
	}
	for _, s := range sealed {
		if err := b.checkSealed(s); err != nil {
			return err
		}
	}
	for _, a := range actives {
		h := b.headFor(a.topic, a.rng)
		h.mu.Lock()
		err := b.readyLocked(h)
		h.mu.Unlock()
		if err != nil {
			// One range that cannot be reconciled (an unreadable active
			// segment) must not keep the others from serving: it stays
			// unready and every write to it reports why.
			b.log.Error("a range could not be reconciled; it refuses writes", "range", a.rng, "err", err)
		}
	}
	orphans = b.deleteDeletedOrphans(orphans)
	sort.Slice(orphans, func(i, j int) bool { return orphans[i] < orphans[j] })
	if len(orphans) > 0 {
		b.log.Warn("segments on disk that no topic references were kept, not deleted", "segments", orphans)
	}
	return nil
}

// checkSealed compares a sealed metadata segment with the store's copy.
func (b *Broker) checkSealed(s metadata.Segment) error {
	if replicated(s) {
		// A copy the seal found behind, ahead (an unacknowledged suffix)
		// or not sealed yet is settled like a live seal would.
		if info, err := b.store.Info(storage.SegmentID(s.ID)); err == nil && !info.Sealed {
			b.sealCopy(s)
			return nil
		}
	}
	info, err := b.store.Info(storage.SegmentID(s.ID))
	if errors.Is(err, storage.ErrNotFound) {
		b.log.Error("a sealed segment is missing from the store; reads of it will fail", "segment", s.ID, "range", s.Range)
		return nil
	}
	if err != nil {
		return fmt.Errorf("broker: segment %d: %w", s.ID, err)
	}
	if !info.Readable {
		b.log.Error("a sealed segment is damaged; it is kept and reads of it will fail", "segment", s.ID, "damage", info.Damage)
		return nil
	}
	problem := sealedMismatch(s, info)
	if problem == "finish" {
		// The metadata sealed it and the store did not: only possible
		// when the store copy ends exactly where the seal says.
		if _, err := b.store.SealWith(b.life, storage.SegmentID(s.ID), storage.SealOptions{End: s.End}); err != nil {
			return fmt.Errorf("broker: finish seal of segment %d: %w", s.ID, err)
		}
		return nil
	}
	if problem == "" {
		return nil
	}
	path, err := b.store.Quarantine(storage.SegmentID(s.ID))
	if err != nil {
		return fmt.Errorf("broker: segment %d (%s): quarantine: %w", s.ID, problem, err)
	}
	b.log.Error("a sealed segment's file did not match the metadata; it was quarantined, not served",
		"segment", s.ID, "problem", problem, "moved_to", path)
	return nil
}

// sealedMismatch says why store copy info cannot serve sealed metadata
// segment s: "" if it can, "finish" if it can once sealed at s.End.
func sealedMismatch(s metadata.Segment, info storage.Info) string {
	switch {
	case info.Base != s.Base:
		return fmt.Sprintf("store base %d, metadata base %d", info.Base, s.Base)
	case info.Sealed && info.Footer.End != s.End:
		return fmt.Sprintf("store sealed at %d, metadata at %d", info.Footer.End, s.End)
	case info.Sealed && s.ContentHash != 0 && info.Footer.ContentHash != s.ContentHash:
		return fmt.Sprintf("content hash %016x, metadata %016x", info.Footer.ContentHash, s.ContentHash)
	case info.Sealed:
		return ""
	case info.Damage != nil && damagedEnd(info) == s.End:
		return "" // sealed in the metadata past the damage
	case info.Damage == nil && info.End == s.End:
		return "finish"
	}
	return fmt.Sprintf("active in the store ending at %d, sealed in the metadata at %d", info.End, s.End)
}

// deleteDeletedOrphans deletes the orphans the metadata says were
// deleted (retention or an operator removed them while this node was
// down) and returns the rest, which are kept. The view may lag in a
// cluster: a delete it does not show yet keeps the file now, and the
// heal pass collects it after a barrier (collectUnlisted).
func (b *Broker) deleteDeletedOrphans(orphans []uint64) []uint64 {
	kept := orphans[:0]
	for _, id := range orphans {
		if !b.wasDeleted(id) {
			kept = append(kept, id)
			continue
		}
		if b.keepLostCopy(id) {
			continue // recorded lost: set aside, never deleted (cluster_lost.go)
		}
		if err := b.store.Delete(storage.SegmentID(id)); err != nil && !errors.Is(err, storage.ErrNotFound) {
			b.log.Warn("deleting a deleted segment's file failed; kept", "segment", id, "err", err)
			kept = append(kept, id)
			continue
		}
		b.log.Info("deleted the file of a segment the metadata deleted", "segment", id)
	}
	return kept
}
