package client

import (
	"time"
	"unsafe"

	batchfmt "github.com/malachi-log/malachi/internal/batch"
)

// Wire v2 records accumulate per range, across requests: a topic's
// records are encoded into one stored batch (a part) per range as they are
// produced, and a request is cut from the parts that are ready only when
// the sender has an in-flight slot for it. A topic of many ranges thus
// gets stored batches of many records each, however few of them one
// request holds per range: the node's work, the journal's, a fetch's and
// a consumer's all go per stored batch.
//
// A part is ready once it has lingered (Linger since its first record), is
// full (the node's batch limits), or holds RangeBatchBytes; a request is
// cut once a part has lingered or the ready parts fill one, and then takes
// the ready parts oldest first, up to the request's bounds. Flush, Close,
// a full buffer, a change of routes and a record going with wire v1 make
// every part ready. The sender leaves half the buffer to accumulation: it
// cuts nothing while the records sealed into requests and not yet resolved
// fill half of MaxBufferedRecords or MaxBufferedBytes (unless nothing is),
// so that a buffer full of requests in flight does not leave each range a
// few records to send next.
//
// A part encodes its records into small pooled chunks (a chunked
// batchfmt.Builder). A request writes its uncompressed batches from them
// straight into its frame, each time it is sent (partsRequest), and hands
// them back once answered; a compressed request finishes its batches from
// them into one buffer at seal time. At many ranges a record thus lands in
// a small, recently used chunk rather than in one of as many large, partly
// filled buffers, which cost a producer at 1,024 ranges more in page
// faults and TLB misses than its encoding. A part's first chunk, and its
// bookkeeping, count in the buffer's bytes (partCost), so that parts of a
// few records each, over many topics and ranges, stay within
// MaxBufferedBytes too.

// accum is a topic's wire v2 records not yet in a request, built for one
// route table and one negotiation.
type accum struct {
	table *routeTable
	lim   wireInfo
	caps  v2Caps
	// open holds, per range of table, the part taking its records: nil
	// until the range takes one, and again once its part is full.
	open []*rpart
	// parts holds every part not yet in a request, in the order they
	// were opened, which keeps each range's parts in order and puts the
	// oldest first.
	parts []*rpart
	// readyN and readyBytes count the records and request bytes of the
	// parts ready whatever their age (full, or past RangeBatchBytes).
	readyN, readyBytes int
	// timer wakes the sender when timerFor, the oldest part when it was
	// armed, has lingered. A request may take that part early: the timer
	// is then armed again for the part oldest now (armLocked).
	timer    *time.Timer
	timerFor *rpart
}

// rpart is one range's stored batch while it accumulates records.
type rpart struct {
	idx int              // in the accum's table
	b   batchfmt.Builder // chunked
	kept
	// opened is when its first record was produced (see batch.opened).
	opened     time.Time
	openedNano int64
	// full is set once it takes no more records, ready once it counts
	// in the accum's ready totals.
	full, ready bool
}

// size is what p adds to a produce_batches request.
func (pt *rpart) size() int { return pt.b.RawLen() + batchOverhead }

// partCost is what a part holds besides its records' encoding, counted
// in the buffered bytes of the record that opens it: its first chunk, its
// bookkeeping and its places in the accumulation's lists.
const partCost = batchfmt.FirstChunkSize + int(unsafe.Sizeof(rpart{})) + 2*int(unsafe.Sizeof(&rpart{}))

// v2Dest is where Produce puts a wire v2 record: range idx of table, as
// negotiated in info; size bounds its encoding. into is the part that
// takes it, nil if it opens one (placeLocked).
type v2Dest struct {
	table *routeTable
	info  *wireInfo
	idx   int
	size  int
	into  *rpart
}

// placeLocked finds the part a record for d goes into in topic's
// accumulation, d.into: the range's open part, if built for d's routes and
// negotiation and with room for it; nil if the record opens a part. It
// returns what the record adds to the buffer besides its own cost:
// partCost if it opens a part, else nothing.
func (p *Producer) placeLocked(topic string, d *v2Dest) int {
	if d == nil {
		return 0
	}
	d.into = nil
	t := p.last
	if t == nil || t.name != topic {
		t = p.topics[topic]
	}
	if t == nil || t.acc == nil {
		return partCost
	}
	a := t.acc
	if a.table != d.table || a.lim != *d.info {
		return partCost
	}
	if pt := a.open[d.idx]; pt != nil && pt.b.RawLen()+d.size <= a.caps.partBytes {
		d.into = pt
		return 0
	}
	return partCost
}

