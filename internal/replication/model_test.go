package replication

// The model test runs one Primary and its Followers over an in-memory
// network that loses, reorders and duplicates messages, with follower
// crashes (a crash keeps only what was fsynced), a store whose fsyncs
// complete in random order with the rest, and, at the end, either a roll
// (the primary fences and drains) or a failover (survivors fenced at
// random moments while the old primary keeps running, sometimes asked
// too, the seal computed by FailoverEnd, every copy truncated to it).
// A crashed follower restarts with the watermark it learned or without,
// or, in runs that end in a roll, with its disk replaced. Every message crosses the
// network encoded, so the codecs are exercised too.
//
// Checked at every step: an append is committed only once a quorum holds
// it fsynced (W1), offsets are assigned in order (W2), the watermark never
// moves back (R1) and no follower learns one above the primary's, every
// copy's bytes are the primary's bytes at the same offsets, and nothing is
// accepted after a fence. At the end: no committed end is above the
// failover seal (W6), copies cut to the seal are byte-identical, and a
// roll drains once the network behaves.
//
// All randomness comes from one seed. A failing seed prints itself;
// `go test ./internal/replication -run TestModel -model.seed=N` replays it
// exactly, and -model.seeds=N runs more.

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"hash"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/malachi-log/malachi/internal/batch"
)

var (
	modelSeed  = flag.Uint64("model.seed", 0, "run only this seed of TestModel")
	modelSeeds = flag.Int("model.seeds", 300, "how many seeds TestModel runs")
)

func TestModel(t *testing.T) {
	if *modelSeed != 0 {
		if _, err := runModel(*modelSeed); err != nil {
			t.Fatalf("seed %d: %v", *modelSeed, err)
		}
		return
	}
	n := *modelSeeds
	if testing.Short() {
		n = min(n, 40)
	}
	failed := 0
	for seed := uint64(1); seed <= uint64(n) && failed < 5; seed++ {
		if _, err := runModel(seed); err != nil {
			failed++
			t.Errorf("seed %d: %v\n\treplay: go test ./internal/replication -run TestModel -model.seed=%d -v", seed, err, seed)
		}
	}
}

// copyStore is a node's store of one segment: batches in order, the first
// synced of them fsynced.
type copyStore struct {
	base    uint64
	batches []entry
	synced  int
}

func (s *copyStore) end() uint64 {
	if len(s.batches) == 0 {
		return s.base
	}
	return s.batches[len(s.batches)-1].End
}

func (s *copyStore) syncedEnd() uint64 {
	if s.synced == 0 {
		return s.base
	}
	return s.batches[s.synced-1].End
}

// cut keeps the batches below end; end must be a batch boundary.
func (s *copyStore) cut(end uint64) error {
	i := 0
	for i < len(s.batches) && s.batches[i].End <= end {
		i++
	}
	if i > 0 && s.batches[i-1].End != end || i == 0 && end != s.base {
		return fmt.Errorf("cut at %d is not a batch boundary", end)
	}
	s.batches = s.batches[:i]
	s.synced = min(s.synced, i)
	return nil
}

type packet struct {
	from, to uint64 // node ids; the primary is node 1
	msg      []byte
}

type modelNode struct {
	id        uint64
	f         *Follower
	store     copyStore
	watermark uint64 // the follower's learned watermark, per incarnation
	fencedAt  uint64 // End() when fenced, for "nothing accepted after a fence"
	// lost is the fsynced end the node held when its disk was replaced:
	// acks it sent before were honest, and W1 counts it below there.
	lost uint64
}

type model struct {
	rng      *rand.Rand
	seg      uint64
	p        *Primary
	pstore   copyStore
	nodes    []*modelNode
	net      []packet
	reads    []Read
	now      int64
	loss     float64
	dup      float64
	crash    float64
	quorum   int
	wm       uint64 // the primary's watermark last seen
	released uint64 // end of the appends committed so far
	primDown bool   // the primary is dead (failover of RF 1)
	wipes    bool   // a crash may lose a follower's disk (runs ending in a roll)
	seal     uint64
	sealed   bool
	trace    hash.Hash64
}

