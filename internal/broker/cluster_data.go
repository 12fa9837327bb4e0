package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/dataplane"
	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/peer"
)

// The data path between nodes (docs/architecture.md, "Running as a
// cluster"). A segment's data is on the node that opened it, its primary
// (Replicas[0]), until segments are replicated. Any node serves any
// client request:
//
//   - a produce for a range whose active segment is on another node is
//     forwarded, one call per range at a time, to that node, which assigns
//     the offsets (W2), appends through its group commit and answers
//     after the fsync (cluster_forward.go);
//   - a read of another node's segment is a call answering the stored
//     batches, verified by the reader (cluster_read.go);
//   - a node whose readers wait on a topic registers interest with the
//     nodes writing its ranges, which notify it of appends
//     (cluster_watch.go).
//
// Messages are internal/dataplane's, on peer.ChannelData.

// DataLimits bound the data path between nodes (B1). Zero values take
// the defaults.
type DataLimits struct {
	// ForwardBytes bounds the produced bytes this node has forwarded to
	// one other node and not yet had answered; a produce past it is
	// refused with too_many_requests (a lone produce may pass it, never
	// one peer frame). Default 32 MiB; at most the peer transport's
	// queue less one frame (48 MiB), so forwarded calls never fill it.
	ForwardBytes int
	// ForwardRanges bounds the ranges with forwarded produces under way
	// at once (one goroutine each). Default 1024.
	ForwardRanges int
	// ReadBytes bounds one remote read's answer. Default 1 MiB; at most
	// one peer frame less its overhead.
	ReadBytes int
	// RemoteReads bounds the remote reads in flight from this node; a
	// read past it is refused with too_many_requests. Default 256.
	RemoteReads int
	// InterestEntries bounds the (topic, node) interest registrations a
	// node keeps; past it a registration is answered but not recorded,
	// and that reader wakes on renewals only. It also bounds the ends a
	// node keeps of other nodes' ranges (of the topics it registered);
	// past it an end heard wakes its readers but is not kept. Default
	// 65,536.
	InterestEntries int
	// NotifyQueue bounds the ranges waiting to be notified; past it
	// notifications are dropped and renewals wake the readers. Default
	// 65,536.
	NotifyQueue int
	// InterestRenew is how often a node renews the interest of topics it
	// has readers waiting on (registrations expire after three periods);
	// it is also the longest a reader waits for an append whose
	// notification was lost. Default 1 s.
	InterestRenew time.Duration
	// CallTimeout bounds every call to another node, under the
	// request's own deadline. Default the cluster's MetadataTimeout.
	CallTimeout time.Duration
}

func (l DataLimits) withDefaults(metaTimeout time.Duration) DataLimits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.ForwardBytes, 32<<20)
	def(&l.ForwardRanges, 1024)
	def(&l.ReadBytes, 1<<20)
	def(&l.RemoteReads, 256)
	def(&l.InterestEntries, 1<<16)
	def(&l.NotifyQueue, 1<<16)
	if l.InterestRenew <= 0 {
		l.InterestRenew = time.Second
	}
	if l.CallTimeout <= 0 {
		l.CallTimeout = metaTimeout
	}
	return l
}

// The peer transport the data path runs on keeps peer.Config's default
// bounds (openTransport sets neither): one frame, and what may wait to be
// written to one node.
const (
	peerFrameBytes = 16 << 20
	peerQueueBytes = 64 << 20
	// frameSlack is what a call's frame holds besides its message (the
	// peer header is 16 bytes, 41 with a trace context), with room to
	// spare.
	frameSlack = 4 << 10
	// maxCallBytes bounds one data message, and so one forwarded call.
	maxCallBytes = peerFrameBytes - frameSlack
)

// validate refuses limits that do not fit the peer transport: a read
// answer larger than a frame could never be sent, and forwarded bytes
// beyond the transport's queue would be refused by it as backpressure
// instead of by ForwardBytes.
func (l DataLimits) validate() error {
	switch {
	case l.ReadBytes > maxCallBytes:
		return fmt.Errorf("broker: Cluster.Data.ReadBytes %d exceeds one peer frame (%d bytes with its overhead)", l.ReadBytes, maxCallBytes)
	case l.ForwardBytes > peerQueueBytes-peerFrameBytes:
		return fmt.Errorf("broker: Cluster.Data.ForwardBytes %d exceeds the peer queue less one frame (%d bytes)", l.ForwardBytes, peerQueueBytes-peerFrameBytes)
	}
	return nil
}

