package broker

import "github.com/malachi-log/malachi/internal/storage"

// SealContentHashes answers segment id's content hash as the metadata
// records it and as this node's sealed copy's footer has it (0 when the
// node has no sealed copy).
func (b *Broker) SealContentHashes(id uint64) (recorded, local uint64) {
	if seg, ok := b.segmentByID(id); ok {
		recorded = seg.ContentHash
	}
	if in, err := b.store.Info(storage.SegmentID(id)); err == nil && in.Footer != nil {
		local = in.Footer.ContentHash
	}
	return recorded, local
}

// SkipSealCopy makes holders leave their copies of sealed segments
// unsealed, as a SealCopy that timed out does; the returned func restores
// them.
func SkipSealCopy() func() {
	skipSealCopy.Store(true)
	return func() { skipSealCopy.Store(false) }
}

// SkipContentOnSeal makes holders leave a failover seal's content to the
// scrub; the returned func restores them.
func SkipContentOnSeal() func() {
	skipContentOnSeal.Store(true)
	return func() { skipContentOnSeal.Store(false) }
}