// runModel runs one seed and returns a digest of everything that crossed
// the network and every commit, in order.
func runModel(seed uint64) (uint64, error) {
	m := newModel(seed)
	err := m.run()
	return m.trace.Sum64(), err
}

func (m *model) run() error {
	steps := 300 + m.rng.IntN(1200)
	failoverAt := m.rng.IntN(steps)
	failover := m.rng.IntN(3) > 0
	// A lost disk is a lost replica, beyond what a failover tolerates;
	// with a roll it exercises a follower back with less than it acked,
	// whose vote must not count what it lost (W1).
	m.wipes = !failover
	for i := range steps {
		if failover && i == failoverAt && len(m.nodes) > 0 {
			if err := m.startFailover(); err != nil {
				return fmt.Errorf("step %d: %w", i, err)
			}
		}
		if err := m.step(); err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
	}
	if failover {
		return m.finishFailover()
	}
	return m.roll()
}

// A seed replays exactly: the same messages in the same order, the same
// commits.
func TestModelReplaysExactly(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		a, errA := runModel(seed)
		b, errB := runModel(seed)
		if a != b || (errA == nil) != (errB == nil) {
			t.Fatalf("seed %d: digests %x and %x, errors %v and %v", seed, a, b, errA, errB)
		}
	}
	if a, _ := runModel(1); a == func() uint64 { b, _ := runModel(2); return b }() {
		t.Fatal("seeds 1 and 2 ran the same history")
	}
}

func newModel(seed uint64) *model {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	rf := []int{1, 2, 3, 3, 5}[rng.IntN(5)]
	replicas := make([]uint64, rf)
	for i := range replicas {
		replicas[i] = uint64(i + 1)
	}
	base := uint64(rng.IntN(1000))
	cfg := Config{
		Segment: 7, Base: base, Replicas: replicas,
		MaxInflightBytes: 100 + rng.IntN(2000),
		MaxRetainedBytes: 300 + rng.IntN(4000),
		MaxMessageBytes:  100 + rng.IntN(1000),
		ResendAfter:      int64(20 + rng.IntN(200)),
	}
	p, err := NewPrimary(cfg)
	if err != nil {
		panic(err)
	}
	m := &model{
		rng: rng, seg: 7, p: p, pstore: copyStore{base: base},
		loss: rng.Float64() * 0.3, dup: rng.Float64() * 0.2, crash: rng.Float64() * 0.02,
		quorum: Quorum(rf), wm: base, released: base, trace: fnv.New64a(),
	}
	for _, id := range replicas[1:] {
		m.nodes = append(m.nodes, &modelNode{id: id, f: NewFollower(7, base, base), store: copyStore{base: base}, watermark: base})
	}
	return m
}

func (m *model) step() error {
	switch r := m.rng.IntN(100); {
	case r < 25:
		return m.appendBatch()
	case r < 60:
		return m.deliver()
	case r < 68:
		return m.syncPrimary()
	case r < 80:
		return m.syncFollower()
	case r < 88:
		m.now += int64(m.rng.IntN(100))
		if !m.primDown {
			return m.primaryOut(m.p.Tick(m.now))
		}
	case r < 94:
		return m.serveRead()
	default:
		if m.rng.Float64() < m.crash*10 {
			return m.crashFollower()
		}
	}
	return nil
}