// addV2Locked encodes rec, of cost buffered bytes (partCost included if it
// opens a part), into d.into, or into a part it opens for d's range in t's
// accumulation; p.mu has been held since placeLocked found d.into. It
// reads the clock only as a monotonic offset from the part's opening, and
// keeps rec only if it has a promise: a record without one costs its
// encoding and little else.
func (p *Producer) addV2Locked(t *topicState, rec *Record, promise func(Record, error), cost int, d *v2Dest) {
	if t.fill != nil {
		p.sealLocked(t) // wire v1 records produced before: they go first
	}
	pt := d.into
	if pt == nil {
		pt = p.openPartLocked(t, d)
	}
	a := t.acc
	var ms int64
	if rec.Timestamp.IsZero() {
		since := time.Since(pt.opened)
		ms = max((pt.openedNano+int64(since))/int64(time.Millisecond), 0)
		if promise != nil {
			rec.Timestamp = pt.opened.Add(since) // the promise sees the time sent
		}
	} else {
		ms = max(rec.Timestamp.UnixMilli(), 0)
	}
	before := pt.b.RawLen()
	addRecord(&pt.b, rec, ms)
	pt.keep(*rec, promise, cost)
	p.accN++
	p.accBytes += cost
	if pt.ready {
		a.readyN++
		a.readyBytes += pt.b.RawLen() - before
	}
	switch {
	case pt.b.Len() >= a.caps.partRecords || pt.b.RawLen() >= a.caps.partBytes:
		p.closePartLocked(t, pt)
	case !pt.ready && pt.b.RawLen() >= p.opt.RangeBatchBytes:
		p.readyLocked(t, pt)
	}
	if p.opt.Linger < 0 || pt.ready && a.fills() {
		p.signalLocked(p.wake)
	}
}

// openPartLocked opens a part for d's range in t's accumulation, which it
// makes for d's routes and negotiation if t has none for them, and ends
// the range's open part (full for the record).
func (p *Producer) openPartLocked(t *topicState, d *v2Dest) *rpart {
	a := t.acc
	if a != nil && (a.table != d.table || a.lim != *d.info) {
		p.drainLocked(t)
		a = nil
	}
	if a == nil {
		a = &accum{table: d.table, lim: *d.info, caps: p.v2Caps(d.info), open: make([]*rpart, len(d.table.ranges))}
		t.acc = a
	}
	if old := a.open[d.idx]; old != nil {
		p.closePartLocked(t, old)
	}
	now := time.Now()
	pt := &rpart{idx: d.idx, opened: now, openedNano: now.UnixNano()}
	pt.b.Chunked()
	a.open[d.idx] = pt
	a.parts = append(a.parts, pt)
	p.armLocked(t)
	return pt
}

// closePartLocked ends pt's intake: the range's next record opens a new
// part.
func (p *Producer) closePartLocked(t *topicState, pt *rpart) {
	pt.full = true
	if t.acc.open[pt.idx] == pt {
		t.acc.open[pt.idx] = nil
	}
	p.readyLocked(t, pt)
}

// readyLocked counts pt as ready, and wakes the sender if the ready parts
// now fill a request.
func (p *Producer) readyLocked(t *topicState, pt *rpart) {
	if pt.ready {
		return
	}
	a := t.acc
	pt.ready = true
	a.readyN += pt.n
	a.readyBytes += pt.size()
	if a.fills() {
		p.signalLocked(p.wake)
	}
}

// fills reports whether a's ready parts fill a request (or more).
func (a *accum) fills() bool {
	return a.readyN >= a.caps.records || a.readyBytes >= a.caps.bytes
}

// lingered reports whether pt has waited Linger.
func (p *Producer) lingered(pt *rpart, now time.Time) bool {
	return p.opt.Linger < 0 || now.Sub(pt.opened) >= p.opt.Linger
}

// armLocked arms t's linger timer for when its oldest part will have
// lingered, unless it is armed for that part already; with no part waiting
// it stops the timer. A part that has lingered already arms nothing: the
// sender could not take it (no slot, the topic held for retries), and is
// woken when it can, and then cuts it or arms again (cutLocked).
func (p *Producer) armLocked(t *topicState) {
	a := t.acc
	if a == nil || p.opt.Linger < 0 {
		return
	}
	if a.timer != nil && (len(a.parts) == 0 || a.timerFor != a.parts[0]) {
		// A callback already past Stop finds a.timer changed and only
		// wakes the sender.
		a.timer.Stop()
		a.timer, a.timerFor = nil, nil
	}
	if a.timer != nil || len(a.parts) == 0 {
		return
	}
	d := p.opt.Linger - time.Since(a.parts[0].opened)
	if d <= 0 {
		p.signalLocked(p.wake)
		return
	}
	var tm *time.Timer
	tm = time.AfterFunc(d, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if a.timer == tm {
			a.timer, a.timerFor = nil, nil
		}
		p.signalLocked(p.wake)
	})
	a.timer, a.timerFor = tm, a.parts[0]
}

