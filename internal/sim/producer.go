package sim

import (
	"encoding/binary"
	"fmt"

	"github.com/malachi-log/malachi/internal/batch"
)

// recID names a record: the producer that made it and its sequence.
type recID struct{ producer, seq uint64 }

func (r recID) String() string { return fmt.Sprintf("p%d#%d", r.producer, r.seq) }

func encodeValue(r recID) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, r.producer), r.seq)
}

func decodeValue(v []byte) (recID, bool) {
	if len(v) != 16 {
		return recID{}, false
	}
	return recID{binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])}, true
}

// producer is a client: one produce in flight at a time, to its home
// node first, any other node after a failure. A refusal that says the
// batch was not appended sends the same records again; an unknown
// outcome gives them up (they may appear once, or never).
type producer struct {
	w        *world
	idx      int
	addr     uint64
	home     uint64
	keys     map[uint64][][]byte // by range
	rangeIDs []uint64
	seq      uint64
	nextReq  uint64
	inflight *attempt
	to       uint64
}

type attempt struct {
	id    uint64
	rng   uint64
	recs  []recID
	keys  [][]byte
	batch []byte
}

func newProducer(w *world, idx int) *producer {
	p := &producer{w: w, idx: idx, addr: clientBase + uint64(idx), keys: map[uint64][][]byte{}}
	p.home = uint64(idx%len(w.nodes)) + 1
	p.to = p.home
	for k := range w.cfg.Keys {
		key := fmt.Appendf(nil, "k%d-%d", idx, k)
		r := w.rangeOf(key)
		if len(p.keys[r]) == 0 {
			p.rangeIDs = append(p.rangeIDs, r)
		}
		p.keys[r] = append(p.keys[r], key)
	}
	return p
}

// next sends a new batch of one to three records to one range.
func (p *producer) next() {
	w := p.w
	if w.stopping || p.inflight != nil {
		return
	}
	r := p.rangeIDs[w.rng.IntN(len(p.rangeIDs))]
	a := &attempt{rng: r}
	var recs []batch.Record
	for range 1 + w.rng.IntN(3) {
		p.seq++
		id := recID{uint64(p.idx), p.seq}
		key := p.keys[r][w.rng.IntN(len(p.keys[r]))]
		a.recs, a.keys = append(a.recs, id), append(a.keys, key)
		recs = append(recs, batch.Record{Timestamp: w.unixNow(), Key: key, Value: encodeValue(id)})
	}
	b, err := batch.EncodeBatch(nil, 0, recs, batch.CodecNone)
	if err != nil {
		w.chk.fail("setup", "encoding a batch: %v", err)
		return
	}
	a.batch = b
	w.chk.sent(a)
	p.send(a)
}

func (p *producer) send(a *attempt) {
	w := p.w
	p.nextReq++
	a.id = p.nextReq
	p.inflight = a
	w.note('P', p.addr, a.id, p.to)
	req := produceReq{Client: p.addr, ID: a.id, Range: a.rng, Batch: a.batch}
	w.net.send(p.addr, p.to, packet{req: &req})
	w.after(w.cfg.ClientTimeout, func() {
		if p.inflight == a && a.id == req.ID {
			p.giveUp(a)
		}
	})
}

// giveUp ends an attempt whose outcome is unknown.
func (p *producer) giveUp(a *attempt) {
	w := p.w
	w.chk.maybe(a)
	p.inflight = nil
	p.to = uint64(w.rng.IntN(len(w.nodes))) + 1
	w.after(w.between(10, 50), p.next)
}

func (p *producer) onReply(r produceResp) {
	w := p.w
	a := p.inflight
	if a == nil || r.ID != a.id {
		return // a late answer to an attempt already ended
	}
	switch r.Reason {
	case "":
		w.chk.acked(a, r.Segment, r.Base)
		p.inflight = nil
		w.after(w.between(1, 10), p.next)
	case reasonUnknown:
		w.stats.Refusals[r.Reason]++
		p.giveUp(a)
	case reasonUnavailable, reasonNotOwner, reasonNoQuorum, reasonRetry:
		w.stats.Refusals[r.Reason]++
		w.stats.Retried++
		p.inflight = nil
		if w.chance(0.3) {
			p.to = uint64(w.rng.IntN(len(w.nodes))) + 1
		}
		w.after(w.between(20, 80), func() {
			if p.inflight == nil {
				p.send(a)
			}
		})
	default:
		w.chk.fail("client", "producer %d: produce refused for good: %s", p.idx, r.Reason)
		p.inflight = nil
		w.chk.maybe(a)
	}
}