func (m *model) appendBatch() error {
	if m.primDown {
		return nil
	}
	recs := make([]batch.Record, 1+m.rng.IntN(4))
	for i := range recs {
		recs[i] = batch.Record{Timestamp: m.now, Key: []byte{byte(i)}, Value: bytes.Repeat([]byte{byte(m.rng.IntN(256))}, m.rng.IntN(40))}
	}
	b, err := batch.EncodeBatch(nil, 0, recs, batch.CodecNone)
	if err != nil {
		return err
	}
	want := m.p.End()
	base, out, err := m.p.Append(b, m.now)
	var sealed *SealedError
	switch {
	case errors.Is(err, ErrBackpressure):
		return nil
	case errors.As(err, &sealed):
		if !m.p.Fenced() || sealed.End != m.p.End() {
			return fmt.Errorf("sealed refusal %v from a primary fenced=%v at %d", err, m.p.Fenced(), m.p.End())
		}
		return nil
	case err != nil:
		return err
	case base != want:
		return fmt.Errorf("W2: append got base %d, want %d", base, want)
	case m.p.RetainedBytes() > m.p.cfg.MaxRetainedBytes:
		return fmt.Errorf("B1: %d bytes retained, bound %d", m.p.RetainedBytes(), m.p.cfg.MaxRetainedBytes)
	}
	if err := batch.Verify(b); err != nil {
		return fmt.Errorf("stamped batch: %w", err)
	}
	m.pstore.batches = append(m.pstore.batches, entry{Span: Span{base, base + uint64(len(recs))}, data: b})
	return m.primaryOut(out)
}

func (m *model) deliver() error {
	if len(m.net) == 0 {
		return nil
	}
	i := m.rng.IntN(len(m.net))
	pk := m.net[i]
	m.trace.Write(pk.msg)
	if m.rng.Float64() >= m.dup {
		m.net = slices.Delete(m.net, i, i+1)
	}
	if m.rng.Float64() < m.loss {
		return nil
	}
	msg, err := Decode(pk.msg)
	if err != nil {
		return err
	}
	if pk.to == 1 {
		return m.toPrimary(pk.from, msg)
	}
	return m.toFollower(m.node(pk.to), msg)
}

func (m *model) toPrimary(from uint64, msg Message) error {
	if m.primDown {
		return nil
	}
	switch x := msg.(type) {
	case Ack:
		return m.primaryOut(m.p.Acked(from, x.End, m.now))
	case Behind:
		return m.primaryOut(m.p.Behind(from, x.Has, m.now))
	}
	return fmt.Errorf("primary got %T", msg)
}

