package replication

import (
	"errors"
	"fmt"
	"slices"

	"github.com/malachi-log/malachi/internal/batch"
)

// MaxReplicas bounds a replica set.
const MaxReplicas = 15

// Defaults for the zero fields of Config.
const (
	DefaultMaxInflightBytes = 4 << 20
	DefaultMaxRetainedBytes = 64 << 20
	DefaultMaxMessageBytes  = 1 << 20
	DefaultResendAfter      = 200 // ms
	// DefaultMaxFrameBytes is internal/peer's default frame bound.
	DefaultMaxFrameBytes = 16 << 20
)

// FrameOverheadBytes is the room Config.MaxFrameBytes leaves for the
// transport's own frame header (internal/peer's is 16 bytes, 41 with a
// trace context).
const FrameOverheadBytes = 64

var (
	// ErrSealed is returned by Primary.Append after the fence. The error
	// is a *SealedError carrying the segment's end.
	ErrSealed = errors.New("replication: segment sealed")
	// ErrBackpressure is returned by Primary.Append when the batch would
	// take the bytes held in memory past Config.MaxRetainedBytes: the
	// followers (or the local fsync) are behind. Retriable: the window
	// opens as the watermark moves. While fewer than a quorum of replicas
	// fsync, it stays full: the caller reports a retriable lack of quorum.
	ErrBackpressure = errors.New("replication: replication window full")
	// ErrTooLarge is returned by Primary.Append for a batch larger than
	// the whole window, or than one Append the transport can carry
	// (Config.MaxFrameBytes). Not retriable.
	ErrTooLarge = errors.New("replication: batch larger than the replication window")
	// ErrInvalidConfig is returned by NewPrimary for a malformed Config.
	ErrInvalidConfig = errors.New("replication: invalid config")
)

// SealedError is the refusal of an append after the fence: End is where
// the segment ends, the successor's base (W3, W4).
type SealedError struct {
	Segment, End uint64
}

func (e *SealedError) Error() string {
	return fmt.Sprintf("replication: segment %d sealed at %d", e.Segment, e.End)
}

func (e *SealedError) Is(target error) bool { return target == ErrSealed }

// Quorum is the majority of a replica set of rf replicas: 1 for 1, 2 for
// 2 and 3, 3 for 4 and 5.
func Quorum(rf int) int { return rf/2 + 1 }

// Config describes one active segment on its primary.
type Config struct {
	Segment uint64
	// Base is the segment's first offset, its predecessor's sealed end.
	Base uint64
	// Replicas are the replica set's node ids, the primary first.
	Replicas []uint64
	// MaxInflightBytes bounds the bytes sent to one follower and not yet
	// acked; one message is always allowed, whatever its size.
	MaxInflightBytes int
	// MaxRetainedBytes bounds the batch bytes the primary holds in
	// memory: appends past it are refused with ErrBackpressure, and a
	// follower behind what is held is caught up from the local store.
	MaxRetainedBytes int
	// MaxMessageBytes bounds the batches of one Append message; a message
	// holds at least one batch, whatever its size.
	MaxMessageBytes int
	// ResendAfter is how long, in the unit of the now arguments
	// (milliseconds by convention), a follower with unacked data may stay
	// silent before it is sent everything above its ack again. It is also
	// the least time between two resends of a window to one follower
	// prompted by Behinds (see Primary.Behind).
	ResendAfter int64
	// MaxFrameBytes is the largest message the transport carries
	// (peer.Config.MaxFrameBytes; default DefaultMaxFrameBytes). An Append
	// holding one batch must fit in it with AppendHeaderBytes and
	// FrameOverheadBytes, so Append refuses a larger batch with
	// ErrTooLarge instead of sending a message no follower can receive.
	// MaxMessageBytes defaults to at most what fits.
	MaxFrameBytes int
}

// frameRoom is the batch bytes one Append can carry within a frame.
func (c Config) frameRoom() int { return c.MaxFrameBytes - AppendHeaderBytes - FrameOverheadBytes }