// Reasons of the data path. They are metadata.Error values so that their
// text is the wire reason whatever message wraps them.
var (
	// ErrUnreachable: the node holding the data a request needs did not
	// answer in time (stopped, partitioned, overloaded). Retriable; a
	// produce may or may not have been stored. UnreachableError names
	// the node.
	ErrUnreachable error = metadata.Error("unreachable")
	// ErrNoQuorum: a failover of a replicated segment whose primary is
	// lost got fewer fence answers than it needs (too few replicas
	// reachable); nothing was sealed. Retriable once replicas return;
	// the errors that carry it wrap ErrRetry too.
	ErrNoQuorum error = metadata.Error("no_quorum")
	// ErrTooManyRequests: a bound of the data path between nodes was
	// reached (DataLimits); nothing was done. Retriable after a back-off.
	ErrTooManyRequests error = metadata.Error("too_many_requests")
	// ErrTooLarge: a produce for one range is larger than one call
	// between nodes can carry (a peer frame), so the node writing the
	// range cannot be sent it; nothing was stored. Not retriable: split
	// the produce. Its wire reason is too_many_records.
	ErrTooLarge error = metadata.Error("too_many_records")
)

// UnreachableError says which node a request needed and why it failed.
// errors.Is(err, ErrUnreachable) holds.
type UnreachableError struct {
	Node       string // "node-<id>"
	ClientAddr string // its client address, "" when gossip does not know it
	Cause      string
}

func (e *UnreachableError) Error() string {
	at := ""
	if e.ClientAddr != "" {
		at = " (client address " + e.ClientAddr + ")"
	}
	return fmt.Sprintf("unreachable: %s%s holds the data and did not answer: %s", e.Node, at, e.Cause)
}

func (e *UnreachableError) Unwrap() error { return ErrUnreachable }

// dataPlane is a cluster node's state for the data path between nodes.
type dataPlane struct {
	b     *Broker
	tr    peer.Transport
	self  uint64
	lim   DataLimits
	ready atomic.Bool // the segment store is open and recovered
	kick  chan struct{}
	// ctx ends when the data plane closes: forwarders' calls stop then.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // forwarders and interest rounds

	mu struct {
		sync.Mutex
		closed      bool
		registering bool           // an interest round is under way
		fwdBytes    map[uint64]int // node -> forwarded bytes not yet answered
		fwdRanges   int
		// queues lists, by topic, the heads whose forward queue is not
		// empty (at most ForwardRanges), so that a produce for a key
		// whose range was split or merged queues behind what an
		// ancestor still holds for it (cluster_forward.go).
		queues   map[uint64][]queueEntry
		queueSeq uint64
		reads    int
		// Owner side: who waits on which topic, and what to tell them.
		interest  map[uint64]map[uint64]time.Time // topic -> node -> expiry
		interests int
		pending   map[uint64]dataplane.End // range -> its latest end
		dropped   uint64
		// Reader side: topics to register now, when each was last
		// registered, and the ends heard of other nodes' ranges.
		want       map[uint64]bool
		registered map[uint64]time.Time
		ends       map[uint64]uint64
	}
}

func newDataPlane(b *Broker, tr peer.Transport, self uint64, lim DataLimits) *dataPlane {
	d := &dataPlane{b: b, tr: tr, self: self, lim: lim, kick: make(chan struct{}, 1)}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.mu.fwdBytes = map[uint64]int{}
	d.mu.queues = map[uint64][]queueEntry{}
	d.mu.interest = map[uint64]map[uint64]time.Time{}
	d.mu.pending = map[uint64]dataplane.End{}
	d.mu.want = map[uint64]bool{}
	d.mu.registered = map[uint64]time.Time{}
	d.mu.ends = map[uint64]uint64{}
	return d
}

// registerData installs the data path's handlers on the transport; it
// runs before the transport starts. Requests are refused as retriable
// until the segment store is open (ready).
func (b *Broker) registerData(tr peer.Transport) error {
	cc := b.cfg.Cluster
	lim := cc.Data.withDefaults(cc.MetadataTimeout)
	if err := lim.validate(); err != nil {
		return err
	}
	b.data = newDataPlane(b, tr, cc.NodeID, lim)
	if err := tr.HandleCall(peer.ChannelData, b.data.serveCall); err != nil {
		return fmt.Errorf("broker: data path: %w", err)
	}
	if err := tr.Handle(peer.ChannelData, b.data.serveOneWay); err != nil {
		return fmt.Errorf("broker: data path: %w", err)
	}
	return nil
}

