package broker_test

// A node of a three-node cluster is partitioned away from both others
// while a producer writes through another node. The brokers build their
// own TCP peer transport, so the partition is made on real sockets: each
// node advertises a relay in front of its peer listener, the relay reads
// the dialler's handshake to learn who dialled, and a cut pair's bytes
// are swallowed both ways (a silent partition: no reset, no refusal;
// only timeouts tell). Gossip is not cut: membership keeps saying every
// node is alive, so whatever fails over does so because the node stops
// answering. Checked: the isolated node acknowledges nothing (W1), the
// producer's acks resume, and after the heal every node reads the same
// whole history (W6).

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// maxRelays bounds the connections the relays of a faultNet carry; one
// more is closed at once.
const maxRelays = 256

// faultNet relays the peer connections of a test cluster and cuts pairs
// of nodes apart on demand.
type faultNet struct {
	mu     sync.Mutex
	cut    map[[2]uint64]bool
	relays map[*relay]bool
	dialed map[uint64]bool // nodes dialled through their relay
	lns    []net.Listener
	wg     sync.WaitGroup // accept loops and relays
}

// relay is one dialled connection, in and out of the proxy.
type relay struct {
	pair    [2]uint64
	in, out net.Conn
}

func newFaultNet(t testing.TB) *faultNet {
	fn := &faultNet{cut: map[[2]uint64]bool{}, relays: map[*relay]bool{}, dialed: map[uint64]bool{}}
	t.Cleanup(fn.close)
	return fn
}

func pairOf(a, b uint64) [2]uint64 { return [2]uint64{min(a, b), max(a, b)} }

