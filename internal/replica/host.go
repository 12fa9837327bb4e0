package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/peer"
	"github.com/malachi-log/malachi/internal/replication"
	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/tracing"
	"go.opentelemetry.io/otel/trace"
)

var (
	// ErrBackpressure refuses an append while the segment's replication
	// window is full, or a new segment while the host tracks MaxSegments.
	// Retriable.
	ErrBackpressure = errors.New("replica: replication backlog full")
	// ErrUnknownSegment: the host runs no replica of the segment.
	ErrUnknownSegment = errors.New("replica: segment not replicated here")
	// ErrNotPrimary: the segment is replicated here as a follower's copy.
	ErrNotPrimary = errors.New("replica: this node is not the segment's primary")
	// ErrClosed: the host was closed.
	ErrClosed = errors.New("replica: host closed")
	// ErrDropped fails the produces still waiting on a segment the host
	// stopped replicating (sealed or failed over): they may or may not
	// be in the sealed segment. Retriable.
	ErrDropped = errors.New("replica: segment no longer replicated here")
	// ErrNoQuorum: fewer replicas answered a fence than a failover needs.
	// Retriable once replicas come back.
	ErrNoQuorum = errors.New("replica: not enough replicas answered")
	// ErrBehind: a copy lacks part of the seal; it is left unsealed.
	ErrBehind = errors.New("replica: copy ends below the seal")
	// ErrFailed: the primary's local copy failed (a write or fsync
	// error, the store closing): the segment takes nothing more and must
	// fail over. Retriable; the appends waiting on it may or may not be
	// committed.
	ErrFailed = errors.New("replica: the primary's copy failed")
)

// SegmentInfo is what the control plane says of a segment.
type SegmentInfo struct {
	Base     uint64
	Replicas []uint64 // node ids, the primary first
	Active   bool
	Owner    uint32 // the owner tag its files carry (storage.Store.CreateFor)
}

// Config configures a Host.
type Config struct {
	Self      uint64
	Transport peer.Transport
	Store     *storage.Store
	// Lookup reads a segment from the control plane; false when unknown.
	// It must not block for long: it runs on the host's loop.
	Lookup func(seg uint64) (SegmentInfo, bool)
	// OnCommit is called, without locks held, when the watermark of a
	// segment replicated here moves. It must not block.
	OnCommit func(seg, watermark uint64)
	Clock    clock.Clock
	Logger   *slog.Logger
	// Replication bounds each primary's windows (Segment, Base and
	// Replicas are filled in by Open).
	Replication replication.Config
	// MaxSegments bounds the segments tracked (default 65,536).
	MaxSegments int
	// Inbox bounds the incoming messages queued for the loop (default 4,096).
	Inbox int
	// InboxBytes bounds the bytes of the messages queued for the loop
	// (default 64 MiB): an Append carries up to a frame of batches, so a
	// count alone would let the queue hold gigabytes. A message is taken
	// whatever its size when nothing is queued.
	InboxBytes int
	// Tick is how often the loop resends (default 50 ms).
	Tick time.Duration
	// CommitTimeout bounds how long a produce waits for a quorum: past
	// it, its done is called with ErrNoQuorum (retriable: the batch may
	// still commit later). Default 5 s.
	CommitTimeout time.Duration
	// Tracer records a follower's span for each traced append it takes
	// (HandleMessageContext); nil is off.
	Tracer *tracing.Tracer
}

