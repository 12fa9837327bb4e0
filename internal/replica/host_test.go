package replica_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/peer"
	"github.com/malachi-log/malachi/internal/replica"
	"github.com/malachi-log/malachi/internal/replication"
	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

const (
	waitLimit = 10 * time.Second
	maxNodes  = 5
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(waitLimit)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// syncGate holds a store's fsyncs while closed.
type syncGate struct {
	mu     sync.Mutex
	closed bool
	open   chan struct{}
}

func (g *syncGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed, g.open = true, make(chan struct{})
	}
}

func (g *syncGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.closed = false
		close(g.open)
	}
}

// rule holds the fsyncs of a store's data (segment files and the
// journal): a fence's marker is a file of its own, and a held data fsync
// must not keep a copy from answering a fence.
func (g *syncGate) rule(op vfs.Op, path string) error {
	if op != vfs.OpSync || strings.Contains(path, ".fence") {
		return nil
	}
	g.mu.Lock()
	ch, closed := g.open, g.closed
	g.mu.Unlock()
	if closed {
		<-ch
	}
	return nil
}

// meta is the control plane of the test: which segments exist, where.
type meta struct {
	mu   sync.Mutex
	segs map[uint64]replica.SegmentInfo
}

func (m *meta) set(id uint64, info replica.SegmentInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.segs[id] = info
}

func (m *meta) lookup(id uint64) (replica.SegmentInfo, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	info, ok := m.segs[id]
	return info, ok
}

type node struct {
	id     uint64
	fs     vfs.FS
	dir    string
	gate   *syncGate
	tr     *peer.MemTransport
	store  *storage.Store
	host   *replica.Host
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	commits map[uint64]uint64
}

type cluster struct {
	t     *testing.T
	net   *peer.MemNetwork
	meta  *meta
	nodes map[uint64]*node
}

// newCluster starts n nodes (ids 1..n) with stores on fs(i).
func newCluster(t *testing.T, n int, fs func(id uint64) (vfs.FS, string)) *cluster {
	c := &cluster{t: t, net: peer.NewMemNetwork(), meta: &meta{segs: map[uint64]replica.SegmentInfo{}}, nodes: map[uint64]*node{}}
	for id := uint64(1); id <= uint64(n); id++ {
		inner, dir := fs(id)
		nd := &node{id: id, dir: dir, gate: &syncGate{}}
		nd.fs = vfs.NewFaulty(inner, nd.gate.rule)
		c.nodes[id] = nd
		c.start(nd)
	}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			c.stop(nd)
		}
	})
	return c
}

func memFS(uint64) (vfs.FS, string) { return vfs.NewMem(), "/segments" }

func (c *cluster) start(nd *node) { c.startWith(nd, nil) }

// startWith starts nd's store, transport and host, with the host's
// config changed by adjust when it is not nil.
func (c *cluster) startWith(nd *node, adjust func(*replica.Config)) {
	t := c.t
	store, err := storage.Open(storage.Config{Dir: nd.dir, FS: nd.fs})
	if err != nil {
		t.Fatal(err)
	}
	nd.store = store
	nd.tr = c.net.Transport(nd.id)
	nd.commits = map[uint64]uint64{}
	cfg := replica.Config{
		Self: nd.id, Transport: nd.tr, Store: store, Lookup: c.meta.lookup, Tick: 5 * time.Millisecond,
		Replication: replication.Config{ResendAfter: 20},
		OnCommit: func(seg, wm uint64) {
			nd.mu.Lock()
			nd.commits[seg] = max(nd.commits[seg], wm)
			nd.mu.Unlock()
		},
	}
	if adjust != nil {
		adjust(&cfg)
	}
	host, err := replica.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Register(nd.tr); err != nil {
		t.Fatal(err)
	}
	if err := nd.tr.Start(); err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= maxNodes; id++ {
		nd.tr.SetAddr(id, peer.MemAddr(id))
	}
	nd.host = host
	ctx, cancel := context.WithCancel(context.Background())
	nd.cancel, nd.done = cancel, make(chan struct{})
	go func() {
		defer close(nd.done)
		host.Run(ctx)
	}()
}

