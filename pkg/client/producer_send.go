package client

import (
	"errors"
	"slices"
	"time"

	batchfmt "github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/wire"
)

// The Producer's send path: one sender goroutine writes sealed batches in
// seal order; a goroutine per batch in flight awaits its answer; failed
// batches worth another attempt hold their topic until its batches in
// flight are answered, then go out again in order (retryLocked).

// sendLoop writes sealed batches to the connection, one at a time and in
// seal order, while at most MaxInFlight await their answers. A batch of a
// topic held for retries is parked with the topic instead.
func (p *Producer) sendLoop() {
	defer p.sender.Done()
	for {
		b := p.nextToSend()
		if b == nil {
			return
		}
		if p.stop.Err() != nil {
			p.answered(b, ErrClosed)
			continue
		}
		select {
		case p.slots <- struct{}{}:
			if p.parkAfterWait(b) {
				p.freeSlot()
				continue
			}
			p.send(b)
		case <-p.stop.Done():
			p.answered(b, ErrClosed)
		}
	}
}

// nextToSend waits for a sealed batch of a topic that is not held; nil
// once the producer stops and nothing is left to send.
func (p *Producer) nextToSend() *batch {
	for {
		p.mu.Lock()
		for len(p.sendq) > 0 {
			b := p.sendq[0]
			p.sendq[0] = nil
			p.sendq = p.sendq[1:]
			if p.waitsLocked(b) {
				parkLocked(b)
				continue
			}
			takeLocked(b)
			p.mu.Unlock()
			return b
		}
		if b := p.cutAnyLocked(); b != nil {
			takeLocked(b)
			p.mu.Unlock()
			return b
		}
		p.mu.Unlock()
		select {
		case <-p.wake:
		case <-p.stop.Done():
			p.mu.Lock()
			p.sealAllLocked() // to fail with ErrClosed
			empty := len(p.sendq) == 0
			p.mu.Unlock()
			if empty {
				return nil
			}
		}
	}
}

// waitsLocked reports whether b must wait, parked with its topic, rather
// than go out now: while its topic waits (waiting); and, for a batch sent
// again, while anything of its topic is in flight. Batches sent again
// thus go out one at a time, and the rest of the topic after them: a
// second refusal of one of them cannot find a newer batch stored
// meanwhile, which would fail it rather than retry it. Once the producer
// stops, nothing waits.
//
// REQUIRES: p.mu held.
func (p *Producer) waitsLocked(b *batch) bool {
	if p.stop.Err() != nil {
		return false
	}
	return b.topic.waiting() || b.attempts > 0 && b.topic.inflight > 0
}

// waiting reports whether t's batches must wait rather than go out: while
// t is held for retries; while a batch of it that is sent again is in
// flight, so that nothing newer can be stored before it has been; and
// while older batches are parked, so that nothing newer goes ahead of
// them.
//
// REQUIRES: p.mu held.
func (t *topicState) waiting() bool {
	return t.held || t.resending > 0 || len(t.parked) > 0
}

// parkLocked sets b aside with its topic, in seal order, until
// unholdLocked hands the topic's parked batches back to the sender.
//
// REQUIRES: p.mu held.
func parkLocked(b *batch) {
	t := b.topic
	i := len(t.parked)
	for i > 0 && t.parked[i-1].seq > b.seq {
		i--
	}
	t.parked = slices.Insert(t.parked, i, b)
}

// takeLocked counts b in flight with its topic; answered, or untakeLocked,
// undoes it.
//
// REQUIRES: p.mu held.
func takeLocked(b *batch) {
	b.topic.inflight++
	if b.attempts > 0 {
		b.topic.resending++
	}
}

func untakeLocked(b *batch) {
	b.topic.inflight--
	if b.attempts > 0 {
		b.topic.resending--
	}
	if b.topic.inflight == 0 {
		b.topic.on = nil
	}
}

// parkAfterWait looks again at a batch the sender took before it waited
// for an in-flight slot: an answer that came meanwhile (the one that freed
// the slot, say) may have held its topic for retries. Sending the batch
// then would store it ahead of the failed ones, which could then only
// fail. It reports whether b was parked instead.
func (p *Producer) parkAfterWait(b *batch) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	untakeLocked(b)
	if !p.waitsLocked(b) {
		takeLocked(b)
		return false
	}
	p.parkTakenLocked(b)
	return true
}

// parkOffConn sets b aside, rather than send it on cn, while batches of
// its topic are in flight on another connection. That one broke: their
// answers are lost, but the goroutines awaiting them may not have taken
// the loss yet, so the topic is not held for retries. Sent now on cn, b
// would be stored ahead of them, and they could then only fail. Parked,
// it goes out after they are answered, behind those sent again. It
// reports whether b was parked; otherwise cn is the topic's connection.
func (p *Producer) parkOffConn(b *batch, cn *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := b.topic
	if t.on == nil || t.on == cn || p.stop.Err() != nil {
		t.on = cn
		return false
	}
	untakeLocked(b)
	p.parkTakenLocked(b)
	return true
}