func (c *Config) defaults() error {
	if c.Self == 0 || c.Transport == nil || c.Store == nil || c.Lookup == nil {
		return errors.New("replica: Config needs Self, Transport, Store and Lookup")
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.OnCommit == nil {
		c.OnCommit = func(uint64, uint64) {}
	}
	if c.MaxSegments <= 0 {
		c.MaxSegments = 1 << 16
	}
	if c.Inbox <= 0 {
		c.Inbox = 4096
	}
	if c.InboxBytes <= 0 {
		c.InboxBytes = 64 << 20
	}
	if c.Tick <= 0 {
		c.Tick = 50 * time.Millisecond
	}
	if c.CommitTimeout <= 0 {
		c.CommitTimeout = 5 * time.Second
	}
	return nil
}

// Host runs the replicas of one node's segments.
type Host struct {
	cfg   Config
	inbox chan inMsg
	// inboxBytes are the payload bytes queued in inbox; dropped counts
	// the messages refused because the inbox was full.
	inboxBytes atomic.Int64
	dropped    atomic.Uint64
	kick       chan struct{}
	life       context.Context
	stop       context.CancelFunc

	mu struct {
		sync.Mutex
		segs   map[uint64]*seg
		reads  []pendingRead
		closed bool
	}
}

type inMsg struct {
	from uint64
	msg  replication.Message
	size int64
	span trace.Span // a traced append's follower span, nil otherwise
}

type pendingRead struct {
	s *seg
	r replication.Read
}

// New makes a Host; Register installs its handlers and Run drives it.
func New(cfg Config) (*Host, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	h := &Host{cfg: cfg, inbox: make(chan inMsg, cfg.Inbox), kick: make(chan struct{}, 1)}
	h.life, h.stop = context.WithCancel(context.Background())
	h.mu.segs = map[uint64]*seg{}
	return h, nil
}

// HandleMessage takes a one-way replication frame. It runs on the
// transport's reader: it decodes and queues, and drops the message when
// the inbox is full, in messages or bytes (the primary sends again, and
// a follower answers the resend with its ack).
func (h *Host) HandleMessage(from uint64, payload []byte) {
	h.HandleMessageContext(context.Background(), from, payload)
}

// HandleMessageContext is HandleMessage for a frame that carried the
// primary's trace context (ctx's remote span): an append taken here gets
// a span of its own under it, which ends once the copy fsynced it.
func (h *Host) HandleMessageContext(ctx context.Context, from uint64, payload []byte) {
	size := int64(len(payload))
	if q := h.inboxBytes.Add(size); q > int64(h.cfg.InboxBytes) && q != size {
		h.inboxBytes.Add(-size)
		h.dropped.Add(1)
		return
	}
	m, err := replication.Decode(payload)
	if err != nil {
		h.inboxBytes.Add(-size)
		h.cfg.Logger.Warn("replica: a bad replication message", "from", from, "err", err)
		return
	}
	in := inMsg{from: from, msg: m, size: size}
	if a, ok := m.(replication.Append); ok && trace.SpanContextFromContext(ctx).IsValid() {
		if _, span := h.cfg.Tracer.Start(ctx, tracing.SpanFollow, trace.SpanKindConsumer); span.IsRecording() {
			span.SetAttributes(tracing.AttrSegment.Int64(int64(a.Segment)), tracing.AttrBase.Int64(int64(a.Base)),
				tracing.AttrBytes.Int(len(a.Batches)), tracing.AttrPeer.Int64(int64(from)))
			in.span = span
		}
	}
	select {
	case h.inbox <- in:
	default:
		h.inboxBytes.Add(-size)
		h.dropped.Add(1)
		endSpan(in.span, errInboxFull)
	}
}

// errInboxFull ends the span of an append dropped at the inbox.
var errInboxFull = errors.New("replica: inbox full, dropped (the primary sends again)")

// endSpan ends span, if there is one, with err.
func endSpan(span trace.Span, err error) {
	if span != nil {
		tracing.End(span, err)
	}
}

// Dropped counts the incoming messages dropped because the inbox was
// full.
func (h *Host) Dropped() uint64 { return h.dropped.Load() }

// HandleCall answers a replication call: a fence of a copy for a failover.
func (h *Host) HandleCall(ctx context.Context, from uint64, req []byte) ([]byte, error) {
	m, err := replication.Decode(req)
	if err != nil {
		return nil, err
	}
	f, ok := m.(replication.Fence)
	if !ok {
		return nil, fmt.Errorf("replica: call of kind %v from node %d", m.Kind(), from)
	}
	a, err := h.fenceCopy(ctx, f.Segment)
	if err != nil {
		return nil, err
	}
	return replication.Encode(a), nil
}

// Register installs the host's handlers on tr (before tr.Start).
func (h *Host) Register(tr peer.Transport) error {
	if err := tr.Handle(peer.ChannelReplication, h.HandleMessage); err != nil {
		return err
	}
	return tr.HandleCall(peer.ChannelReplication, h.HandleCall)
}

// Run handles incoming messages, catch-up reads and resends until ctx
// ends or the host closes.
func (h *Host) Run(ctx context.Context) {
	t := h.cfg.Clock.NewTimer(h.cfg.Tick)
	defer func() { t.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.life.Done():
			return
		case m := <-h.inbox:
			h.inboxBytes.Add(-m.size)
			h.handle(m)
		case <-h.kick:
			h.runReads()
		case <-t.C():
			h.tick()
			h.runReads()
			t = h.cfg.Clock.NewTimer(h.cfg.Tick)
		}
	}
}

// Close stops the host: Run returns, and the produces still waiting fail
// with ErrDropped.
func (h *Host) Close() {
	h.mu.Lock()
	h.mu.closed = true
	segs := h.mu.segs
	h.mu.segs = map[uint64]*seg{}
	h.mu.Unlock()
	h.stop()
	for _, s := range segs {
		s.fail(ErrClosed)
	}
}

func (h *Host) now() int64 { return h.cfg.Clock.Now().UnixMilli() }

func (h *Host) lookupSeg(id uint64) *seg {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.segs[id]
}

