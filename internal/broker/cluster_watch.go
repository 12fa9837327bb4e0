package broker

import (
	"context"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/dataplane"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/peer"
)

// Waking readers across nodes. Long polls and subscriptions sleep on
// their topic's watch, which a durable append fires on the node that
// appended. A node whose readers wait on a topic written elsewhere:
//
//   - registers interest with each node writing one of the topic's active
//     ranges: an interest call naming the topics, when a reader first
//     waits and then every InterestRenew while readers wait; an interest
//     expires on its own after three periods;
//   - is sent, by those nodes, coalesced "appended" messages (topic,
//     range, end) once appends are durable there, and fires the topic's
//     watch;
//   - compares the ends each interest call answers with those it heard,
//     and fires the watch of a topic whose range moved: a lost
//     notification (a full queue, a dropped connection) delays a reader
//     by at most one InterestRenew, never forever.
//
// Segments opened and sealed elsewhere fire the watch through the
// metadata (cluster_sync.go), and make the next wait register again, with
// the range's new node.

// interestBatch bounds the topics of one interest call and the ends of
// one notification.
const interestBatch = 4096

// dataLoop sends notifications and interest calls. It is the data plane's
// one long-lived goroutine, owned by the broker, and exits when ctx ends.
func (b *Broker) dataLoop(ctx context.Context) {
	defer b.done.Done()
	if h := b.replicas(); h != nil {
		// The replica host's loop: incoming replication, resends and
		// catch-up reads. It ends with ctx, before the store closes.
		b.done.Add(1)
		go func() {
			defer b.done.Done()
			h.Run(ctx)
		}()
	}
	d := b.data
	renew := time.NewTicker(d.lim.InterestRenew)
	defer renew.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
			d.notify()
			d.register(ctx, false)
		case <-renew.C:
			d.notify()
			d.expire()
			d.register(ctx, true)
		}
	}
}

// wantInterest asks for topicID's interest to be registered, unless it
// was registered within the last renewal period. Called by a reader about
// to wait.
func (d *dataPlane) wantInterest(topicID uint64) {
	d.mu.Lock()
	at, ok := d.mu.registered[topicID]
	fresh := ok && d.b.cfg.Clock.Now().Sub(at) < d.lim.InterestRenew
	if !fresh {
		d.mu.want[topicID] = true
	}
	d.mu.Unlock()
	if !fresh {
		d.wake()
	}
}

// staleInterest makes the next reader of topicID register again: one of
// its ranges has a new segment, possibly on another node. The topic
// stays registered meanwhile, so that what it is told is still kept.
func (d *dataPlane) staleInterest(topicID uint64) {
	d.mu.Lock()
	if _, ok := d.mu.registered[topicID]; ok {
		d.mu.registered[topicID] = time.Time{}
	}
	d.mu.Unlock()
}

// register sends interest calls for the topics wanted now, or, on a
// renewal, for every topic with waiting readers, on a goroutine of its
// own so that a slow node never delays notifications. One round runs at
// a time: topics wanted meanwhile wait for the next.
func (d *dataPlane) register(ctx context.Context, renewal bool) {
	d.mu.Lock()
	if d.mu.registering || d.mu.closed {
		d.mu.Unlock()
		return
	}
	topics := d.mu.want
	d.mu.want = map[uint64]bool{}
	d.mu.registering = true
	d.wg.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.wg.Done()
		d.registerRound(ctx, topics, renewal)
		d.mu.Lock()
		d.mu.registering = false
		more := len(d.mu.want) > 0
		d.mu.Unlock()
		if more {
			d.wake()
		}
	}()
}

// registerRound sends one round of interest calls, to different nodes in
// parallel, each bounded by InterestRenew.
func (d *dataPlane) registerRound(ctx context.Context, topics map[uint64]bool, renewal bool) {
	if renewal {
		for _, id := range d.b.waitedTopics() {
			topics[id] = true
		}
	}
	if len(topics) == 0 {
		return
	}
	now := d.b.cfg.Clock.Now()
	byNode := map[uint64][]uint64{}
	d.mu.Lock()
	for id := range topics {
		d.mu.registered[id] = now
	}
	d.mu.Unlock()
	for id := range topics {
		for _, node := range d.b.writersOf(id, d.self) {
			byNode[node] = append(byNode[node], id)
		}
	}
	var wg sync.WaitGroup
	for node, ids := range byNode {
		for len(ids) > 0 {
			n := min(len(ids), interestBatch)
			chunk := ids[:n]
			ids = ids[n:]
			wg.Add(1)
			go func() {
				defer wg.Done()
				d.registerWith(ctx, node, chunk)
			}()
		}
	}
	wg.Wait()
	if renewal {
		d.pruneEnds(topics)
	}
}

