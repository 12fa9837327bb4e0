package broker

import (
	"context"
	"fmt"
	"math"
	"path/filepath"

	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/storage"
)

// VerifyLocalCopy verifies this node's copy of segment id against the
// seal the metadata recorded.
func (b *Broker) VerifyLocalCopy(id uint64) (heal.Verdict, error) {
	seg, ok := b.segmentByID(id)
	if !ok || seg.Active {
		return heal.Verdict{}, fmt.Errorf("segment %d is not sealed in the metadata here", id)
	}
	return heal.Verify(sealOf(seg), b.storeReader(context.Background(), storage.SegmentID(id), nil), 0), nil
}

// LocalCopyBytes is every stored batch of this node's copy of segment
// id, verbatim.
func (b *Broker) LocalCopyBytes(id uint64) ([]byte, error) {
	var out []byte
	from := uint64(0)
	for {
		page, next, err := b.store.Read(storage.SegmentID(id), from, 1<<20, math.MaxUint64)
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			return out, nil
		}
		out = append(out, page...)
		from = next
	}
}

// HasLocalCopy reports whether this node holds a file of segment id.
func (b *Broker) HasLocalCopy(id uint64) bool { return b.hasFile(id) }

// SegmentLogPath is where this node keeps segment id's batches.
func (b *Broker) SegmentLogPath(id uint64) string {
	return filepath.Join(b.cfg.DataDir, "segments", fmt.Sprintf("%020d.log", id))
}