func (c Config) withDefaults() Config {
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if c.MaxRetainedBytes == 0 {
		c.MaxRetainedBytes = DefaultMaxRetainedBytes
	}
	if c.MaxFrameBytes == 0 {
		c.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = min(DefaultMaxMessageBytes, max(c.frameRoom(), 1))
	}
	if c.ResendAfter == 0 {
		c.ResendAfter = DefaultResendAfter
	}
	return c
}

func (c Config) validate() error {
	switch {
	case len(c.Replicas) == 0 || len(c.Replicas) > MaxReplicas:
		return fmt.Errorf("%w: %d replicas, want 1 to %d", ErrInvalidConfig, len(c.Replicas), MaxReplicas)
	case c.MaxInflightBytes < 0 || c.MaxRetainedBytes < 0 || c.MaxMessageBytes < 0 || c.ResendAfter < 0 || c.MaxFrameBytes < 0:
		return fmt.Errorf("%w: negative bound", ErrInvalidConfig)
	case c.MaxMessageBytes > MaxAppendBytes:
		return fmt.Errorf("%w: messages of %d bytes, at most %d", ErrInvalidConfig, c.MaxMessageBytes, MaxAppendBytes)
	case c.frameRoom() < batch.HeaderSize:
		return fmt.Errorf("%w: frames of %d bytes hold no batch", ErrInvalidConfig, c.MaxFrameBytes)
	case c.MaxMessageBytes > c.frameRoom():
		return fmt.Errorf("%w: messages of %d bytes do not fit frames of %d", ErrInvalidConfig, c.MaxMessageBytes, c.MaxFrameBytes)
	}
	for i, id := range c.Replicas {
		if slices.Contains(c.Replicas[:i], id) {
			return fmt.Errorf("%w: node %d twice in the replica set", ErrInvalidConfig, id)
		}
	}
	return nil
}

// Send is an Append for the follower To.
type Send struct {
	To  uint64
	Msg Append
}

// Read asks the caller to read the batches [From, To) of the segment from
// the local store, at most MaxBytes of them (the first batch whole), and to
// hand them to Primary.ReadDone for the follower Node. Everything below To
// is locally fsynced, so the store has it.
type Read struct {
	Node     uint64
	From, To uint64
	MaxBytes int
}

// Output is what a Primary asks of its caller after an input.
type Output struct {
	// Sends are messages for followers, in order per follower.
	Sends []Send
	// Reads are store reads that catch a follower up.
	Reads []Read
	// Committed lists appends that the watermark passed, in offset order:
	// their produces may be acknowledged (W1).
	Committed []Span
}

type entry struct {
	Span
	data []byte
}

type flight struct {
	end   uint64
	bytes int
}

// progress is the primary's view of one follower.
type progress struct {
	node uint64
	// match is the highest end the follower reported fsynced: its vote.
	// Offsets in [match, next) were sent and not yet acked.
	//
	// Invariant: match <= next <= Primary.end.
	match, next uint64
	flights     queue[flight]
	inflight    int
	// stalled marks a store read whose first batch did not fit the room
	// left in the window: no read is asked again until the window drains.
	stalled bool
	// sentWatermark is the highest watermark sent to the follower, and
	// repeated whether it was sent again after a quiet ResendAfter.
	sentWatermark uint64
	repeated      bool
	// lastSend and lastHeard are when the primary last sent to and heard
	// from the follower.
	lastSend, lastHeard int64
	// reading marks the one store read outstanding for the follower, from
	// readFrom, asked at readAt.
	reading  bool
	readFrom uint64
	readAt   int64
	// rewound marks that the primary went back to resend from rewindFrom
	// at rewindAt, after a Behind or a silence.
	rewound    bool
	rewindFrom uint64
	rewindAt   int64
}

