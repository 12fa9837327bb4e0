package broker

import (
	"context"
	"fmt"
	"math"
	"path/filepath"

	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/metadata"
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

// LostDeclined counts the segments this node's plans reported lost that
// it did not record lost, a holder being still registered.
func (b *Broker) LostDeclined() uint64 {
	h := &b.cluster.heal
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lostDeclined
}

// HasLocalCopy reports whether this node holds a file of segment id.
func (b *Broker) HasLocalCopy(id uint64) bool { return b.hasFile(id) }

// SegmentLogPath is where this node keeps segment id's batches.
func (b *Broker) SegmentLogPath(id uint64) string {
	return filepath.Join(b.cfg.DataDir, "segments", fmt.Sprintf("%020d.log", id))
}

// QuarantinedCopies lists the files of segment id's copies this node set
// aside in its store's quarantine.
func (b *Broker) QuarantinedCopies(id uint64) []string {
	got, _ := filepath.Glob(filepath.Join(b.cfg.DataDir, "segments", storage.QuarantineDir, fmt.Sprintf("%020d*.log", id)))
	return got
}

// RecordCopyDamaged records in the metadata that node's copy of segment
// id is damaged, as that node's heal pass does once it finds it.
func (b *Broker) RecordCopyDamaged(ctx context.Context, id, node uint64) error {
	_, err := b.apply(ctx, metadata.Command{Kind: metadata.KindMarkCopyDamaged, Segment: id, Node: clusterNodeName(node)})
	return err
}

// StartRebuild asks this node to rebuild its own copy of segment id from
// source, as a plan with this node in Assignment.Rebuild does, and
// reports whether a fill started; the fill runs on the broker's life.
func (b *Broker) StartRebuild(id, source uint64) bool {
	seg, ok := b.segmentByID(id)
	if !ok {
		return false
	}
	self := b.cluster.cfg.NodeID
	return b.startFill(b.life, heal.Assignment{Seal: sealOf(seg), Source: source, Targets: []uint64{self},
		Replicas: replicaIDs(seg), Damaged: []uint64{self}, Rebuild: []uint64{self}})
}

// HealFilling reports whether this node is filling a copy of segment id.
func (b *Broker) HealFilling(id uint64) bool {
	h := &b.cluster.heal
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.filling[id]
	return ok
}