func (c *cluster) stop(nd *node) {
	if nd.host == nil {
		return
	}
	nd.gate.release()
	nd.cancel()
	<-nd.done
	nd.host.Close()
	_ = nd.tr.Close()
	_ = nd.store.Close()
	nd.host = nil
}

func (nd *node) committed(seg uint64) uint64 {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.commits[seg]
}

// open makes segment id active on replicas, the first its primary.
func (c *cluster) open(id, base uint64, replicas ...uint64) {
	c.t.Helper()
	c.meta.set(id, replica.SegmentInfo{Base: base, Replicas: replicas, Active: true, Owner: 7})
	p := c.nodes[replicas[0]]
	if err := p.store.CreateFor(storage.SegmentID(id), base, 7); err != nil {
		c.t.Fatal(err)
	}
	if err := p.host.Open(id, base, replicas); err != nil {
		c.t.Fatal(err)
	}
}

func batchOf(t *testing.T, vals ...string) []byte {
	t.Helper()
	recs := make([]segment.Record, len(vals))
	for i, v := range vals {
		recs[i] = segment.Record{Key: []byte("k"), Value: []byte(v), Timestamp: 1}
	}
	b, err := segment.EncodeBatch(nil, 0, recs, segment.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// appendAsync appends one batch and returns a channel of its outcome.
func appendAsync(t *testing.T, nd *node, seg uint64, vals ...string) (uint64, chan error) {
	t.Helper()
	ch := make(chan error, 1)
	base, err := nd.host.Append(t.Context(), seg, batchOf(t, vals...), func(err error) { ch <- err })
	if err != nil {
		t.Fatal(err)
	}
	return base, ch
}

func waitDone(t *testing.T, ch chan error) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatal("append not committed in time")
	}
}

// notDone checks that ch has no outcome while the cluster has had every
// chance to produce one: the primary's followers were sent everything
// and the fsyncs that are not held went through.
func notDone(t *testing.T, ch chan error, settle func() bool) {
	t.Helper()
	waitFor(t, "the unheld replicas to settle", settle)
	select {
	case err := <-ch:
		t.Fatalf("append answered %v before a quorum fsynced it", err)
	default:
	}
}

func durableEnd(nd *node, seg uint64) uint64 {
	_, d, err := nd.store.Ends(storage.SegmentID(seg))
	if err != nil {
		return 0
	}
	return d
}

// W1: an append is acknowledged once two of three replicas fsynced it:
// with one follower's fsync held it is acked through the other; with both
// held it is not acked although the primary fsynced; releasing one acks.
func TestQuorumAck(t *testing.T) {
	c := newCluster(t, 3, memFS)
	n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
	c.open(1, 0, 1, 2, 3)

	base, ch := appendAsync(t, n1, 1, "a", "b")
	if base != 0 {
		t.Fatalf("first base %d", base)
	}
	waitDone(t, ch)

	n3.gate.hold()
	base, ch = appendAsync(t, n1, 1, "c")
	if base != 2 {
		t.Fatalf("second base %d, want 2", base)
	}
	waitDone(t, ch) // primary and node 2
	if durableEnd(n3, 1) >= 3 {
		t.Fatal("node 3 fsynced while held")
	}

	n2.gate.hold()
	_, ch = appendAsync(t, n1, 1, "d")
	notDone(t, ch, func() bool { return durableEnd(n1, 1) == 4 })
	if wm, _ := n1.host.Watermark(1); wm != 3 {
		t.Fatalf("watermark %d with both followers' fsyncs held, want 3", wm)
	}
	n2.gate.release()
	waitDone(t, ch)
	if wm, _ := n1.host.Watermark(1); wm != 4 {
		t.Fatalf("watermark %d, want 4", wm)
	}
	n3.gate.release()
	waitFor(t, "node 3 to catch up", func() bool { return durableEnd(n3, 1) == 4 })
	waitFor(t, "followers to learn the watermark", func() bool { return n2.committed(1) == 4 && n3.committed(1) == 4 })
}