// Primary is the state machine of an active segment on its primary: it
// assigns offsets (W2), ships batches to the followers, and moves the
// commit watermark as a quorum fsyncs (W1, R1). It is not safe for
// concurrent use: its owner serialises calls.
type Primary struct {
	cfg       Config
	quorum    int
	end       uint64 // the next offset to assign
	synced    uint64 // the local fsynced end
	watermark uint64
	fenced    bool
	now       int64 // the latest now seen, to notice a clock stepping back

	log      queue[entry] // retained batches, oldest first
	retained int          // bytes in log
	pending  queue[Span]  // appends not yet committed, oldest first

	followers []*progress
	votes     []uint64 // scratch for the watermark
}

// NewPrimary starts the primary of a new segment, empty at cfg.Base.
func NewPrimary(cfg Config) (*Primary, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Primary{
		cfg: cfg, quorum: Quorum(len(cfg.Replicas)),
		end: cfg.Base, synced: cfg.Base, watermark: cfg.Base,
		votes: make([]uint64, len(cfg.Replicas)),
	}
	for _, id := range cfg.Replicas[1:] {
		p.followers = append(p.followers, &progress{node: id, match: cfg.Base, next: cfg.Base, sentWatermark: cfg.Base})
	}
	return p, nil
}

// End is the end of everything appended: the next base offset.
func (p *Primary) End() uint64 { return p.end }

// Watermark is the highest end fsynced on a quorum of the replica set,
// the primary's own fsync included. It only grows (R1).
func (p *Primary) Watermark() uint64 { return p.watermark }

// Quorum is how many replicas must fsync a record before it is committed.
func (p *Primary) Quorum() int { return p.quorum }

// Fenced reports whether Fence was called.
func (p *Primary) Fenced() bool { return p.fenced }

// Drained reports whether the segment is fenced and everything appended
// is committed: the moment to record the seal (see the package doc).
func (p *Primary) Drained() bool { return p.fenced && p.watermark == p.end }

// RetainedBytes is how many batch bytes the primary holds.
func (p *Primary) RetainedBytes() int { return p.retained }

// Fence latches the segment: every later Append is refused with a
// *SealedError. It answers the end of everything appended; the batches
// below it keep replicating and are committed as a quorum fsyncs them.
func (p *Primary) Fence() uint64 {
	p.fenced = true
	return p.end
}

// FenceAnswer fences the segment like Fence and returns the answer to
// send, marked as a primary's: FailoverEnd never counts it, as it names
// everything appended, fsynced or not.
func (p *Primary) FenceAnswer() FenceAnswer {
	return FenceAnswer{Segment: p.cfg.Segment, End: p.Fence(), Role: RolePrimary}
}

// Append assigns the next offsets to b, exactly one batch in the storage
// encoding whose CRC the caller checked, stamps b with them in place
// (W2) and ships it to the followers. It returns b's base offset; the
// caller appends b to the local store and must not modify it afterwards,
// and the produce waits until an Output lists b's span as committed.
func (p *Primary) Append(b []byte, now int64) (uint64, Output, error) {
	if p.fenced {
		return 0, Output{}, &SealedError{Segment: p.cfg.Segment, End: p.end}
	}
	if len(b) > p.cfg.MaxRetainedBytes {
		return 0, Output{}, fmt.Errorf("%w: %d bytes, window %d", ErrTooLarge, len(b), p.cfg.MaxRetainedBytes)
	}
	if len(b) > p.cfg.frameRoom() {
		return 0, Output{}, fmt.Errorf("%w: %d bytes, and one replication message carries at most %d (frames of %d bytes)",
			ErrTooLarge, len(b), p.cfg.frameRoom(), p.cfg.MaxFrameBytes)
	}
	h, err := batch.ParseHeader(b)
	if err != nil {
		return 0, Output{}, err
	}
	if h.Length != len(b) {
		return 0, Output{}, fmt.Errorf("%w: %d bytes hold a batch of %d", ErrBadRun, len(b), h.Length)
	}
	p.evict(len(b))
	if p.retained+len(b) > p.cfg.MaxRetainedBytes {
		return 0, Output{}, fmt.Errorf("%w: %d bytes held, %d offsets not yet on a quorum", ErrBackpressure, p.retained, p.end-p.watermark)
	}
	base := p.end
	if err := batch.Restamp(b, base); err != nil {
		return 0, Output{}, err
	}
	p.observe(now)
	sp := Span{Base: base, End: base + uint64(h.LastOffsetDelta) + 1}
	p.log.push(entry{Span: sp, data: b})
	p.retained += len(b)
	p.pending.push(sp)
	p.end = sp.End
	var out Output
	p.advance(&out) // a lone replica commits on its own fsync only
	for _, f := range p.followers {
		p.send(f, now, &out)
	}
	return base, out, nil
}