// front listens on a new loopback port in front of node to's peer
// listener at target, and returns the port's address.
func (fn *faultNet) front(t testing.TB, to uint64, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fn.mu.Lock()
	fn.lns = append(fn.lns, ln)
	fn.mu.Unlock()
	fn.wg.Add(1)
	go func() { // owned by fn: ends when close closes ln
		defer fn.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fn.wg.Add(1)
			go func() { // owned by fn: ends when either side closes
				defer fn.wg.Done()
				fn.carry(to, target, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// carry reads the dialler's hello, dials target and relays both ways.
func (fn *faultNet) carry(to uint64, target string, in net.Conn) {
	from, hello, err := readHello(in)
	if err != nil {
		in.Close()
		return
	}
	out, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		in.Close()
		return
	}
	r := &relay{pair: pairOf(from, to), in: in, out: out}
	if !fn.add(r, to) {
		in.Close()
		out.Close()
		return
	}
	defer fn.remove(r)
	if !fn.isCut(r.pair) {
		if _, err := out.Write(hello); err != nil {
			r.close()
			return
		}
	}
	done := make(chan struct{})
	go func() { // owned by carry, which waits for it
		defer close(done)
		fn.pump(r, in, out)
	}()
	fn.pump(r, out, in)
	<-done
}

// pump copies src to dst, swallowing what arrives while the pair is
// cut, and closes both sides when src or dst fails.
func (fn *faultNet) pump(r *relay, dst, src net.Conn) {
	defer r.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !fn.isCut(r.pair) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *relay) close() {
	r.in.Close()
	r.out.Close()
}

// readHello reads the peer handshake frame a dialler sends first (see
// internal/peer's frame layout: length, checksum, kind, channel, flags,
// request id, then "MLPR", version and the dialler's node id) and
// returns the dialler's id and the frame's bytes.
func readHello(c net.Conn) (uint64, []byte, error) {
	const header, fixed = 20, 4 + 2 + 8 + 8 + 1
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return 0, nil, err
	}
	defer c.SetReadDeadline(time.Time{})
	var prefix [4]byte
	if _, err := io.ReadFull(c, prefix[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(prefix[:]))
	if n < header-4+fixed || n > 1<<10 {
		return 0, nil, fmt.Errorf("a handshake of %d bytes", n)
	}
	frame := make([]byte, 4+n)
	copy(frame, prefix[:])
	if _, err := io.ReadFull(c, frame[4:]); err != nil {
		return 0, nil, err
	}
	p := frame[header:]
	if string(p[:4]) != "MLPR" {
		return 0, nil, errors.New("not a peer handshake")
	}
	return binary.BigEndian.Uint64(p[6:]), frame, nil
}

func (fn *faultNet) add(r *relay, to uint64) bool {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	if len(fn.relays) >= maxRelays {
		return false
	}
	fn.relays[r] = true
	fn.dialed[to] = true
	return true
}

func (fn *faultNet) remove(r *relay) {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	delete(fn.relays, r)
}

func (fn *faultNet) isCut(p [2]uint64) bool {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	return fn.cut[p]
}

// isolate cuts node away from every other of ids.
func (fn *faultNet) isolate(node uint64, ids ...uint64) {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	for _, id := range ids {
		if id != node {
			fn.cut[pairOf(node, id)] = true
		}
	}
}

// healAll joins every pair again. The connections that were cut lost
// bytes mid-stream, so they are closed: both sides dial afresh.
func (fn *faultNet) healAll() {
	fn.mu.Lock()
	var stale []*relay
	for r := range fn.relays {
		if fn.cut[r.pair] {
			stale = append(stale, r)
		}
	}
	clear(fn.cut)
	fn.mu.Unlock()
	for _, r := range stale {
		r.close()
	}
}

func (fn *faultNet) dialedCount() int {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	return len(fn.dialed)
}

func (fn *faultNet) close() {
	fn.mu.Lock()
	for _, ln := range fn.lns {
		ln.Close()
	}
	for r := range fn.relays {
		r.close()
	}
	fn.mu.Unlock()
	fn.wg.Wait()
}

// startRelayedCluster starts three nodes like startCluster, each
// advertising a relay of fn in front of its peer listener.
func startRelayedCluster(t *testing.T, fn *faultNet) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, log: quietLogger()}
	root := t.TempDir()
	for i := uint64(1); i <= 3; i++ {
		nd := &clusterNode{id: i, dir: filepath.Join(root, strconv.FormatUint(i, 10)), clientAddr: freeAddr(t), peer: freeAddr(t), gossip: freeAddr(t)}
		tc.nodes = append(tc.nodes, nd)
		var join []string
		if i > 1 {
			join = []string{tc.nodes[0].gossip}
		}
		cfg := tc.config(nd, join)
		cfg.Cluster.PeerAdvertise = fn.front(t, i, nd.peer)
		if err := tc.openWith(nd, cfg, 60*time.Second); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		self := tc.self(nd)
		if self.PeerAddr != cfg.Cluster.PeerAdvertise {
			t.Fatalf("node %d advertises %s, not its relay %s", i, self.PeerAddr, cfg.Cluster.PeerAdvertise)
		}
		nd.gossip = self.GossipAddr
	}
	t.Cleanup(fn.healAll) // before the nodes close, which must reach each other
	tc.waitVoters(3)
	if n := fn.dialedCount(); n != 3 {
		t.Fatalf("%d nodes were dialled through their relays, want 3", n)
	}
	return tc
}

// isolatedProbe produces one record at a time through the isolated
// node, each with its own value, and records every answer.
type isolatedProbe struct {
	mu      sync.Mutex
	answers []probeAnswer
	// cutShort is the value of the produce finish cut short, if any: its
	// caller gave up with no answer, and a produce given up on may still
	// take effect (a forward already queued is sent once the node reaches
	// the range's primary again), so its outcome is unknown.
	cutShort string
	cancel   context.CancelFunc // ends the produce in flight at the end
	done     chan struct{}
}

type probeAnswer struct {
	value string
	took  time.Duration
	err   error
}

// probeTimeout bounds one produce of the probe, well above the test
// clusters' 2 s metadata timeout that bounds a produce's wait for its
// quorum.
const probeTimeout = 20 * time.Second

func startProbe(ctx context.Context, b *broker.Broker, topic string) *isolatedProbe {
	ctx, stop := context.WithCancel(ctx)
	p := &isolatedProbe{cancel: stop, done: make(chan struct{})}
	go func() { // owned by p: ends when finish cancels ctx
		defer close(p.done)
		for i := 0; i < 1000 && ctx.Err() == nil; i++ {
			v := "isolated-" + strconv.Itoa(i)
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			start := time.Now()
			_, err := b.Produce(pctx, topic, []broker.Record{rec(replicaKeys[i%len(replicaKeys)], v)})
			cancel()
			if ctx.Err() != nil {
				p.mu.Lock()
				p.cutShort = v // cut short by finish: not an answer
				p.mu.Unlock()
				return
			}
			p.mu.Lock()
			p.answers = append(p.answers, probeAnswer{value: v, took: time.Since(start), err: err})
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *isolatedProbe) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.answers)
}

// finish stops the probe and checks its answers: none acknowledged,
// each a retriable reason before its deadline.
func (p *isolatedProbe) finish(t *testing.T, node uint64) {
	t.Helper()
	p.cancel()
	select {
	case <-p.done:
	case <-time.After(probeTimeout):
		t.Fatal("the probe's produce in flight did not end when its context did")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	reasons := map[string]int{}
	for _, a := range p.answers {
		switch {
		case a.err == nil:
			t.Errorf("%s was acknowledged by node %d, cut off from both others (W1)", a.value, node)
		case errors.Is(a.err, context.DeadlineExceeded):
			t.Errorf("%s through isolated node %d: no answer within %s (C3)", a.value, node, probeTimeout)
		case !retriable(a.err):
			t.Errorf("%s through isolated node %d failed with %v, not a retriable reason", a.value, node, a.err)
		}
		if a.err != nil {
			reasons[fmt.Sprintf("%s (%s)", reasonText(a.err), a.took.Round(100*time.Millisecond))]++
		}
	}
	t.Logf("produces through isolated node %d: %v", node, reasons)
}

// forwardBound is the longest a produce forwarded by a node cut off from
// the range's primary may wait for its refusal under cfg: one call to
// the primary (CallTimeout), behind at most one failover attempt of the
// range (MetadataTimeout) that started just before it was queued.
func forwardBound(cfg broker.Config) time.Duration {
	mt := cfg.Cluster.MetadataTimeout
	return cmp.Or(cfg.Cluster.Data.CallTimeout, mt) + mt
}

// answeredWithin checks that every produce of the probe was answered
// within bound (C3: a minority answers in time, not at the client's
// deadline).
func (p *isolatedProbe) answeredWithin(t *testing.T, node uint64, bound time.Duration) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.answers {
		if a.took > bound {
			t.Errorf("%s through isolated node %d was answered after %s, past the %s its configured timeouts allow",
				a.value, node, a.took.Round(time.Millisecond), bound)
		}
	}
}

// noneIsolated checks that no record the isolated node answered is read
// through nd: none was acknowledged, each refusal was final, and none
// can be below the seal of a segment failed over without it. The produce
// cut short at the probe's end had no answer, so it may be read or not.
func (p *isolatedProbe) noneIsolated(t *testing.T, nd *clusterNode, topic string) {
	t.Helper()
	recs, err := drainOnce(t.Context(), nd.b, topic)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range recs {
		switch v := string(r.Value); {
		case v != "" && v == p.cutShort:
			t.Logf("node %d reads %s, whose produce was cut short with no answer", nd.id, v)
		case strings.HasPrefix(v, "isolated-"):
			t.Errorf("node %d reads %s, produced through the isolated node and never acknowledged", nd.id, v)
		}
	}
}

// partitionSetup creates topic on a relayed cluster, opens its segment
// through node 1 and returns the cluster and the segment's replicas by
// node: primary first.
func partitionSetup(t *testing.T, topic string) (*faultNet, *testCluster, []*clusterNode) {
	t.Helper()
	fn := newFaultNet(t)
	tc := startRelayedCluster(t, fn)
	tc.createEverywhere(tc.nodes[0], topic, 1)
	if _, err := tc.nodes[0].b.Produce(t.Context(), topic, []broker.Record{rec("a", "-1")}); err != nil {
		t.Fatal(err)
	}
	seg := activeSegment(t, tc.nodes[0].b, topic)
	var set []*clusterNode
	for _, name := range seg.Replicas {
		id, err := strconv.Atoi(strings.TrimPrefix(name, "node-"))
		if err != nil || id < 1 || id > len(tc.nodes) {
			t.Fatalf("replica %q", name)
		}
		set = append(set, tc.nodes[id-1])
	}
	if len(set) != 3 {
		t.Fatalf("replicas %v, want three", seg.Replicas)
	}
	for _, nd := range tc.nodes {
		readAll(t, nd.b, topic, 1)
	}
	return fn, tc, set
}

// The primary of the active segment is cut off from both others while
// a producer writes through a follower: its acks stop, the range fails
// over to the two it can reach, and its acks resume; produces through
// the isolated primary fail with retriable reasons and none is
// acknowledged. After the heal every node, the old primary too, reads
// the same whole history, without a record the isolated primary took.
func TestClusterReplicatedPrimaryPartitioned(t *testing.T) {
	const topic = "partition-primary"
	fn, tc, set := partitionSetup(t, topic)
	ctx := t.Context()
	primary, via, third := set[0], set[1], set[2]
	old := activeSegment(t, via.b, topic)
	t.Logf("primary node %d, producing through node %d", primary.id, via.id)

	h := produceLoop(ctx, via.b, topic, replicaKeys, 16)
	eventually(t, 30*time.Second, "produces before the partition", h.ackedAtLeast(300))
	fn.isolate(primary.id, 1, 2, 3)
	cut := time.Now()
	probe := startProbe(ctx, primary.b, topic)
	before := h.ackedCount()
	eventually(t, 60*time.Second, fmt.Sprintf("produces through node %d with primary node %d cut off", via.id, primary.id), h.ackedAtLeast(before+300))
	t.Logf("300 acks again %s after the partition", time.Since(cut).Round(time.Millisecond))
	eventually(t, 3*probeTimeout, "two answers through the isolated primary", func() error {
		if n := probe.count(); n < 2 {
			return fmt.Errorf("%d answered", n)
		}
		return nil
	})
	probe.finish(t, primary.id)
	if seg := activeSegment(t, via.b, topic); seg.ID == old.ID || seg.Replicas[0] == fmt.Sprintf("node-%d", primary.id) {
		t.Errorf("with its primary cut off the range is written to %+v (was %+v)", seg, old)
	}

	fn.healAll()
	healed := h.ackedCount()
	eventually(t, 30*time.Second, "produces after the heal", h.ackedAtLeast(healed+100))
	h.finish(t)
	sameHistory(t, h, topic, third, via, primary)
	for _, nd := range tc.nodes {
		probe.noneIsolated(t, nd, topic)
	}
}

// A follower of the active segment is cut off from both others while a
// producer writes through the other follower: the primary and that
// follower are a quorum, so acks go on and the segment does not change;
// produces through the isolated follower fail with retriable reasons.
// After the heal the follower catches up and every node reads the same
// whole history.
func TestClusterReplicatedFollowerPartitioned(t *testing.T) {
	const topic = "partition-follower"
	fn, tc, set := partitionSetup(t, topic)
	ctx := t.Context()
	primary, via, cutOff := set[0], set[1], set[2]
	old := activeSegment(t, via.b, topic)
	t.Logf("primary node %d, producing through node %d, cutting off node %d", primary.id, via.id, cutOff.id)

	h := produceLoop(ctx, via.b, topic, replicaKeys, 16)
	eventually(t, 30*time.Second, "produces before the partition", h.ackedAtLeast(300))
	fn.isolate(cutOff.id, 1, 2, 3)
	probe := startProbe(ctx, cutOff.b, topic)
	before := h.ackedCount()
	eventually(t, 60*time.Second, fmt.Sprintf("produces with follower node %d cut off", cutOff.id), h.ackedAtLeast(before+300))
	eventually(t, 2*probeTimeout, "an answer through the isolated follower", func() error {
		if n := probe.count(); n < 1 {
			return fmt.Errorf("%d answered", n)
		}
		return nil
	})
	probe.finish(t, cutOff.id)
	probe.answeredWithin(t, cutOff.id, forwardBound(tc.config(cutOff, nil)))
	if seg := activeSegment(t, via.b, topic); seg.ID != old.ID {
		t.Errorf("a follower's partition moved the range from segment %d to %+v", old.ID, seg)
	}

	fn.healAll()
	healed := h.ackedCount()
	eventually(t, 30*time.Second, "produces after the heal", h.ackedAtLeast(healed+100))
	h.finish(t)
	sameHistory(t, h, topic, cutOff, primary, via)
	for _, nd := range tc.nodes {
		probe.noneIsolated(t, nd, topic)
	}
}