// parkTakenLocked parks b, which the sender took and has just counted out
// of flight, and moves its topic on: that may have been the last of its
// batches in flight.
//
// REQUIRES: p.mu held.
func (p *Producer) parkTakenLocked(b *batch) {
	parkLocked(b)
	p.settleLocked(b.topic)
}

// settleLocked moves a topic on once one of its batches is no longer in
// flight: a held topic with nothing in flight has its failed batches
// decided (retryLocked); a topic whose batch sent again was answered lets
// the sender take its parked batches.
//
// REQUIRES: p.mu held.
func (p *Producer) settleLocked(t *topicState) {
	switch {
	case t.held && t.inflight == 0:
		p.retryLocked(t)
	case !t.held && t.resending == 0 && t.inflight == 0 && len(t.parked) > 0:
		p.unholdLocked(t)
	}
}

// send writes one batch, holding an in-flight slot, and leaves a goroutine
// waiting for its answer. A batch that could not be written because no
// connection could be had is retried here, before anything later is sent,
// so the retry keeps the order. A batch whose topic still has batches in
// flight on a connection that broke is parked instead (parkOffConn).
func (p *Producer) send(b *batch) {
	for attempt := 1; ; attempt++ {
		cn, err := p.c.conn(p.stop)
		if err == nil {
			if p.parkOffConn(b, cn) {
				p.freeSlot()
				return
			}
			req, err := p.request(b, cn)
			if err != nil {
				p.fail(b, err)
				return
			}
			cl := newCall()
			start := time.Now()
			corr, err := cn.send(req, cl)
			if err != nil {
				// A write that failed part way may have reached the
				// broker: retried in order, as a lost answer is.
				p.fail(b, err)
				return
			}
			go p.await(cn, corr, cl, b, start)
			return
		}
		if attempt >= p.c.cfg.retryAttempts || !shouldRetry(err, false, false) || sleep(p.stop, p.c.backoff(attempt)) != nil {
			p.fail(b, err)
			return
		}
	}
}

// request is the produce request of b on cn: produce_batches for a batch
// built for wire v2 when cn speaks it as negotiated when the batch was
// built, else a wire v1 produce (a v2 batch is decoded back to records
// for it, which keeps each key's records in order). Uncompressed batches
// are written from their parts' chunks straight into each request frame
// (partsRequest), which a retry writes again; compressed ones were
// finished at seal time.
func (p *Producer) request(b *batch, cn *conn) (wire.Request, error) {
	if b.table == nil {
		return wire.ProduceRequest{Topic: str(b.topic.name), Records: b.wrecs}, nil
	}
	if b.finished != nil {
		<-b.finished
	}
	if b.finishErr != nil {
		return nil, b.finishErr
	}
	b.v2 = cn.v2 && cn.wire == b.lim
	if b.finished == nil {
		for _, pt := range b.parts {
			if err := pt.b.Check(batchfmt.CodecNone); err != nil {
				return nil, batchError(err)
			}
		}
		if b.v2 {
			return partsRequest{b}, nil
		}
	} else if b.v2 {
		return wire.ProduceBatchesRequest{Topic: str(b.topic.name), Batches: b.out}, nil
	}
	var recs []Record
	if b.finished == nil {
		buf := make([]byte, 0, b.bytes) // the records alias it
		for _, pt := range b.parts {
			start := len(buf)
			buf = pt.b.AppendBatch(buf)
			var err error
			if recs, err = decodeBatch(buf[start:], 0, recs); err != nil {
				return nil, err // our own encoding: cannot happen
			}
		}
	}
	for _, rb := range b.out {
		var err error
		if recs, err = decodeBatch(rb.Batch, 0, recs); err != nil {
			return nil, err // our own encoding: cannot happen
		}
	}
	wrecs := make([]wire.Record, len(recs))
	for i := range recs {
		wrecs[i] = toWire(&recs[i], time.Time{})
	}
	// recs alias the batches, which must outlive the send.
	return wire.ProduceRequest{Topic: str(b.topic.name), Records: wrecs}, nil
}

// partsRequest is the produce_batches request of an uncompressed batch b:
// its payload is written from b's parts, the chunks their records were
// encoded into, so that a batch is copied once on its way out, into the
// frame.
type partsRequest struct{ b *batch }

func (partsRequest) APIKey() uint16 { return wire.KeyProduceBatches }

func (r partsRequest) AppendPayload(dst []byte) []byte {
	b := r.b
	// Room for it all at once: appended chunk by chunk, the frame would
	// otherwise grow (and be copied) in many steps.
	n := len(b.topic.name) + 16
	for _, pt := range b.parts {
		n += 8 + 4 + batchfmt.HeaderSize + pt.b.RawLen()
	}
	return wire.AppendProduceBatchesPayload(slices.Grow(dst, n), str(b.topic.name), len(b.parts),
		func(i int) uint64 { return b.table.ranges[b.parts[i].idx].Range },
		func(i int, dst []byte) []byte { return b.parts[i].b.AppendBatch(dst) })
}

