package sim

import (
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// quietConfig is a small cluster without seeded faults: a scenario test
// places its own.
func quietConfig(producers int) Config {
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Ranges, cfg.Producers = 3, 1, producers
	cfg.FaultEvery = 1 << 40
	return cfg
}

// settle ends a scenario as Run does: heal, settle, seal, check.
func settle(w *world) Result {
	w.loop(max(w.now, w.cfg.Duration))
	w.healAll()
	w.loop(w.now + w.cfg.Settle)
	w.finish()
	return w.result(0)
}

// onlyPrimary returns the one segment led anywhere and its node.
func onlyPrimary(t *testing.T, w *world) (uint64, *node) {
	t.Helper()
	var found []*node
	var seg uint64
	for _, n := range w.nodes {
		for id := range n.prim {
			seg, found = id, append(found, n)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one segment led by one node, got %d (%+v)", len(found), w.stats)
	}
	return seg, found[0]
}

// TestSimFenceWithoutCopyStalls shows what internal/replica's rule does:
// a replica with no copy of a segment does not answer a failover's
// fence, so a segment whose primary is lost before a quorum of followers
// made a copy never fails over, and its range takes no more writes. The
// simulation's default (an empty fenced copy answers the base) fails the
// same segment over and the range goes on.
func TestSimFenceWithoutCopyStalls(t *testing.T) {
	for _, strict := range []bool{true, false} {
		cfg := quietConfig(1)
		cfg.NoFenceWithoutCopy = strict
		cfg.DropRate = 1 // no Append reaches a follower
		w, ok := newWorld(1, cfg)
		if !ok {
			t.Fatal(w.chk.violations)
		}
		w.start()
		w.loop(300)
		_, p := onlyPrimary(t, w)
		p.crash(false)
		w.cfg.DropRate = 0
		w.loop(w.now + 100)
		p.restart()
		res := settle(w)
		t.Logf("strict=%v: acked %d, failovers %d: %v", strict, res.Stats.Acked, res.Stats.Failovers, res.Err())
		switch {
		case strict && !res.Violated("liveness"):
			t.Errorf("with replicas that answer no fence without a copy, the range should stall")
		case !strict && res.Err() != nil:
			t.Errorf("with empty copies answering the base: %v", res.Err())
		case !strict && res.Stats.Acked == 0:
			t.Errorf("the range took no writes after the failover")
		}
	}
}

// TestSimRestartedFollowerKeepsItsFence fails over a segment whose
// primary is alive but cut off from the node failing it over, and
// restarts a fenced follower before the seal is recorded. With the fence
// kept in memory only (internal/replica's rule) the restarted copy takes
// the old primary's appends, the primary commits above the seal the
// answers chose, and acknowledged records are cut (W6). With the fence
// recorded on disk before it is answered, nothing is lost.
func TestSimRestartedFollowerKeepsItsFence(t *testing.T) {
	for _, volatile := range []bool{true, false} {
		cfg := quietConfig(2)
		cfg.DropRate, cfg.DupRate, cfg.SlowRate = 0, 0, 0
		cfg.RollBytes = 1 << 20
		cfg.ControlDelay = 600 // the seal is slow to be recorded
		cfg.VolatileFence = volatile
		w, ok := newWorld(1, cfg)
		if !ok {
			t.Fatal(w.chk.violations)
		}
		w.start()
		w.loop(200)
		seg, p := onlyPrimary(t, w)
		s, _ := w.cp.view(seg)
		ids := replicaIDs(s)
		coord, other := w.node(ids[1]), w.node(ids[2])
		w.net.cut[pair(coord.id, p.id)] = true
		w.clients[0].to, w.clients[1].to = p.id, coord.id
		for w.now < 3000 && (coord.failovers[seg] == nil || !coord.failovers[seg].decided) {
			w.loop(w.now + 1)
		}
		if fo := coord.failovers[seg]; fo == nil || !fo.decided {
			t.Fatalf("node %d did not decide a failover of %d", coord.id, seg)
		}
		other.crash(false)
		other.restart()
		res := settle(w)
		t.Logf("volatile=%v: acked %d, failovers %d: %v", volatile, res.Stats.Acked, res.Stats.Failovers, res.Err())
		switch {
		case volatile && !res.Violated("W6"):
			t.Errorf("a fence forgotten in a restart should let the old primary commit above the seal")
		case !volatile && res.Err() != nil:
			t.Errorf("with the fence on disk: %v", res.Err())
		}
	}
}

// TestSimFailoverSealsOnQuorum replays what seed 335 once found: the
// primary, cut off from its followers, fsyncs a tail nobody acked; it
// restarts, fails its segment over, and its own longer copy answers the
// fence. Sealed at the highest answer (internal/replica's old rule), the
// sealed end is on that copy alone, the followers' copies are behind,
// never served nor healed from, and when the node is then lost for good
// the acknowledged prefix is lost to readers. Sealed at the end a quorum
// of the answers holds (quorumEnd), the tail nobody acked is cut and
// nothing acknowledged is lost.
func TestSimFailoverSealsOnQuorum(t *testing.T) {
	for _, highest := range []bool{true, false} {
		cfg := fiveQuiet()
		cfg.DropRate, cfg.DupRate, cfg.SlowRate = 0, 0, 0
		cfg.RollBytes = 1 << 20
		cfg.SealAtHighestAnswer = highest
		w, ok := newWorld(1, cfg)
		if !ok {
			t.Fatal(w.chk.violations)
		}
		w.start()
		w.loop(300)
		seg, p := onlyPrimary(t, w)
		s, _ := w.cp.view(seg)
		followers := replicaIDs(s)[1:]
		for _, id := range followers {
			w.net.cut[pair(p.id, id)] = true
		}
		for _, c := range w.clients {
			c.to = p.id
		}
		ahead := func() bool {
			end := p.disk.copies[seg].syncedEnd
			for _, id := range followers {
				if c := w.node(id).disk.copies[seg]; c != nil && c.syncedEnd >= end {
					return false
				}
			}
			return true
		}
		for w.now < 3000 && !ahead() {
			w.loop(w.now + 1)
		}
		if !ahead() {
			t.Fatalf("the primary's copy of %d never got ahead of its followers'", seg)
		}
		for _, id := range followers {
			delete(w.net.cut, pair(p.id, id))
		}
		p.crash(false)
		p.restart()
		p.startFailover(s)
		for w.now < 3000 && w.stillActive(seg) {
			w.loop(w.now + 1)
		}
		sealed, _ := w.cp.view(seg)
		if sealed.Active {
			t.Fatalf("segment %d was not failed over", seg)
		}
		p.crash(false)
		p.lost = true
		w.stats.Lost++
		res := settle(w)
		t.Logf("highest=%v: sealed at %d, acked %d: %v", highest, sealed.End, res.Stats.Acked, res.Err())
		switch {
		case highest && !res.Violated("no-loss"):
			t.Errorf("sealed at the lost primary's end, the acknowledged prefix on the behind copies should be lost")
		case !highest && res.Err() != nil:
			t.Errorf("sealed at the quorum's end: %v", res.Err())
		}
	}
}

func (w *world) stillActive(seg uint64) bool {
	s, ok := w.cp.view(seg)
	return ok && s.Active
}

// TestSimFailoverIgnoresCreatedCopies: a segment's last records are
// acknowledged by its primary and one follower while the other follower
// is cut off. The primary restarts with its copy, the follower comes
// back on an empty disk (replaced, same id), and the primary fails the
// segment over. That follower answers the fence from a copy the fence
// created. Counted (CountCreatedCopies), its base drags the quorum's end
// down to the cut-off copy's and the seal cuts acknowledged records;
// flagged Unknown, it lowers k and the seal keeps them.
func TestSimFailoverIgnoresCreatedCopies(t *testing.T) {
	for _, counted := range []bool{true, false} {
		cfg := fiveQuiet()
		cfg.DropRate, cfg.DupRate, cfg.SlowRate = 0, 0, 0
		cfg.RollBytes = 1 << 20
		cfg.CountCreatedCopies = counted
		w, ok := newWorld(1, cfg)
		if !ok {
			t.Fatal(w.chk.violations)
		}
		w.start()
		w.loop(300)
		seg, p := onlyPrimary(t, w)
		s, _ := w.cp.view(seg)
		if len(s.Replicas) != 3 {
			t.Fatalf("segment %d has replicas %v, want three", seg, s.Replicas)
		}
		ids := replicaIDs(s)
		acker, cut := w.node(ids[1]), w.node(ids[2])
		w.net.cut[pair(p.id, cut.id)] = true
		for _, c := range w.clients {
			c.to = p.id
		}
		acked := func() bool {
			c := acker.disk.copies[seg]
			behind := cut.disk.copies[seg]
			return c != nil && (behind == nil || w.chk.commit[seg] > behind.syncedEnd)
		}
		for w.now < 3000 && !acked() {
			w.loop(w.now + 1)
		}
		if !acked() {
			t.Fatalf("no record of %d acknowledged by %d and %d alone", seg, p.id, acker.id)
		}
		// The primary fails (what it sent arrives meanwhile); the
		// follower's disk is replaced: it comes back empty.
		p.crash(false)
		w.loop(w.now + 50)
		if !w.stillActive(seg) {
			t.Fatalf("segment %d was sealed before the follower's disk was replaced", seg)
		}
		acker.crash(false)
		acker.disk, acker.crashed = newDisk(vfs.NewMem()), vfs.NewMem()
		acker.restart()
		delete(w.net.cut, pair(p.id, cut.id))
		p.restart()
		p.startFailover(s)
		for _, c := range w.clients {
			c.to = 0
		}
		for w.now < 3000 && w.stillActive(seg) {
			w.loop(w.now + 1)
		}
		sealed, _ := w.cp.view(seg)
		if sealed.Active {
			t.Fatalf("segment %d was not failed over", seg)
		}
		res := settle(w)
		t.Logf("counted=%v: sealed at %d, acked %d: %v", counted, sealed.End, res.Stats.Acked, res.Err())
		switch {
		case counted && !res.Violated("W6"):
			t.Errorf("created copies counted: the seal at %d should cut acknowledged records", sealed.End)
		case !counted && res.Err() != nil:
			t.Errorf("created copies flagged: %v", res.Err())
		}
	}
}