// add tracks s unless the host is full or closed, or tracks id already.
func (h *Host) add(s *seg) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.mu.closed:
		return ErrClosed
	case h.mu.segs[s.id] != nil:
		return fmt.Errorf("replica: segment %d is replicated here already", s.id)
	case len(h.mu.segs) >= h.cfg.MaxSegments:
		return fmt.Errorf("%w: %d segments replicated here (limit %d)", ErrBackpressure, len(h.mu.segs), h.cfg.MaxSegments)
	}
	h.mu.segs[s.id] = s
	return nil
}

// Drop stops replicating seg here; produces still waiting on it fail with
// ErrDropped. The store's copy is left as it is.
func (h *Host) Drop(id uint64) {
	h.mu.Lock()
	s := h.mu.segs[id]
	delete(h.mu.segs, id)
	h.mu.Unlock()
	if s != nil {
		s.fail(ErrDropped)
	}
}

// Segments lists the segments replicated here.
func (h *Host) Segments() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]uint64, 0, len(h.mu.segs))
	for id := range h.mu.segs {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Watermark is the commit watermark of a segment replicated here (the
// primary's, or what a follower's copy learned), and whether it is
// known: the host replicates the segment and, for a copy, has heard
// from its primary since the copy started here. It only grows (R1).
func (h *Host) Watermark(id uint64) (uint64, bool) {
	s := h.lookupSeg(id)
	if s == nil {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wm, s.known
}

// IsPrimary reports whether the host runs seg's primary.
func (h *Host) IsPrimary(id uint64) bool {
	s := h.lookupSeg(id)
	return s != nil && s.p != nil
}

const peerChannel = peer.ChannelReplication

// send delivers a message; a refused one is lost, and the protocol's
// resends cover it.
func (h *Host) send(to uint64, m replication.Message) {
	h.sendContext(context.Background(), to, m)
}

// sendContext is send carrying ctx's trace context with the frame.
func (h *Host) sendContext(ctx context.Context, to uint64, m replication.Message) {
	if m == nil {
		return
	}
	_ = h.cfg.Transport.SendContext(ctx, to, peerChannel, replication.Encode(m))
}

func (h *Host) handle(m inMsg) {
	switch msg := m.msg.(type) {
	case replication.Append:
		h.followerAppend(m.from, msg, m.span)
	case replication.Ack:
		if s := h.lookupSeg(msg.Segment); s != nil && s.p != nil {
			s.primaryInput(h, func(p *replication.Primary, now int64) replication.Output {
				return p.Acked(m.from, msg.End, now)
			})
		}
	case replication.Behind:
		if s := h.lookupSeg(msg.Segment); s != nil && s.p != nil {
			s.primaryInput(h, func(p *replication.Primary, now int64) replication.Output {
				return p.Behind(m.from, msg.Has, now)
			})
		}
	}
}

func (h *Host) tick() {
	h.mu.Lock()
	segs := make([]*seg, 0, len(h.mu.segs))
	for _, s := range h.mu.segs {
		if s.p != nil {
			segs = append(segs, s)
		}
	}
	h.mu.Unlock()
	for _, s := range segs {
		s.primaryInput(h, func(p *replication.Primary, now int64) replication.Output { return p.Tick(now) })
		s.expire(h.now() - h.cfg.CommitTimeout.Milliseconds())
	}
}

func (h *Host) queueReads(s *seg, reads []replication.Read) {
	if len(reads) == 0 {
		return
	}
	h.mu.Lock()
	for _, r := range reads {
		h.mu.reads = append(h.mu.reads, pendingRead{s: s, r: r})
	}
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// runReads catches followers up from the local store. A read that fails
// is dropped: the primary asks again after ResendAfter.
func (h *Host) runReads() {
	h.mu.Lock()
	reads := h.mu.reads
	h.mu.reads = nil
	h.mu.Unlock()
	for _, pr := range reads {
		buf, _, err := h.cfg.Store.Read(storage.SegmentID(pr.s.id), pr.r.From, pr.r.MaxBytes, pr.r.To)
		if err != nil {
			h.cfg.Logger.Warn("replica: catch-up read failed", "segment", pr.s.id, "from", pr.r.From, "err", err)
			continue
		}
		r := pr.r
		pr.s.primaryInput(h, func(p *replication.Primary, now int64) replication.Output {
			out, err := p.ReadDone(r.Node, r.From, buf, now)
			if err != nil {
				h.cfg.Logger.Warn("replica: catch-up read refused", "segment", pr.s.id, "err", err)
			}
			return out
		})
	}
}

// Primary reports on the primary of segment id run here: the end of
// everything appended (the next base), whether it is fenced, and whether
// the host runs it at all.
func (h *Host) Primary(id uint64) (end uint64, fenced, ok bool) {
	s := h.lookupSeg(id)
	if s == nil {
		return 0, false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return 0, false, false
	}
	return s.p.End(), s.p.Fenced() || s.err != nil, true
}