func (d *dataPlane) wake() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// serveCall answers another node's data request. It runs on the
// transport's bounded handler pool.
func (d *dataPlane) serveCall(ctx context.Context, from uint64, req []byte) ([]byte, error) {
	if !d.ready.Load() || d.b.closed.Load() {
		return refusal(dataplane.StatusRefused, ErrShuttingDown, "node-%d is starting or stopping", d.self), nil
	}
	kind, err := dataplane.KindOf(req)
	if err != nil {
		return nil, err
	}
	switch kind {
	case dataplane.KindAppend:
		return d.serveAppend(ctx, from, req)
	case dataplane.KindRead:
		return d.serveRead(req)
	case dataplane.KindInfo:
		return d.serveInfo(req)
	case dataplane.KindSeek:
		return d.serveSeek(req)
	case dataplane.KindInterest:
		return d.serveInterest(from, req)
	case dataplane.KindGroup:
		return d.serveGroup(ctx, req)
	case dataplane.KindRoll:
		return d.serveRoll(req)
	}
	return nil, fmt.Errorf("broker: data request of unknown kind %v from node %d", kind, from)
}

// serveOneWay takes another node's notifications. It runs on the
// connection's reader and must not block.
func (d *dataPlane) serveOneWay(from uint64, msg []byte) {
	m, err := dataplane.DecodeAppended(msg)
	if err != nil {
		d.b.log.Warn("cluster: a bad data notification", "from", from, "err", err)
		return
	}
	d.heard(m.Ends)
}

// refusal encodes a refused answer carrying err's wire reason.
func refusal(st dataplane.Status, err error, format string, args ...any) []byte {
	r := &dataplane.Refusal{Status: st, Reason: reasonOf(err), Message: fmt.Sprintf(format, args...)}
	return r.Encode()
}

// reasonOf is the wire reason of a broker error, as the client server
// maps it, so a refusal forwarded between nodes reaches the client with
// the reason it would have had on the owner.
func reasonOf(err error) string {
	var me metadata.Error
	if errors.As(err, &me) {
		return string(me)
	}
	for _, known := range []error{
		ErrInvalidCursor, ErrShuttingDown, ErrRetry, ErrTooManyMembers, ErrPermission,
		ErrNotEnabled, ErrInvalidBatch, ErrNotOwner, ErrMetadataUnavailable,
	} {
		if errors.Is(err, known) {
			return known.Error()
		}
	}
	return "internal_error"
}

// remoteError turns another node's refusal back into the error the
// request would have met there.
func remoteError(node uint64, r *dataplane.Refusal) error {
	for _, known := range []error{ErrShuttingDown, ErrRetry, ErrInvalidBatch, ErrNotOwner, ErrMetadataUnavailable} {
		if r.Reason == known.Error() {
			return fmt.Errorf("%w: node-%d: %s", known, node, r.Message)
		}
	}
	if r.Reason == "internal_error" {
		return fmt.Errorf("broker: node-%d: %s", node, r.Message)
	}
	return fmt.Errorf("%w: node-%d: %s", metadata.Error(r.Reason), node, r.Message)
}

// call sends a data request to node, bounded by ctx and CallTimeout. A
// failure to reach the node, or an answer that did not come in time, is
// an UnreachableError; another node's refusal comes back as a
// *dataplane.Refusal for the caller to map.
func (d *dataPlane) call(ctx context.Context, node uint64, req []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, d.lim.CallTimeout)
	defer cancel()
	resp, err := d.tr.Call(ctx, node, peer.ChannelData, req)
	if err == nil {
		return resp, nil
	}
	if errors.Is(err, peer.ErrBusy) || errors.Is(err, peer.ErrTooManyCalls) || errors.Is(err, peer.ErrBackpressure) {
		return nil, fmt.Errorf("%w: node-%d: %v", ErrTooManyRequests, node, err)
	}
	if errors.Is(err, peer.ErrClosed) {
		return nil, fmt.Errorf("%w: %v", ErrShuttingDown, err)
	}
	if errors.Is(err, peer.ErrFrameTooLarge) {
		// The node answered or would have: it is reachable, and sending
		// the same again would fail the same way.
		return nil, fmt.Errorf("%w: a call to node-%d does not fit one peer frame: %v", ErrTooLarge, node, err)
	}
	return nil, d.unreachable(node, err)
}