// registerWith sends one interest call and fires the watches of topics
// whose ranges there moved since last heard.
func (d *dataPlane) registerWith(ctx context.Context, node uint64, topics []uint64) {
	ctx, cancel := context.WithTimeout(ctx, d.lim.InterestRenew)
	defer cancel()
	req := dataplane.Interest{TTLMs: uint64(3 * d.lim.InterestRenew / time.Millisecond), Topics: topics}
	resp, err := d.tr.Call(ctx, node, peer.ChannelData, req.Encode())
	if err != nil {
		// The node is down or slow: its ranges do not move, and the next
		// renewal tries again.
		return
	}
	ans, err := dataplane.DecodeInterestAnswer(resp)
	if err != nil {
		return
	}
	d.heard(ans.Ends)
}

// heard records ranges' ends learnt from another node and fires the
// watches of the topics whose ranges moved, or were not known yet. Only
// topics this node registered interest in count: others have no reader
// here (or had none when the sender's table was filled). The table
// keeps at most InterestEntries ends; an end it has no room for still
// fires its topic's watch, and renewals look again.
func (d *dataPlane) heard(ends []dataplane.End) {
	var fire []uint64
	d.mu.Lock()
	for _, e := range ends {
		if _, ok := d.mu.registered[e.Topic]; !ok {
			continue
		}
		had, ok := d.mu.ends[e.Range]
		if ok && had == e.End {
			continue
		}
		if ok || len(d.mu.ends) < d.lim.InterestEntries {
			d.mu.ends[e.Range] = e.End
		}
		if len(fire) == 0 || fire[len(fire)-1] != e.Topic {
			fire = append(fire, e.Topic)
		}
	}
	d.mu.Unlock()
	for _, t := range fire {
		d.b.fireWatch(t)
	}
}