// A follower that restarts (its store reopened, its state machine gone)
// is caught up from where its store ends, including batches the primary
// no longer holds in memory (a store read).
func TestFollowerRestartCatchesUp(t *testing.T) {
	c := newCluster(t, 3, func(id uint64) (vfs.FS, string) {
		return vfs.OS(), filepath.Join(t.TempDir(), fmt.Sprint(id))
	})
	// A small window makes the primary drop committed batches early, so
	// the restarted follower must be fed from the primary's store.
	n1 := c.nodes[1]
	c.stop(n1)
	c.startWith(n1, func(cfg *replica.Config) { cfg.Replication.MaxRetainedBytes = 4 << 10 })
	n3 := c.nodes[3]
	c.open(5, 100, 1, 2, 3)
	for i := range 10 {
		_, ch := appendAsync(t, n1, 5, fmt.Sprint(i))
		waitDone(t, ch)
	}
	waitFor(t, "node 3 to hold 10 records", func() bool { return durableEnd(n3, 5) == 110 })

	c.stop(n3)
	for i := range 40 {
		_, ch := appendAsync(t, n1, 5, strings.Repeat("x", 200), fmt.Sprint(i))
		waitDone(t, ch) // nodes 1 and 2
	}
	c.start(n3)
	waitFor(t, "the restarted follower to catch up", func() bool { return durableEnd(n3, 5) == 190 })
	sameBytes(t, c, 5, 100, 190, 1, 2, 3)
}

// sameBytes checks that the nodes' copies of seg hold the same batches.
func sameBytes(t *testing.T, c *cluster, seg, from, end uint64, nodes ...uint64) {
	t.Helper()
	var want []byte
	for i, id := range nodes {
		got, next, err := c.nodes[id].store.Read(storage.SegmentID(seg), from, 1<<30, end)
		if err != nil {
			t.Fatalf("node %d: %v", id, err)
		}
		if next != end {
			t.Fatalf("node %d reads to %d, want %d", id, next, end)
		}
		if i == 0 {
			want = got
		} else if !bytes.Equal(got, want) {
			t.Fatalf("node %d's copy differs from node %d's", id, nodes[0])
		}
	}
}

