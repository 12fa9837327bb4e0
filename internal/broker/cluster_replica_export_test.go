package broker

import "github.com/malachi-log/malachi/internal/storage"

// LocalDurableEnd is where this node's copy of segment id is fsynced
// to, 0 when it keeps none.
func (b *Broker) LocalDurableEnd(id uint64) uint64 {
	_, d, err := b.store.Ends(storage.SegmentID(id))
	if err != nil {
		return 0
	}
	return d
}

// ServedBound is how far this node serves another node's read of its
// copy of segment id (the data plane's answer).
func (b *Broker) ServedBound(id, upTo uint64) (uint64, error) { return b.servedBound(id, upTo) }

// ForgetReplica drops the replica host's state of segment id, as a
// restart would; the store's copy stays.
func (b *Broker) ForgetReplica(id uint64) { b.replicas().Drop(id) }

// DeleteLocalFile deletes this node's file of segment id, leaving the
// replica host's state alone: the copy answers reads "not found".
func (b *Broker) DeleteLocalFile(id uint64) error { return b.store.Delete(storage.SegmentID(id)) }
