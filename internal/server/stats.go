package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/metrics/hist"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/wire"
)

// Traffic counters. The hot path pays an atomic add per figure and one
// histogram observation per request; the reasons of refusals, which are
// rare, go to a small map under a lock. Every reason is one of the
// wire's (reason() maps anything else to internal_error), so the map is
// bounded by that set.

// Op names what a traffic counter counts: client produce and fetch
// requests. Subscription pushes count as fetches.
const (
	OpProduce = "produce"
	OpFetch   = "fetch"
)

// ResultOK is the result of a request that succeeded.
const ResultOK = "ok"

// maxReasons bounds the refusal map: the wire has fewer reasons than
// this; anything past it is folded into internal_error.
const maxReasons = 256

type opStats struct {
	ok, records, bytes atomic.Uint64
	latency            *hist.Histogram
	// Produce and fetch counters are written by different goroutines:
	// each keeps to a cache line of its own.
	_ [cacheLine - 32]byte
}

const cacheLine = 64

type trafficStats struct {
	produce, fetch opStats
	// skipsTold counts the records retention deleted that fetch answers
	// and pushes told readers they passed over.
	skipsTold atomic.Uint64
	accepted  atomic.Uint64

	mu      sync.Mutex
	refused map[refusalKey]uint64 // by op ("" for any other request) and reason
	conns   map[string]uint64     // connections refused at accept, by reason
	logins  map[string]uint64     // login results: ok or the refusal's reason
}

type refusalKey struct{ op, reason string }

func newTrafficStats() *trafficStats {
	return &trafficStats{
		produce: opStats{latency: hist.New(hist.LatencyBounds)},
		fetch:   opStats{latency: hist.New(hist.LatencyBounds)},
		refused: map[refusalKey]uint64{},
		conns:   map[string]uint64{},
		logins:  map[string]uint64{},
	}
}

// done records one request of op that began at start: its records and
// bytes when it succeeded, its reason when it did not.
func (t *trafficStats) done(op *opStats, name string, start time.Time, records, bytes int, err error) {
	op.latency.Since(start)
	if err != nil {
		t.refuse(name, reason(err))
		return
	}
	op.ok.Add(1)
	op.records.Add(uint64(records))
	op.bytes.Add(uint64(bytes))
}

func (t *trafficStats) refuse(op, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := refusalKey{op, why}
	if _, ok := t.refused[k]; !ok && len(t.refused) >= maxReasons {
		k.reason = "internal_error"
	}
	t.refused[k]++
}

func (t *trafficStats) connRefused(why string) {
	t.mu.Lock()
	t.conns[why]++
	t.mu.Unlock()
}

// login records a login's result: ok, or the reason it was refused.
func (t *trafficStats) login(err error) {
	r := ResultOK
	if err != nil {
		r = reason(err)
	}
	t.mu.Lock()
	if _, ok := t.logins[r]; ok || len(t.logins) < maxReasons {
		t.logins[r]++
	}
	t.mu.Unlock()
}

// recordBytes is the payload of v1 records: keys and values.
func recordBytes(recs []broker.Record) int {
	n := 0
	for i := range recs {
		n += len(recs[i].Key) + len(recs[i].Value)
	}
	return n
}

// wireBytes is recordBytes of decoded records.
func wireBytes(recs []wire.Record) int {
	n := 0
	for i := range recs {
		n += len(recs[i].Key) + len(recs[i].Value)
	}
	return n
}

// batchRecords counts the records and bytes of stored batches.
func batchRecords(batches []broker.RangeBatch) (records, bytes int) {
	for _, b := range batches {
		bytes += len(b.Batch)
		if h, err := segment.ParseHeader(b.Batch); err == nil {
			records += int(h.RecordCount)
		}
	}
	return records, bytes
}

// pushed records one subscription push as a fetch that succeeded; it has
// no latency of its own (it answers a produce, not a request).
func (t *trafficStats) pushed(p broker.Page, skips bool) {
	records, bytes := len(p.Records), recordBytes(p.Records)
	if p.Batches != nil {
		records, bytes = batchRecords(p.Batches)
	}
	t.fetch.records.Add(uint64(records))
	t.fetch.bytes.Add(uint64(bytes))
	if skips {
		t.skipsTold.Add(p.Skipped)
	}
}

// OpStats are one operation's totals.
type OpStats struct {
	OK      uint64 // requests that succeeded
	Records uint64 // records produced or delivered
	Bytes   uint64 // keys and values of v1 records; stored batch bytes of v2
	Latency hist.Snapshot
}

// Traffic is what the server counted of its clients' requests.
type Traffic struct {
	Produce, Fetch OpStats
	// Refused counts refused requests by operation (OpProduce, OpFetch,
	// or "" for any other request) and reason.
	Refused map[[2]string]uint64
	// SkipsTold counts records retention deleted that answers told
	// readers they passed over.
	SkipsTold uint64
	// Accepted counts connections admitted; ConnRefused those refused
	// at accept, by reason (global_limit_exceeded,
	// connection_limit_exceeded, shutting_down).
	Accepted    uint64
	ConnRefused map[string]uint64
	// Open is the number of connections open now.
	Open int
	// Logins counts login attempts by result: ok or the refusal's
	// reason (invalid_credentials, account_locked, rate_limit_exceeded...).
	Logins map[string]uint64
}

// Traffic reads the traffic counters.
func (s *Server) Traffic() Traffic {
	t := s.traffic
	out := Traffic{
		Produce:   t.produce.snapshot(),
		Fetch:     t.fetch.snapshot(),
		SkipsTold: t.skipsTold.Load(),
		Accepted:  t.accepted.Load(),
		Refused:   map[[2]string]uint64{}, ConnRefused: map[string]uint64{}, Logins: map[string]uint64{},
	}
	t.mu.Lock()
	for k, n := range t.refused {
		out.Refused[[2]string{k.op, k.reason}] = n
	}
	for k, n := range t.conns {
		out.ConnRefused[k] = n
	}
	for k, n := range t.logins {
		out.Logins[k] = n
	}
	t.mu.Unlock()
	s.mu.Lock()
	out.Open = len(s.mu.conns)
	s.mu.Unlock()
	return out
}

func (o *opStats) snapshot() OpStats {
	return OpStats{OK: o.ok.Load(), Records: o.records.Load(), Bytes: o.bytes.Load(), Latency: o.latency.Snapshot()}
}

// fetched records a v1 fetch.
func (t *trafficStats) fetched(start time.Time, resp wire.Response, err error) {
	var records, bytes int
	if fr, ok := resp.(*wire.FetchResponse); ok {
		records, bytes = len(fr.Records), wireBytes(fr.Records)
	}
	t.done(&t.fetch, OpFetch, start, records, bytes, err)
}

// fetchedBatches records a v2 fetch; its skips count as told when the
// request asked for them.
func (t *trafficStats) fetchedBatches(start time.Time, page broker.BatchPage, skips bool, err error) {
	records, bytes := batchRecords(page.Batches)
	t.done(&t.fetch, OpFetch, start, records, bytes, err)
	if err == nil && skips {
		t.skipsTold.Add(page.Skipped)
	}
}

// other records the refusal of any request but produce and fetch.
func (t *trafficStats) other(err error) {
	if err != nil {
		t.refuse("", reason(err))
	}
}
