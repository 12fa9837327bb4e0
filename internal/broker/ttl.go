package broker

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/retention"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// Per-message TTL. The node that receives a produce turns each record's
// TTL into an absolute expiry from its own clock, once, before routing:
// a produce forwarded to the node writing the range carries the expiry
// already stamped, and so does a batch replicated or re-routed after a
// split. A record's TTL is its malachi.ttl_ms header when that parses,
// else the topic's default_ttl_ms, else none. The record's expiry field
// (docs/storage-format.md) is what reads and retention use, and what a
// wire v2 reader decodes. It is not repeated in a header: at ~30 bytes a
// record that costed a third of a small-record consume. A client cannot
// forge the field (it is refused in a client's batch:
// batch.ProduceLimits.AllowExpiry is false), and a malachi.expiry_ms
// header a client sends is removed, so no record carries an expiry
// header a reader could mistake for the node's. Client timestamps play no
// part.

var (
	ttlHeader    = []byte(retention.TTLHeader)
	expiryHeader = []byte(retention.ExpiryHeader)
)

// defaultTTL is the topic's effective default_ttl_ms, 0 when off.
func (b *Broker) defaultTTL(topicID uint64) int64 {
	var bound string
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) {
		if t, ok := st.TopicHeaderByID(topicID); ok {
			bound = t.Policy
		}
	})
	return b.ttlOfBinding(bound)
}

// defaultTTLByName is defaultTTL for a topic named by a produce; an
// unknown topic has none (the produce then fails on routing).
func (b *Broker) defaultTTLByName(topic string) int64 {
	var bound string
	_ = b.plane.ViewTopicName(topic, func(st *metadata.State) {
		if t, ok := st.TopicHeader(topic); ok {
			bound = t.Policy
		}
	})
	return b.ttlOfBinding(bound)
}

// ttlOfBinding is the default_ttl_ms of a topic bound to policy bound.
// The usual topic, bound to none, is answered from the node's defaults
// without resolving a policy.
func (b *Broker) ttlOfBinding(bound string) int64 {
	if bound == "" {
		v, ok := b.cfg.Retention[retention.FieldDefaultTTL]
		if !ok || v.Off {
			return 0
		}
		return max(v.Int, 0)
	}
	ms, on := b.resolvePolicy(bound).DefaultTTLMs()
	if !on {
		return 0
	}
	return ms
}

// stampRecords sets every record's expiry as the node decides it (see the
// top of this file) and returns the records to store. Records are changed
// in place; a record whose headers change gets a headers slice of its own,
// since the caller's may share one backing array.
func stampRecords(recs []Record, defTTL, nowMs int64) []Record {
	for i := range recs {
		stampRecord(&recs[i], defTTL, nowMs)
	}
	return recs
}

func stampRecord(r *Record, defTTL, nowMs int64) {
	ttl, forged := defTTL, false
	for _, h := range r.Headers {
		switch {
		case bytes.Equal(h.Key, ttlHeader):
			if ms, ok := retention.ParseTTL(h.Value); ok {
				ttl = ms
			}
		case bytes.Equal(h.Key, expiryHeader):
			forged = true
		}
	}
	r.Expiry = retention.ExpiryAt(nowMs, ttl)
	if !forged {
		return
	}
	hs := make([]segment.Header, 0, len(r.Headers))
	for _, h := range r.Headers {
		if !bytes.Equal(h.Key, expiryHeader) {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		hs = nil
	}
	r.Headers = hs
}

// stampBatch re-encodes a producer's batch with the expiries the node
// decides, in the batch's own codec at the same offsets. It is called only
// for a batch that needs it (the topic has a default TTL, or a record
// carries a reserved header); every other batch is stored as sent.
func stampBatch(b []byte, defTTL, nowMs int64) ([]byte, error) {
	h, err := segment.ParseHeader(b)
	if err != nil {
		return nil, err
	}
	recs, err := segment.DecodeRecords(b, nil)
	if err != nil {
		return nil, err
	}
	stampRecords(recs, defTTL, nowMs)
	out, err := segment.EncodeBatchAt(nil, recs, h.Codec())
	if err != nil {
		return nil, fmt.Errorf("re-encode with expiries: %w", err)
	}
	return out, nil
}

// stampBatches re-encodes, in place in checked, the batches the TTL
// rules change. A batch that grew past the node's limits by the expiry
// header is refused like any invalid batch, before anything is stored.
func (b *Broker) stampBatches(topicID uint64, checked []checkedBatch, reserved []bool) error {
	defTTL := b.defaultTTL(topicID)
	now := b.nowMs()
	for i := range checked {
		if defTTL == 0 && !reserved[i] {
			continue
		}
		out, err := stampBatch(checked[i].Batch, defTTL, now)
		if err != nil {
			return fmt.Errorf("%w: batch %d: %v", ErrInvalidBatch, i, err)
		}
		checked[i].Batch = out
	}
	return nil
}

// expired says a record's expiry has passed at nowMs.
func expired(r *Record, nowMs int64) bool { return r.Expiry != 0 && r.Expiry <= nowMs }

// batchExpiry is what a read does with one stored batch under TTL.
type batchExpiry uint8

const (
	expiryNone batchExpiry = iota // no record has expired: serve as stored
	expiryAll                     // every record has expired: drop the batch
	expirySome                    // some have: filter its records
)

// expiryMemo remembers, per stored batch of one topic, the earliest expiry
// of its records, so that a batch read again (by another reader, or the
// same one later) is classified without walking its records: stored
// batches never change. It is bounded: past maxExpiryMemo batches it
// starts over, and a batch it forgot is walked again.
type expiryMemo struct {
	mu sync.Mutex
	m  map[batchAt]int64
}

// batchAt names a stored batch: its segment and base offset.
type batchAt struct{ seg, base uint64 }

// maxExpiryMemo bounds the batches a topic's memo holds: about 40 bytes
// each, for the batches its readers met last.
const maxExpiryMemo = 4096

func (e *expiryMemo) get(k batchAt) (int64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v, ok := e.m[k]
	return v, ok
}

func (e *expiryMemo) put(k batchAt, minExpiry int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil || len(e.m) >= maxExpiryMemo {
		e.m = make(map[batchAt]int64, 64)
	}
	e.m[k] = minExpiry
}

// expiryOf classifies stored batch k (bytes b, header h) at nowMs. A batch
// without the expiry flag (every batch of a topic with no TTL) costs a
// header read; one whose max expiry has passed is dropped whole; for the
// others the earliest expiry of the records is found once, with a walk of
// them that materialises nothing, and kept in the topic's memo, so a later
// read of the batch compares it with the clock. A batch some of whose
// records expired is filtered; one the filter leaves empty moves the
// reader on like one dropped whole.
func expiryOf(memo *expiryMemo, k batchAt, b []byte, h segment.BatchHeader, nowMs int64) (batchExpiry, error) {
	switch {
	case !h.HasExpiry():
		return expiryNone, nil
	case h.MaxExpiry != 0 && h.MaxExpiry <= nowMs:
		return expiryAll, nil
	}
	first, ok := int64(0), false
	if memo != nil {
		first, ok = memo.get(k)
	}
	if !ok {
		var err error
		if first, err = batch.MinExpiry(b); err != nil {
			return expiryNone, err
		}
		if memo != nil {
			memo.put(k, first)
		}
	}
	if first == 0 || first > nowMs {
		return expiryNone, nil
	}
	return expirySome, nil
}
