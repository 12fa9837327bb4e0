package control

import (
	"encoding/json"
	"errors"
)

// maxDedup bounds the request ids a group remembers. A proposal retried
// after this many other entries of its group may apply twice; retries
// happen within one caller's context, seconds at most.
const maxDedup = 4096

type dedupKey struct{ origin, req uint64 }

// dedupTable maps recent request ids to their encoded outcomes, forgetting
// the oldest first. It is part of the state machine (and its snapshot), so
// every replica answers a duplicate alike.
type dedupTable struct {
	max   int
	byKey map[dedupKey][]byte
	order []dedupKey // oldest first
}

type dedupRecord struct {
	Origin uint64          `json:"o"`
	Req    uint64          `json:"r"`
	Result json.RawMessage `json:"res"`
}

func newDedupTable(max int) dedupTable {
	return dedupTable{max: max, byKey: make(map[dedupKey][]byte)}
}

func (t *dedupTable) get(k dedupKey) ([]byte, bool) {
	if k.req == 0 {
		return nil, false
	}
	b, ok := t.byKey[k]
	return b, ok
}

func (t *dedupTable) put(k dedupKey, res []byte) {
	if len(t.order) >= t.max {
		delete(t.byKey, t.order[0])
		t.order = t.order[1:]
	}
	t.byKey[k] = res
	t.order = append(t.order, k)
}

func (t *dedupTable) records() []dedupRecord {
	out := make([]dedupRecord, len(t.order))
	for i, k := range t.order {
		out[i] = dedupRecord{Origin: k.origin, Req: k.req, Result: t.byKey[k]}
	}
	return out
}

func dedupFrom(recs []dedupRecord, max int) (dedupTable, error) {
	t := newDedupTable(max)
	if len(recs) > max {
		return t, errors.New("control: snapshot remembers more request ids than the bound")
	}
	for _, r := range recs {
		k := dedupKey{origin: r.Origin, req: r.Req}
		if _, dup := t.byKey[k]; dup || r.Req == 0 {
			return t, errors.New("control: snapshot holds a duplicate or empty request id")
		}
		t.put(k, r.Result)
	}
	return t, nil
}