func (d *dataPlane) unreachable(node uint64, cause error) error {
	e := &UnreachableError{Node: clusterNodeName(node), Cause: cause.Error()}
	if d.b.cluster != nil && d.b.cluster.gossip != nil {
		for _, m := range d.b.cluster.gossip.Members() {
			if m.ID == node {
				e.ClientAddr = m.ClientAddr
			}
		}
	}
	return e
}

// primaryOf is the node id of a segment's primary, 0 for a segment with
// no replica list (opened by a single node).
func primaryOf(seg metadata.Segment) uint64 {
	if len(seg.Replicas) == 0 {
		return 0
	}
	return nodeOfName(seg.Replicas[0])
}

// reserveForward takes n forwarded bytes against node's bound.
func (d *dataPlane) reserveForward(node uint64, n int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if have := d.mu.fwdBytes[node]; have > 0 && have+n > d.lim.ForwardBytes {
		return fmt.Errorf("%w: %d bytes of produces forwarded to node-%d are waiting for its answer (limit %d)",
			ErrTooManyRequests, have, node, d.lim.ForwardBytes)
	}
	d.mu.fwdBytes[node] += n
	return nil
}

func (d *dataPlane) releaseForward(node uint64, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.fwdBytes[node] -= n; d.mu.fwdBytes[node] <= 0 {
		delete(d.mu.fwdBytes, node)
	}
}

// addQueue lists h's forward queue, which just became busy, and returns
// its place: later than every queue listed before.
//
// REQUIRES: h.mu held.
func (d *dataPlane) addQueue(h *head, span keyspace.Span) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.queueSeq++
	d.mu.queues[h.topicID] = append(d.mu.queues[h.topicID], queueEntry{h: h, seq: d.mu.queueSeq, span: span})
	return d.mu.queueSeq
}

// dropQueue unlists h's forward queue, which drained.
//
// REQUIRES: h.mu held.
func (d *dataPlane) dropQueue(h *head) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := slices.DeleteFunc(d.mu.queues[h.topicID], func(e queueEntry) bool { return e.h == h })
	if len(q) == 0 {
		delete(d.mu.queues, h.topicID)
	} else {
		d.mu.queues[h.topicID] = q
	}
}

// queuesOver lists, oldest first, the busy forward queues of topicID
// younger than after whose keys overlap span, other than those of
// rangeID: those of ranges split or merged into it, or of the same keys
// before that.
func (d *dataPlane) queuesOver(topicID, rangeID uint64, span keyspace.Span, after uint64) []queueEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []queueEntry
	for _, e := range d.mu.queues[topicID] {
		if e.seq > after && e.h.rangeID != rangeID && e.span.Start < span.End && span.Start < e.span.End {
			out = append(out, e)
		}
	}
	return out
}

// startForwarder runs run on a goroutine of its own, taking one of the
// ForwardRanges slots until it returns.
func (d *dataPlane) startForwarder(run func()) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.closed {
		return ErrShuttingDown
	}
	if d.mu.fwdRanges >= d.lim.ForwardRanges {
		return fmt.Errorf("%w: produces are being forwarded for %d ranges already (limit %d)",
			ErrTooManyRequests, d.mu.fwdRanges, d.lim.ForwardRanges)
	}
	d.mu.fwdRanges++
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer func() {
			d.mu.Lock()
			d.mu.fwdRanges--
			d.mu.Unlock()
		}()
		run()
	}()
	return nil
}

// close stops the data plane's requests: new ones are refused, forwarded
// calls under way end, and close waits for the forwarders.
func (d *dataPlane) close() {
	d.ready.Store(false)
	d.mu.Lock()
	d.mu.closed = true
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()
}

// reserveRead takes one of the RemoteReads slots.
func (d *dataPlane) reserveRead() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.reads >= d.lim.RemoteReads {
		return fmt.Errorf("%w: %d reads of other nodes' segments are in flight (limit %d)",
			ErrTooManyRequests, d.mu.reads, d.lim.RemoteReads)
	}
	d.mu.reads++
	return nil
}

func (d *dataPlane) readDone() {
	d.mu.Lock()
	d.mu.reads--
	d.mu.Unlock()
}