// cutLocked seals a request of t's ready parts, oldest first, up to the
// request's bounds; nil if no request is due. all makes every part ready.
// A part not taken keeps its place, and once one ready part does not fit
// nothing after it is taken, so each range's parts go out in order.
// Whatever it returns, the linger timer is left armed for the oldest part
// still waiting: the timer that woke the sender may have been armed for a
// part a request took since, and nothing else would arm it again.
func (p *Producer) cutLocked(t *topicState, all bool) *batch {
	a := t.acc
	if len(a.parts) == 0 {
		return nil
	}
	now := time.Now()
	if !all && !a.fills() && !p.lingered(a.parts[0], now) {
		p.armLocked(t)
		return nil
	}
	first := a.parts[0]
	b := &batch{topic: t, table: a.table, lim: a.lim, caps: a.caps, opened: first.opened, openedNano: first.openedNano}
	// took marks the ranges whose full part this request took: their open
	// part follows it if it fits, ready or not.
	var took map[int]bool
	w, stopped := 0, false
	for _, pt := range a.parts {
		if !stopped && (all || pt.ready || took[pt.idx] || p.lingered(pt, now)) {
			if b.takes(pt) {
				p.takeLocked(t, b, pt)
				if pt.full {
					if took == nil {
						took = make(map[int]bool)
					}
					took[pt.idx] = true
				}
				continue
			}
			stopped = true
		}
		a.parts[w] = pt
		w++
	}
	clear(a.parts[w:])
	a.parts = a.parts[:w]
	p.armLocked(t)
	p.enqueueLocked(t, b)
	return b
}

// takes reports whether part pt fits in request b; an empty request takes
// any part (a part is within the bounds of a request by construction).
func (b *batch) takes(pt *rpart) bool {
	if len(b.parts) == 0 {
		return true
	}
	c := &b.caps
	return len(b.parts) < maxRequestBatches && b.n+pt.n <= c.records && b.bytes+pt.size() <= c.bytes
}

// takeLocked moves part pt from t's accumulation into request b.
func (p *Producer) takeLocked(t *topicState, b *batch, pt *rpart) {
	a := t.acc
	if a.open[pt.idx] == pt {
		a.open[pt.idx] = nil
	}
	if pt.ready {
		a.readyN -= pt.n
		a.readyBytes -= pt.size()
	}
	p.accN -= pt.n
	p.accBytes -= pt.held
	b.parts = append(b.parts, part{idx: pt.idx, b: &pt.b})
	b.bytes += pt.size()
	b.n += pt.n
	b.values += pt.values
	b.held += pt.held
	b.recs = append(b.recs, pt.recs...)
	b.promises = append(b.promises, pt.promises...)
	pt.kept = kept{} // b has them; the part lives on only for its builder
}

// accumulating reports whether t has records not yet in a request. An
// emptied accumulation stays while its routes do, and leaves with its
// topic (popLocked), which spares a topic of many ranges a new table of
// parts every time a request takes them all.
func (t *topicState) accumulating() bool { return t.acc != nil && len(t.acc.parts) > 0 }

// drainLocked seals every record of t's accumulation into requests, in
// order, queued for the sender, and drops the accumulation.
func (p *Producer) drainLocked(t *topicState) {
	for t.accumulating() {
		p.sendq = append(p.sendq, p.cutLocked(t, true))
	}
	t.acc = nil
	p.signalLocked(p.wake)
}

// cutAnyLocked seals a request from some topic's accumulation, if one is
// due and the buffer has room for it to be in flight (see the top of this
// file); nil otherwise.
func (p *Producer) cutAnyLocked() *batch {
	if p.stop.Err() != nil || len(p.slots) == cap(p.slots) {
		return nil
	}
	if n := p.buffered - p.accN; n > 0 && (2*n >= p.opt.MaxBufferedRecords || 2*(p.bufferedBytes-p.accBytes) >= p.opt.MaxBufferedBytes) {
		return nil
	}
	for _, t := range p.topics {
		if !t.accumulating() || t.waiting() {
			continue
		}
		if b := p.cutLocked(t, p.pressed); b != nil {
			return b
		}
	}
	return nil
}