// A roll: the primary's fence answers the end once everything is
// committed; every copy sealed at that end has the same footer. A
// follower that is behind stays unsealed and says so.
func TestRollSealsIdenticalCopies(t *testing.T) {
	c := newCluster(t, 3, memFS)
	n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
	c.open(9, 0, 1, 2, 3)
	for i := range 5 {
		_, ch := appendAsync(t, n1, 9, fmt.Sprint(i), "y")
		waitDone(t, ch)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	end, err := n1.host.Fence(ctx, 9)
	if err != nil || end != 10 {
		t.Fatalf("fence answered %d, %v; want 10", end, err)
	}
	if _, err := n1.host.Append(ctx, 9, batchOf(t, "late"), func(error) {}); !errors.Is(err, replication.ErrSealed) {
		t.Fatalf("append after the fence: %v, want sealed", err)
	}
	waitFor(t, "followers to hold the fenced end", func() bool { return durableEnd(n2, 9) == 10 && durableEnd(n3, 9) == 10 })
	var hashes []uint64
	for _, nd := range []*node{n1, n2, n3} {
		if err := nd.host.SealCopy(ctx, 9, end); err != nil {
			t.Fatalf("node %d: %v", nd.id, err)
		}
		info, err := nd.store.Info(9)
		if err != nil || !info.Sealed {
			t.Fatalf("node %d: sealed %v, %v", nd.id, info.Sealed, err)
		}
		hashes = append(hashes, info.Footer.ContentHash)
	}
	if hashes[0] != hashes[1] || hashes[1] != hashes[2] {
		t.Fatalf("content hashes differ: %x", hashes)
	}
	sameBytes(t, c, 9, 0, 10, 1, 2, 3)

	// A copy that is behind is reported and left unsealed.
	c.open(10, 0, 1, 2, 3)
	_, ch := appendAsync(t, n1, 10, "y")
	waitDone(t, ch)
	waitFor(t, "node 3 to hold the first append", func() bool { return durableEnd(n3, 10) == 1 })
	c.net.Partition(1, 3)
	_, ch = appendAsync(t, n1, 10, "z")
	waitDone(t, ch)
	end, err = n1.host.Fence(ctx, 10)
	if err != nil || end != 2 {
		t.Fatalf("fence answered %d, %v; want 2", end, err)
	}
	if err := n3.host.SealCopy(ctx, 10, end); !errors.Is(err, replica.ErrBehind) {
		t.Fatalf("sealing a copy that is behind: %v, want ErrBehind", err)
	}
	if info, err := n3.store.Info(10); err != nil || info.Sealed {
		t.Fatalf("a copy that is behind: sealed %v, %v", info.Sealed, err)
	}
}

// Failover (W6): with the primary gone, fencing the two followers
// decides a seal at or above every acknowledged append; an append that
// no quorum fsynced may be cut. With only one follower answering there
// is no seal.
func TestFailoverKeepsEveryAck(t *testing.T) {
	c := newCluster(t, 3, memFS)
	n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
	c.open(3, 0, 1, 2, 3)
	var acked uint64
	for i := range 4 {
		_, ch := appendAsync(t, n1, 3, fmt.Sprint(i))
		waitDone(t, ch)
		acked = uint64(i + 1)
	}
	waitFor(t, "the followers to hold the acknowledged appends", func() bool {
		return durableEnd(n2, 3) == acked && durableEnd(n3, 3) == acked
	})
	// An append that reaches node 3's store but whose fsync never
	// completes, and that node 2 never receives: not acknowledged.
	c.net.Partition(1, 2)
	n3.gate.hold()
	_, ch := appendAsync(t, n1, 3, "unacked")
	waitFor(t, "node 3 to receive the unacked append", func() bool {
		q, _, _ := n3.store.Ends(3)
		return q == 5
	})
	c.stop(n1)
	c.net.HealAll()

	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	// Node 3 answers its fsynced end: the held append is not in it.
	f, err := n2.host.FenceCopies(ctx, 3, []uint64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if f.End < acked {
		t.Fatalf("failover seal %d below the acknowledged end %d", f.End, acked)
	}
	select {
	case err := <-ch:
		if err == nil {
			t.Fatal("the partitioned append was acknowledged")
		}
	default:
	}
	n3.gate.release() // the seal waits for node 3's queued append, then cuts it
	for _, nd := range []*node{n2, n3} {
		if err := nd.host.SealCopy(ctx, 3, f.End); err != nil {
			t.Fatalf("node %d: %v", nd.id, err)
		}
	}
	sameBytes(t, c, 3, 0, f.End, 2, 3)
	if info, err := n3.store.Info(3); err != nil || !info.Sealed || info.Footer.End != f.End {
		t.Fatalf("node 3's copy, which held an unacknowledged append: %+v, %v; want sealed at %d", info.Footer, err, f.End)
	}

	// Two of three down: no seal can be decided.
	c.open(4, 0, 2, 1, 3)
	c.stop(n3)
	short, cancel2 := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel2()
	// Node 2 leads segment 4 and is alive: its own answer does not count.
	if _, err := n2.host.FenceCopies(short, 4, []uint64{2, 1, 3}); !errors.Is(err, replica.ErrNoQuorum) {
		t.Fatalf("fence with no replica answering: %v, want ErrNoQuorum", err)
	}
}

// The control plane decides which copies a node keeps: an append for a
// segment that does not list the node is not written.
func TestCopyOnlyWhereListed(t *testing.T) {
	c := newCluster(t, 3, memFS)
	n1, n3 := c.nodes[1], c.nodes[3]
	c.meta.set(2, replica.SegmentInfo{Base: 0, Replicas: []uint64{1, 2}, Active: true})
	if err := n1.store.Create(2, 0); err != nil {
		t.Fatal(err)
	}
	// The primary believes node 3 is a follower; the metadata does not.
	if err := n1.host.Open(2, 0, []uint64{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	_, ch := appendAsync(t, n1, 2, "a")
	waitDone(t, ch) // nodes 1 and 2
	if _, _, err := n3.store.Ends(2); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("node 3 made a copy it is not listed for: %v", err)
	}
}

// Bounds: appends past the primary's window are refused with
// ErrBackpressure while no follower fsyncs, and taken again once they do.
func TestBackpressure(t *testing.T) {
	c := newCluster(t, 3, memFS)
	n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
	c.stop(n1)
	c.startWith(n1, func(cfg *replica.Config) { cfg.Replication.MaxRetainedBytes = 2 << 10 })
	c.open(6, 0, 1, 2, 3)
	n2.gate.hold()
	n3.gate.hold()
	var chans []chan error
	var refused error
	for i := 0; i < 100 && refused == nil; i++ {
		ch := make(chan error, 1)
		_, refused = n1.host.Append(t.Context(), 6, batchOf(t, strings.Repeat("v", 300)), func(err error) { ch <- err })
		if refused == nil {
			chans = append(chans, ch)
		}
	}
	if !errors.Is(refused, replica.ErrBackpressure) {
		t.Fatalf("appends past the window: %v, want ErrBackpressure", refused)
	}
	n2.gate.release()
	for _, ch := range chans {
		waitDone(t, ch)
	}
	_, ch := appendAsync(t, n1, 6, "after")
	waitDone(t, ch)
}

// A produce whose batch no quorum fsyncs is answered ErrNoQuorum once
// CommitTimeout passes (on the host's clock), not left waiting; the batch
// still commits when a follower comes back.
func TestCommitTimeout(t *testing.T) {
	c := newCluster(t, 3, memFS)
	n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
	c.stop(n1)
	manual := clock.NewManual(time.Unix(1000, 0))
	c.startWith(n1, func(cfg *replica.Config) { cfg.Clock, cfg.CommitTimeout = manual, time.Second })
	c.open(8, 0, 1, 2, 3)
	n2.gate.hold()
	n3.gate.hold()
	_, ch := appendAsync(t, n1, 8, "a")
	var err error
	waitFor(t, "the append to time out", func() bool {
		manual.Advance(100 * time.Millisecond)
		select {
		case err = <-ch:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, replica.ErrNoQuorum) {
		t.Fatalf("an append no quorum fsynced: %v, want ErrNoQuorum", err)
	}
	n2.gate.release()
	waitFor(t, "the batch to commit after all", func() bool {
		manual.Advance(10 * time.Millisecond)
		wm, _ := n1.host.Watermark(8)
		return wm == 1
	})
}

// An append both followers fsynced is committed (W1) but answered only
// once the primary's own copy has it durable too, and reads there stop
// at what that copy holds: a read through the primary after the answer
// finds the record.
func TestAckWaitsForThePrimarysCopy(t *testing.T) {
	c := newCluster(t, 3, memFS)
	n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
	c.open(11, 0, 1, 2, 3)
	_, ch := appendAsync(t, n1, 11, "a")
	waitDone(t, ch)
	n1.gate.hold()
	_, ch = appendAsync(t, n1, 11, "b")
	notDone(t, ch, func() bool { return durableEnd(n2, 11) == 2 && durableEnd(n3, 11) == 2 })
	if wm, _ := n1.host.Watermark(11); wm != 1 {
		t.Fatalf("reads through the primary stop at %d with its fsync held, want 1", wm)
	}
	n1.gate.release()
	waitDone(t, ch)
	if wm, _ := n1.host.Watermark(11); wm != 2 || durableEnd(n1, 11) != 2 {
		t.Fatalf("after the answer: watermark %d, primary's copy durable to %d; want 2 and 2", wm, durableEnd(n1, 11))
	}
}
