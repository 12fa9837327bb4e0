package storage

import "sync"

// knownIDsMax bounds the ids knownIDs holds one by one: 8,192 map
// entries, about 300 KiB.
const knownIDsMax = 8192

// knownIDs holds every segment id a file in the store's directory may
// have been named after since Open began: those Open found, those the
// journal's replay named, and those this run created. A create of an id
// it does not hold has no predecessor whose sidecars could be left over,
// so it skips looking for them (four unlinks of missing names and the
// directory lookups behind them: a third of a new segment's cost).
//
// Every file named after an id is written either by a create, which
// notes the id first, or for a segment the store holds, whose id was
// noted when it was created, found or replayed: so an id never noted has
// no file.
//
// Above floor the ids are held one by one. Once more than max are held,
// floor rises to the highest and the set empties: every id at or below
// floor counts as known, as if noted. That only makes creates look for
// leftovers they need not; a predecessor's files are never missed. The
// exact set matters for creates that run at once: ids handed out in
// order reach the store out of order, and a ceiling alone (the highest
// id noted) made every create below the highest so far look.
type knownIDs struct {
	mu    sync.Mutex
	max   int
	floor SegmentID
	above map[SegmentID]struct{}
}

func newKnownIDs() *knownIDs {
	return &knownIDs{max: knownIDsMax, above: make(map[SegmentID]struct{})}
}

// note records that a file named after id may exist.
func (k *knownIDs) note(id SegmentID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if id <= k.floor {
		return
	}
	k.above[id] = struct{}{}
	if len(k.above) <= k.max {
		return
	}
	for held := range k.above {
		k.floor = max(k.floor, held)
	}
	clear(k.above)
}

// known reports whether a file named after id may exist.
func (k *knownIDs) known(id SegmentID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if id <= k.floor {
		return true
	}
	_, ok := k.above[id]
	return ok
}