// LocalSynced reports that the local store fsynced everything below end.
func (p *Primary) LocalSynced(end uint64, now int64) Output {
	var out Output
	if end > p.synced && end <= p.end {
		p.observe(now)
		p.synced = end
		p.advance(&out)
		p.sendAll(now, &out)
	}
	return out
}

// Acked reports a follower's Ack: it fsynced everything below end.
// Acks are idempotent and may arrive late or twice.
func (p *Primary) Acked(node, end uint64, now int64) Output {
	var out Output
	f := p.follower(node)
	if f == nil || end > p.end {
		return out
	}
	p.observe(now)
	f.lastHeard = now
	if end <= f.match {
		return out
	}
	f.match = end
	f.next = max(f.next, end)
	p.land(f)
	p.advance(&out)
	p.evict(0)
	p.unblock(f)
	p.sendAll(now, &out)
	return out
}

// Behind reports a follower's Behind: it holds everything below has and
// nothing more. The primary sends again from there, from memory while it
// holds those batches, else through a Read.
//
// Messages that overtake one another make a follower answer Behind(has)
// once for each, all naming the same gap, and the first resend fills it:
// so within ResendAfter of a resend from some offset, a Behind at or
// above it is not answered again (Tick covers a lost resend).
//
// A Behind below the follower's ack resets its vote to has: either it
// is older than the ack, and the follower, which wholly has what is
// resent, answers with an Ack of its fsynced end that restores the
// vote, or the follower came back with less than it acked (a replaced
// disk), and its vote must not count bytes it lost. The watermark does
// not move back either way (R1).
func (p *Primary) Behind(node, has uint64, now int64) Output {
	var out Output
	f := p.follower(node)
	if f == nil || has > p.end {
		return out
	}
	p.observe(now)
	f.lastHeard = now
	if f.rewound && has >= f.rewindFrom && now-f.rewindAt < p.cfg.ResendAfter {
		return out
	}
	f.match = min(f.match, has)
	p.rewind(f, has, now)
	p.unblock(f)
	p.send(f, now, &out)
	return out
}

// ReadDone hands over the batches a Read for node returned from the local
// store, starting at from. A read that is no longer outstanding is
// dropped; of one the follower moved past while it ran, only what the
// follower still lacks is sent.
func (p *Primary) ReadDone(node, from uint64, batches []byte, now int64) (Output, error) {
	var out Output
	f := p.follower(node)
	if f == nil || !f.reading || f.readFrom != from {
		return out, nil
	}
	p.observe(now)
	f.reading = false
	parts, end, err := splitRun(batches, from)
	if err != nil || end == from || end > p.end {
		return out, errors.Join(err, fmt.Errorf("replication: read of %d from %d gave [%d, %d)", node, from, from, end))
	}
	at := from
	for len(parts) > 0 && at < f.next {
		at += spanOf(parts[0])
		batches, parts = batches[len(parts[0]):], parts[1:]
	}
	if at == f.next && len(parts) > 0 {
		if n, to := p.fit(f, parts, at); n > 0 {
			p.ship(f, Span{Base: at, End: to}, batches[:n], now, &out)
		} else {
			f.stalled = true
		}
	}
	p.send(f, now, &out)
	return out, nil
}

