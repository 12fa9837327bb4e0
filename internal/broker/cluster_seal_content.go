package broker

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
)

// skipContentOnSeal, set only by tests, leaves the recording to the
// scrub, as when every holder's attempt after its seal missed the control
// plane.
var skipContentOnSeal atomic.Bool

// skipSealCopy, set only by tests, makes holders skip sealing their
// copies, as when SealCopy timed out.
var skipSealCopy atomic.Bool

// recordSealContent fills in what a failover's seal could not know: once
// this node's copy of seg is sealed at the recorded end, its footer's
// records, bytes, expiry and content hash go to the control plane
// (record_seal_content; the first holder's lands, the others change
// nothing). Without them retention would count the segment empty, a
// whole-segment TTL expiry would never fire, describe would show zero
// records, and heals would copy it unverified. A seal that already has a
// content hash (a roll's) is left alone; an empty segment has nothing to
// record.
func (b *Broker) recordSealContent(ctx context.Context, seg metadata.Segment) {
	if seg.ContentHash != 0 || seg.End <= seg.Base {
		return
	}
	in, err := b.store.Info(storage.SegmentID(seg.ID))
	if err != nil || in.Footer == nil || in.Footer.End != seg.End || in.Footer.ContentHash == 0 {
		return
	}
	ft := in.Footer
	_, err = b.apply(ctx, metadata.Command{
		Kind: metadata.KindRecordSealContent, Segment: seg.ID, End: ft.End, Records: ft.Records,
		Bytes: ft.Bytes, MaxExpiry: ft.MaxExpiry, ContentHash: ft.ContentHash, Generation: ft.Generation,
	})
	if err != nil && !errors.Is(err, metadata.ErrNoSuchSegment) {
		// Another holder's seal, or the next scrub that finds a copy
		// whole, tries again; until then the segment reads as before.
		b.log.Warn("recording a failed-over segment's content failed", "segment", seg.ID, "end", seg.End, "err", err)
	}
}