// pruneEnds forgets the ends of ranges of topics nobody waits on now, so
// the table stays bounded by the ranges of waited topics.
func (d *dataPlane) pruneEnds(waited map[uint64]bool) {
	keep := map[uint64]bool{}
	for id := range waited {
		for _, r := range d.b.activeRangesOf(id) {
			keep[r] = true
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for r := range d.mu.ends {
		if !keep[r] {
			delete(d.mu.ends, r)
		}
	}
	for id := range d.mu.registered {
		if !waited[id] {
			delete(d.mu.registered, id)
		}
	}
}

// serveInterest records another node's interest in topics (while the
// table has room) and answers where the topics' ranges written here end.
func (d *dataPlane) serveInterest(from uint64, req []byte) ([]byte, error) {
	m, err := dataplane.DecodeInterest(req)
	if err != nil {
		return nil, err
	}
	ttl := time.Duration(min(m.TTLMs, uint64(time.Hour/time.Millisecond))) * time.Millisecond
	until := d.b.cfg.Clock.Now().Add(ttl)
	topics := distinctTopics(m.Topics)
	if len(topics) < len(m.Topics) {
		d.b.log.Warn("cluster: an interest call named more topics than one call may; the rest are ignored",
			"from", from, "topics", len(m.Topics), "limit", interestBatch)
	}
	d.mu.Lock()
	full := 0
	for _, t := range topics {
		nodes := d.mu.interest[t]
		if _, ok := nodes[from]; !ok {
			if d.mu.interests >= d.lim.InterestEntries {
				full++
				continue
			}
			if nodes == nil {
				nodes = map[uint64]time.Time{}
				d.mu.interest[t] = nodes
			}
			d.mu.interests++
		}
		nodes[from] = until
	}
	d.mu.Unlock()
	if full > 0 {
		d.b.log.Warn("cluster: the interest table is full; those readers wake on renewals only",
			"from", from, "topics", full, "limit", d.lim.InterestEntries)
	}
	var ans dataplane.InterestAnswer
	for _, t := range topics {
		ans.Ends = append(ans.Ends, d.b.localEnds(t, maxInterestEnds-len(ans.Ends))...)
		if len(ans.Ends) >= maxInterestEnds {
			break // the asker's renewals compare the rest by notifications only
		}
	}
	return ans.Encode(), nil
}

// maxInterestEnds bounds the ends one interest answer lists (at most 30
// bytes each, so an answer stays well inside a peer frame).
const maxInterestEnds = 1 << 16

// distinctTopics is topics without repeats, at most interestBatch of
// them: what one interest call from this code ever names.
func distinctTopics(topics []uint64) []uint64 {
	seen := make(map[uint64]bool, min(len(topics), interestBatch))
	out := make([]uint64, 0, min(len(topics), interestBatch))
	for _, t := range topics {
		if len(out) == interestBatch {
			break
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// expire drops interest registrations past their time.
func (d *dataPlane) expire() {
	now := d.b.cfg.Clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for t, nodes := range d.mu.interest {
		for n, until := range nodes {
			if now.After(until) {
				delete(nodes, n)
				d.mu.interests--
			}
		}
		if len(nodes) == 0 {
			delete(d.mu.interest, t)
		}
	}
}

// appended notes a durable append to a range written here, for the
// nodes interested in its topic. It runs on the store's commit path: it
// only queues (bounded) and wakes the loop.
func (d *dataPlane) appended(topicID, rangeID, end uint64) {
	d.mu.Lock()
	if len(d.mu.interest[topicID]) == 0 {
		d.mu.Unlock()
		return
	}
	e, ok := d.mu.pending[rangeID]
	switch {
	case ok:
		e.End = max(e.End, end)
		d.mu.pending[rangeID] = e
	case len(d.mu.pending) >= d.lim.NotifyQueue:
		d.mu.dropped++
	default:
		d.mu.pending[rangeID] = dataplane.End{Topic: topicID, Range: rangeID, End: end}
	}
	d.mu.Unlock()
	d.wake()
}

// notify sends what was appended since the last call to the nodes
// interested, one message per node (or per interestBatch ends). A
// message the transport refuses is dropped: renewals cover it.
func (d *dataPlane) notify() {
	d.mu.Lock()
	pending := d.mu.pending
	if len(pending) == 0 {
		d.mu.Unlock()
		return
	}
	d.mu.pending = map[uint64]dataplane.End{}
	byNode := map[uint64][]dataplane.End{}
	for _, e := range pending {
		for n := range d.mu.interest[e.Topic] {
			byNode[n] = append(byNode[n], e)
		}
	}
	d.mu.Unlock()
	for n, ends := range byNode {
		for len(ends) > 0 {
			k := min(len(ends), interestBatch)
			_ = d.tr.Send(n, peer.ChannelData, (&dataplane.Appended{Ends: ends[:k]}).Encode())
			ends = ends[k:]
		}
	}
}

// waitedTopics lists the topics with readers waiting on this node.
func (b *Broker) waitedTopics() []uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []uint64
	for id, w := range b.mu.watches {
		if w.waiting() {
			out = append(out, id)
		}
	}
	return out
}

// writersOf lists the nodes other than self that write an active range
// of topicID.
func (b *Broker) writersOf(topicID, self uint64) []uint64 {
	seen := map[uint64]bool{}
	var out []uint64
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) {
		for _, r := range st.ActiveRanges(topicID) {
			seg, ok := st.ActiveSegment(r.ID)
			if !ok {
				continue
			}
			if n := primaryOf(seg); n != 0 && n != self && !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	})
	return out
}

func (b *Broker) activeRangesOf(topicID uint64) []uint64 {
	var out []uint64
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) { out = activeIDs(st, topicID) })
	return out
}

// localEnds lists where topicID's active ranges written here end, at
// most limit of them.
func (b *Broker) localEnds(topicID uint64, limit int) []dataplane.End {
	var segs []metadata.Segment
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) {
		for _, r := range st.ActiveRanges(topicID) {
			if len(segs) >= limit {
				return
			}
			if seg, ok := st.ActiveSegment(r.ID); ok && b.writesHere(seg) {
				segs = append(segs, seg)
			}
		}
	})
	var out []dataplane.End
	for _, seg := range segs {
		if ext, err := b.segmentExtent(context.Background(), seg); err == nil {
			out = append(out, dataplane.End{Topic: topicID, Range: seg.Range, End: ext.durableEnd})
		}
	}
	return out
}