// Tick sends again to followers that were neither sent to nor heard
// from for ResendAfter and lack something: everything above their ack,
// or just the watermark. Followers ignore what they already have, so a
// resend is always safe.
func (p *Primary) Tick(now int64) Output {
	var out Output
	p.observe(now)
	for _, f := range p.followers {
		if now-f.lastSend < p.cfg.ResendAfter || now-f.lastHeard < p.cfg.ResendAfter {
			continue
		}
		if f.reading && now-f.readAt >= p.cfg.ResendAfter {
			f.reading = false // the read was lost
		}
		switch {
		case f.reading:
		case f.match < p.end:
			p.rewind(f, f.match, now)
			p.send(f, now, &out)
		case !f.repeated:
			// NB: a watermark-only Append is not answered, so its loss
			// goes unseen; sending the last one again once, after a quiet
			// ResendAfter, covers the loss of the last message to an idle
			// follower, whose readers would otherwise wait for the next
			// produce.
			f.repeated = true
			p.ship(f, Span{Base: f.match, End: f.match}, nil, now, &out)
		}
	}
	return out
}

// observe notes the time of an input. When the clock steps back, every
// "now minus then" stays negative until the clock passes the old time
// again, which would hold resends back for as long as the step; the
// follower times are brought back to now instead, so ResendAfter counts
// from the step.
func (p *Primary) observe(now int64) {
	if now < p.now {
		for _, f := range p.followers {
			f.lastSend, f.lastHeard = min(f.lastSend, now), min(f.lastHeard, now)
			f.readAt, f.rewindAt = min(f.readAt, now), min(f.rewindAt, now)
		}
	}
	p.now = now
}

func (p *Primary) follower(node uint64) *progress {
	for _, f := range p.followers {
		if f.node == node {
			return f
		}
	}
	return nil
}

// rewind makes the follower's window empty and sends from from next. An
// outstanding store read stays outstanding: ReadDone keeps what is still
// of use, and no second read starts meanwhile.
func (p *Primary) rewind(f *progress, from uint64, now int64) {
	f.next = from
	f.flights.clear()
	f.inflight = 0
	f.stalled = false
	f.rewound, f.rewindFrom, f.rewindAt = true, from, now
}

// unblock gives up an outstanding store read once memory holds
// everything from where the follower now stands (an ack or a Behind
// moved it): sending resumes at once, and the read's answer is dropped.
func (p *Primary) unblock(f *progress) {
	if f.reading && f.next >= p.heldFrom() {
		f.reading = false
	}
}

// land drops the flights a follower's ack covers.
func (p *Primary) land(f *progress) {
	for f.flights.len() > 0 && f.flights.front().end <= f.match {
		f.inflight -= f.flights.front().bytes
		f.flights.pop(1)
	}
	if f.flights.len() == 0 {
		f.stalled = false
	}
}

// advance moves the watermark to the highest end a quorum has fsynced and
// lists the appends it passed.
func (p *Primary) advance(out *Output) {
	p.votes = append(p.votes[:0], p.synced)
	for _, f := range p.followers {
		p.votes = append(p.votes, f.match)
	}
	slices.Sort(p.votes)
	wm := p.votes[len(p.votes)-p.quorum] // the quorum-th highest
	if wm <= p.watermark {
		return
	}
	p.watermark = wm
	pend := p.pending.all()
	i := 0
	for i < len(pend) && pend[i].End <= wm {
		i++
	}
	out.Committed = append(out.Committed, pend[:i]...)
	p.pending.pop(i)
}

func (p *Primary) sendAll(now int64, out *Output) {
	for _, f := range p.followers {
		p.send(f, now, out)
	}
}

// limit is how many batch bytes the next message to f may carry: the
// room left in its window, within MaxMessageBytes. An empty window takes
// one message whatever its size, so a batch larger than the window still
// goes out; otherwise a message must fit the room (B1).
func (p *Primary) limit(f *progress) int {
	return min(p.cfg.MaxInflightBytes-f.inflight, p.cfg.MaxMessageBytes)
}