// release frees what b needed only until it was answered: its encoded
// records, kept until then for a retry, or its parts' chunks if it was
// never finished. While its batches are being compressed (a batch
// resolved without being sent, on Close), that goroutine still reads the
// chunks and writes the buffer: that goroutine frees them once it is
// done (enqueueLocked), and Close waits for it.
func (b *batch) release() {
	b.wrecs, b.arena = nil, nil
	if f := b.finished; f != nil {
		b.freeing.Store(true)
		select {
		case <-f:
		default:
			return
		}
		if !b.freeing.CompareAndSwap(true, false) {
			return // the compressing goroutine took it and frees it
		}
	}
	b.free()
}

// free hands b's finished batches, or its parts' chunks, back to the
// pools.
func (b *batch) free() {
	for _, pt := range b.parts {
		pt.b.Reset()
	}
	batchfmt.Release(b.buf)
	b.parts, b.out, b.buf = nil, nil, nil
}

// fail ends the send of a batch that holds an in-flight slot.
func (p *Producer) fail(b *batch, err error) {
	p.answered(b, err) // before the slot frees, as in await
	p.freeSlot()
}

// freeSlot frees an in-flight slot, and wakes the sender: it cuts requests
// from accumulated records only while a slot is free.
func (p *Producer) freeSlot() {
	<-p.slots
	p.signalLocked(p.wake)
}

// await waits for one batch's answer and resolves it.
func (p *Producer) await(cn *conn, corr uint32, cl *call, b *batch, start time.Time) {
	defer p.freeSlot()
	t := time.NewTimer(p.c.cfg.requestTimeout)
	defer t.Stop()
	var err error
	select {
	case r := <-cl.ch:
		var payload []byte
		if payload, err = r.result(); err == nil {
			if b.v2 {
				var resp wire.ProduceBatchesResponse
				if derr := resp.Decode(payload); derr != nil {
					err = ErrProtocol
				} else if resp.Rerouted > 0 {
					p.c.refreshRoutes(b.topic.name)
				}
			} else {
				var resp wire.CountResponse
				if derr := resp.Decode(payload); derr != nil {
					err = ErrProtocol
				}
			}
		}
	case <-t.C:
		cn.forget(corr)
		err = ErrRequestTimeout
	}
	if b.v2 && IsRetriable(err) {
		p.c.refreshRoutes(b.topic.name)
	}
	p.c.requestDone("produce", b.topic.name, start, err)
	if err != nil {
		err = opError("produce", b.topic.name, err)
	}
	p.answered(b, err)
}

// answered takes the outcome of one send of b. A failure worth another
// attempt holds b's topic, and once none of its batches is in flight any
// more, retryLocked decides.
func (p *Producer) answered(b *batch, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := b.topic
	untakeLocked(b)
	switch {
	case err == nil:
		t.stored = max(t.stored, b.seq)
		p.resolveLocked(b, nil)
	case p.retriable(b, err):
		b.err = err
		b.attempts++
		t.held = true
		i := len(t.retry)
		for i > 0 && t.retry[i-1].seq > b.seq {
			i--
		}
		t.retry = slices.Insert(t.retry, i, b)
	default:
		p.resolveLocked(b, err)
	}
	p.settleLocked(t)
}

// retriable reports whether a failed send of b is worth another attempt:
// a retriable refusal or a lost answer, attempts left, producer not
// stopped.
func (p *Producer) retriable(b *batch, err error) bool {
	if p.stop.Err() != nil || b.attempts+1 >= p.c.cfg.retryAttempts {
		return false
	}
	return IsRetriable(err) || errors.Is(err, ErrRequestTimeout)
}

// retryLocked decides what becomes of a held topic's failed batches once
// none of its batches is in flight. If a batch sealed after the oldest of
// them was stored, sending them again would store older records after
// newer ones: they fail. Otherwise they go out again, oldest first and
// ahead of the topic's newer batches, after a back-off.
//
// REQUIRES: p.mu held.
func (p *Producer) retryLocked(t *topicState) {
	retry := t.retry
	t.retry = nil
	if len(retry) == 0 || t.stored > retry[0].seq {
		for _, b := range retry {
			p.resolveLocked(b, b.err)
		}
		p.unholdLocked(t)
		return
	}
	t.parked = append(retry, t.parked...)
	p.c.cfg.logger.Debug("malachi: produce retried", "topic", t.name, "batches", len(retry), "attempt", retry[0].attempts, "err", retry[0].err)
	time.AfterFunc(p.c.backoff(retry[0].attempts), func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.unholdLocked(t)
	})
}

// unholdLocked lets the sender take t's parked batches again, ahead of
// anything queued after them; once the producer has stopped they fail
// with ErrClosed instead.
//
// REQUIRES: p.mu held.
func (p *Producer) unholdLocked(t *topicState) {
	t.held = false
	parked := t.parked
	t.parked = nil
	if p.stop.Err() != nil {
		for _, b := range parked {
			p.resolveLocked(b, ErrClosed)
		}
		return
	}
	p.sendq = append(parked, p.sendq...)
	p.signalLocked(p.wake)
}