func (m *model) toFollower(n *modelNode, msg Message) error {
	a, ok := msg.(Append)
	if !ok {
		return fmt.Errorf("follower got %T", msg)
	}
	if a.Watermark > m.p.Watermark() {
		return fmt.Errorf("R1: an append carries watermark %d above the primary's %d", a.Watermark, m.p.Watermark())
	}
	acc, err := n.f.Append(a)
	if n.f.Fenced() {
		if !errors.Is(err, ErrFenced) || len(acc.Write) > 0 || n.f.End() != n.fencedAt {
			return fmt.Errorf("W4: node %d accepted %v after its fence (%v)", n.id, acc.Span, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if w := n.f.Watermark(); w < n.watermark {
		return fmt.Errorf("R1: node %d's watermark went from %d to %d", n.id, n.watermark, w)
	}
	n.watermark = n.f.Watermark()
	if len(acc.Write) > 0 {
		if err := m.write(n, acc); err != nil {
			return err
		}
	}
	m.reply(n, acc.Reply)
	return nil
}

// write applies a follower's Write to its store and checks the bytes are
// the primary's at the same offsets.
func (m *model) write(n *modelNode, acc Accepted) error {
	at := n.store.end()
	if acc.Span.Base != at {
		return fmt.Errorf("node %d writes at %d, its store ends at %d", n.id, acc.Span.Base, at)
	}
	for _, b := range acc.Write {
		h, err := batch.ParseHeader(b)
		if err != nil {
			return err
		}
		j := slices.IndexFunc(m.pstore.batches, func(e entry) bool { return e.Base == h.BaseOffset })
		if j < 0 || !bytes.Equal(m.pstore.batches[j].data, b) || h.BaseOffset != at {
			return fmt.Errorf("node %d got bytes at %d that are not the primary's", n.id, h.BaseOffset)
		}
		n.store.batches = append(n.store.batches, m.pstore.batches[j])
		at = m.pstore.batches[j].End
	}
	if at != acc.Span.End || at != n.f.End() {
		return fmt.Errorf("node %d wrote to %d, span ends at %d, follower at %d", n.id, at, acc.Span.End, n.f.End())
	}
	return nil
}

func (m *model) reply(n *modelNode, msg Message) {
	if msg != nil {
		m.net = append(m.net, packet{from: n.id, to: 1, msg: Encode(msg)})
	}
}

func (m *model) syncPrimary() error {
	if m.primDown || len(m.pstore.batches) == 0 {
		return nil
	}
	m.pstore.synced += m.rng.IntN(len(m.pstore.batches) - m.pstore.synced + 1)
	return m.primaryOut(m.p.LocalSynced(m.pstore.syncedEnd(), m.now))
}

func (m *model) syncFollower() error {
	if len(m.nodes) == 0 {
		return nil
	}
	n := m.nodes[m.rng.IntN(len(m.nodes))]
	n.store.synced += m.rng.IntN(len(n.store.batches) - n.store.synced + 1)
	m.reply(n, n.f.Synced(n.store.syncedEnd()))
	return nil
}

// crashFollower loses what a follower had not fsynced and restarts it.
func (m *model) crashFollower() error {
	if len(m.nodes) == 0 {
		return nil
	}
	n := m.nodes[m.rng.IntN(len(m.nodes))]
	fenced := n.f.Fenced()
	n.store.batches = n.store.batches[:n.store.synced]
	if m.wipes && m.rng.IntN(4) == 0 {
		n.lost = max(n.lost, n.store.syncedEnd())
		n.store.batches, n.store.synced = nil, 0
		n.f = NewFollower(m.seg, n.store.base, n.store.base)
		n.watermark = n.f.Watermark()
	} else if m.rng.IntN(2) == 0 {
		// The node kept the watermark it learned: R1 holds across the
		// restart, and the check below carries on.
		n.f = RestoreFollower(m.seg, n.store.base, n.store.syncedEnd(), n.f.Watermark())
	} else {
		n.f = NewFollower(m.seg, n.store.base, n.store.syncedEnd())
		n.watermark = n.f.Watermark()
	}
	if fenced {
		// The fence is not durable: the control plane fences the copy
		// again when it comes back. Its answer can only be higher.
		n.f.Fence()
		n.fencedAt = n.f.End()
	}
	return nil
}

// serveRead answers one of the primary's store reads, or loses it.
func (m *model) serveRead() error {
	if len(m.reads) == 0 || m.primDown {
		return nil
	}
	i := m.rng.IntN(len(m.reads))
	rd := m.reads[i]
	m.reads = slices.Delete(m.reads, i, i+1)
	if m.rng.Float64() < m.loss {
		return nil
	}
	if rd.To > m.pstore.syncedEnd() {
		return fmt.Errorf("read of [%d, %d) above the local fsynced end %d", rd.From, rd.To, m.pstore.syncedEnd())
	}
	var buf []byte
	for _, e := range m.pstore.batches {
		if e.Base >= rd.From && e.End <= rd.To && (len(buf) == 0 || len(buf)+len(e.data) <= rd.MaxBytes) {
			buf = append(buf, e.data...)
		} else if len(buf) > 0 {
			break
		}
	}
	out, err := m.p.ReadDone(rd.Node, rd.From, buf, m.now)
	if err != nil {
		return err
	}
	return m.primaryOut(out)
}

func (m *model) primaryOut(out Output) error {
	for _, s := range out.Sends {
		if s.Msg.Segment != m.seg {
			return fmt.Errorf("send for segment %d", s.Msg.Segment)
		}
		m.net = append(m.net, packet{from: 1, to: s.To, msg: Encode(s.Msg)})
	}
	m.reads = append(m.reads, out.Reads...)
	for _, c := range out.Committed {
		if c.Base != m.released {
			return fmt.Errorf("committed %v after %d: out of order", c, m.released)
		}
		if c.End > m.p.Watermark() {
			return fmt.Errorf("committed %v above the watermark %d", c, m.p.Watermark())
		}
		if held := m.durableCopies(c.End); held < m.quorum {
			return fmt.Errorf("W1: committed %v held fsynced by %d replicas, quorum %d", c, held, m.quorum)
		}
		if m.sealed && c.End > m.seal {
			return fmt.Errorf("W6: committed %v above the failover seal %d", c, m.seal)
		}
		m.released = c.End
		fmt.Fprintf(m.trace, "committed %d;", c.End)
	}
	if w := m.p.Watermark(); w < m.wm {
		return fmt.Errorf("R1: the watermark went from %d to %d", m.wm, w)
	}
	m.wm = m.p.Watermark()
	return nil
}

// durableCopies counts the replicas whose store holds end fsynced, or
// held it before its disk was replaced.
func (m *model) durableCopies(end uint64) int {
	n := 0
	if m.pstore.syncedEnd() >= end {
		n++
	}
	for _, x := range m.nodes {
		if x.store.syncedEnd() >= end || x.lost >= end {
			n++
		}
	}
	return n
}

func (m *model) node(id uint64) *modelNode {
	for _, n := range m.nodes {
		if n.id == id {
			return n
		}
	}
	panic(fmt.Sprintf("no node %d", id))
}

// roll fences the primary, then lets the network behave until the
// segment drains.
func (m *model) roll() error {
	end := m.p.Fence()
	if _, _, err := m.p.Append(mustBatch(), m.now); !errors.Is(err, ErrSealed) {
		return fmt.Errorf("append after the fence: %v", err)
	}
	m.loss, m.dup = 0, 0
	for i := 0; i < 5000 && !m.p.Drained(); i++ {
		var err error
		switch i % 4 {
		case 0:
			for range len(m.net) {
				if err = m.deliver(); err != nil {
					break
				}
			}
		case 1:
			err = m.syncPrimary()
		case 2:
			err = m.syncFollower()
		case 3:
			m.now += 50
			if err = m.primaryOut(m.p.Tick(m.now)); err == nil {
				err = m.serveRead()
			}
		}
		if err != nil {
			return fmt.Errorf("draining: %w", err)
		}
	}
	if !m.p.Drained() || m.p.Watermark() != end || m.released != end {
		return fmt.Errorf("roll: not drained: watermark %d, released %d, fence end %d\n%s", m.p.Watermark(), m.released, end, m.dump())
	}
	return nil
}

// startFailover fences followers one at a time, with traffic in between,
// until FailoverEnd says enough answered, then records the seal.
func (m *model) startFailover() error {
	rf := len(m.nodes) + 1
	need := AnswersNeeded(rf, m.quorum)
	order := m.rng.Perm(len(m.nodes))
	var answers []Answer
	replicas := m.p.cfg.Replicas
	if m.rng.IntN(3) == 0 {
		// The old primary is alive after all and is asked too: it fences
		// itself and answers everything it appended, which must not count.
		a := m.p.FenceAnswer()
		answers = append(answers, Answer{Node: 1, End: a.End, Role: a.Role})
	}
	for _, i := range order {
		n := m.nodes[i]
		a := n.f.FenceAnswer()
		answers = append(answers, Answer{Node: n.id, End: a.End, Role: a.Role})
		n.fencedAt = n.f.End()
		fo, ok, err := FailoverEnd(replicas, m.quorum, answers)
		if err != nil {
			return err
		}
		if counted := len(answers) - m.primaryAnswers(answers); ok != (counted >= need) {
			return fmt.Errorf("failover with %d of %d answers: ok=%v", counted, need, ok)
		}
		if ok {
			return m.recordSeal(fo, answers)
		}
		for range m.rng.IntN(30) {
			if err := m.step(); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("every follower answered and still no seal (need %d)", need)
}

func (m *model) primaryAnswers(answers []Answer) int {
	n := 0
	for _, a := range answers {
		if a.Role == RolePrimary {
			n++
		}
	}
	return n
}

func (m *model) recordSeal(fo Failover, answers []Answer) error {
	for _, a := range answers {
		if a.Role == RolePrimary {
			if !slices.Contains(fo.Unknown, a.Node) {
				return fmt.Errorf("a live primary's answer %v counted: %+v", a, fo)
			}
			continue
		}
		if a.End > fo.End {
			return fmt.Errorf("seal %d below an answer %v", fo.End, a)
		}
		if (a.End < fo.End) != slices.Contains(fo.Behind, a.Node) {
			return fmt.Errorf("behind %v does not match answer %v of seal %d", fo.Behind, a, fo.End)
		}
	}
	if m.released > fo.End {
		return fmt.Errorf("W6: committed up to %d, failover seal %d", m.released, fo.End)
	}
	m.seal, m.sealed = fo.End, true
	return nil
}

// finishFailover truncates every copy to the seal and checks they agree.
func (m *model) finishFailover() error {
	if !m.sealed {
		if len(m.nodes) > 0 {
			return errors.New("failover never sealed")
		}
		// RF 1: the primary dies and comes back as a follower of its store.
		m.primDown = true
		m.pstore.batches = m.pstore.batches[:m.pstore.synced]
		f := NewFollower(m.seg, m.pstore.base, m.pstore.syncedEnd())
		fo, ok, err := FailoverEnd(m.p.cfg.Replicas, 1, []Answer{{Node: 1, End: f.Fence()}})
		if err != nil || !ok {
			return fmt.Errorf("RF 1 failover: %v %v", ok, err)
		}
		return m.recordSeal(fo, []Answer{{Node: 1, End: fo.End}})
	}
	if m.released > m.seal {
		return fmt.Errorf("W6: committed up to %d, failover seal %d", m.released, m.seal)
	}
	var sealed []byte
	found := false
	for _, n := range m.nodes {
		tr, err := n.f.Truncate(m.seal)
		if err != nil {
			return fmt.Errorf("node %d: %w", n.id, err)
		}
		if tr.Cut {
			if err := n.store.cut(tr.At); err != nil {
				return err
			}
		}
		if n.store.end() != m.seal {
			if tr.Missing != (Span{n.store.end(), m.seal}) {
				return fmt.Errorf("node %d ends at %d, seal %d, missing %v", n.id, n.store.end(), m.seal, tr.Missing)
			}
			continue
		}
		var b []byte
		for _, e := range n.store.batches {
			b = append(b, e.data...)
		}
		if found && !bytes.Equal(b, sealed) {
			return fmt.Errorf("node %d's sealed copy differs", n.id)
		}
		sealed, found = b, true
	}
	if !found {
		return fmt.Errorf("no copy holds the seal end %d", m.seal)
	}
	return nil
}

func mustBatch() []byte {
	b, err := batch.EncodeBatch(nil, 0, []batch.Record{{Value: []byte("x")}}, batch.CodecNone)
	if err != nil {
		panic(err)
	}
	return b
}

// dump describes the primary's view of each follower and the follower itself.
func (m *model) dump() string {
	s := fmt.Sprintf("end %d synced %d wm %d held from %d retained %d pstore synced %d/%d\n", m.p.end, m.p.synced, m.p.watermark, m.p.heldFrom(), m.p.retained, m.pstore.syncedEnd(), m.pstore.end())
	for _, f := range m.p.followers {
		n := m.node(f.node)
		s += fmt.Sprintf(" f%d match %d next %d inflight %d/%d reading %v lastSend %d | follower end %d synced %d store %d/%d\n", f.node, f.match, f.next, f.inflight, f.flights.len(), f.reading, f.lastSend, n.f.End(), n.f.SyncedEnd(), n.store.syncedEnd(), n.store.end())
	}
	s += fmt.Sprintf(" net %d reads %d now %d\n", len(m.net), len(m.reads), m.now)
	return s
}