// send ships what the follower lacks while its window has room: batches
// from memory, a Read for what memory no longer holds, or the watermark
// alone when it has all the batches.
func (p *Primary) send(f *progress, now int64, out *Output) {
	for !f.reading {
		if f.next >= p.end {
			if f.sentWatermark < p.watermark {
				p.ship(f, Span{Base: f.match, End: f.match}, nil, now, out)
			}
			return
		}
		limit := p.limit(f)
		if f.flights.len() > 0 && limit <= 0 {
			return
		}
		limit = max(limit, 1)
		if held := p.heldFrom(); f.next < held {
			if f.stalled {
				return
			}
			f.reading, f.readFrom, f.readAt = true, f.next, now
			out.Reads = append(out.Reads, Read{Node: f.node, From: f.next, To: held, MaxBytes: limit})
			return
		}
		sp, data, ok := p.gather(f.next, limit, f.flights.len() == 0)
		if !ok {
			return
		}
		p.ship(f, sp, data, now, out)
	}
}

// fit is how many bytes of parts, batches from at, the next message to f
// takes, and the end they reach; 0 when not even the first fits.
func (p *Primary) fit(f *progress, parts [][]byte, at uint64) (int, uint64) {
	limit := p.limit(f)
	n, end := 0, at
	for i, b := range parts {
		if n+len(b) > limit && !(i == 0 && f.flights.len() == 0) {
			break
		}
		n += len(b)
		end += spanOf(b)
	}
	return n, end
}

// ship sends the batches data, spanning sp, to f.
func (p *Primary) ship(f *progress, sp Span, data []byte, now int64, out *Output) {
	out.Sends = append(out.Sends, Send{To: f.node, Msg: Append{
		Segment: p.cfg.Segment, Base: sp.Base, End: sp.End, Watermark: p.watermark, Batches: data,
	}})
	if p.watermark > f.sentWatermark {
		f.sentWatermark, f.repeated = p.watermark, false
	}
	f.lastSend = now
	if sp.End > sp.Base {
		f.next = sp.End
		f.flights.push(flight{end: sp.End, bytes: len(data)})
		f.inflight += len(data)
	}
}

// heldFrom is the first offset whose batch is in memory.
func (p *Primary) heldFrom() uint64 {
	if p.log.len() == 0 {
		return p.end
	}
	return p.log.front().Base
}

// gather returns the held batches from the one holding offset from, as
// many as fit limit bytes; ok is false when not even the first fits,
// unless first says it goes whatever its size.
func (p *Primary) gather(from uint64, limit int, first bool) (sp Span, data []byte, ok bool) {
	log := p.log.all()
	i, _ := slices.BinarySearchFunc(log, from, func(e entry, off uint64) int {
		switch {
		case e.End <= off:
			return -1
		case e.Base > off:
			return 1
		}
		return 0
	})
	if len(log[i].data) > limit && !first {
		return Span{}, nil, false
	}
	j, n := i+1, len(log[i].data)
	for j < len(log) && n+len(log[j].data) <= limit {
		n += len(log[j].data)
		j++
	}
	sp = Span{Base: log[i].Base, End: log[j-1].End}
	if j == i+1 {
		return sp, log[i].data, true
	}
	data = make([]byte, 0, n)
	for _, e := range log[i:j] {
		data = append(data, e.data...)
	}
	return sp, data, true
}

// evict drops held batches from the front: those every follower acked, and
// more while need more bytes would not fit. Only batches committed and
// locally fsynced go, so a follower still missing one reads it from the
// store.
func (p *Primary) evict(need int) {
	for p.log.len() > 0 {
		e := p.log.front()
		if e.End > p.watermark || e.End > p.synced {
			return
		}
		if !p.allHave(e.End) && p.retained+need <= p.cfg.MaxRetainedBytes {
			return
		}
		p.retained -= len(e.data)
		p.log.pop(1)
	}
}

func (p *Primary) allHave(end uint64) bool {
	for _, f := range p.followers {
		if f.match < end {
			return false
		}
	}
	return true
}
