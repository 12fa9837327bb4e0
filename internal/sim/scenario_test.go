package sim

import "testing"

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
