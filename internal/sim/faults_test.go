package sim

import (
	"slices"
	"testing"
)

// The fixed seeds with one protection switched off, and a fault made
// more frequent so that a few seeds meet it: each checker must fire.

func caughtWith(t *testing.T, bug Bug, id string, tune func(*Config)) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Bug = bug
	tune(&cfg)
	seed, res := firstCaught(t, cfg, id)
	for _, v := range res.Violations {
		if v.Invariant == id {
			t.Logf("seed %d: %v", seed, v)
			return
		}
	}
}

// TestSimCatchesTrustedFailedFsync takes a failed fsync for a good one:
// a copy acks what its disk lost, and W1 fires.
func TestSimCatchesTrustedFailedFsync(t *testing.T) {
	caughtWith(t, BugTrustFailedFsync, "W1", func(c *Config) { c.FsyncRate = 0.4 })
}

// TestSimCatchesAckAfterFailedWrite lets a copy whose write hit ENOSPC
// ack it anyway: W1 fires.
func TestSimCatchesAckAfterFailedWrite(t *testing.T) {
	caughtWith(t, BugIgnoreWriteError, "W1", func(c *Config) { c.FullRate = 0.4 })
}

// TestSimCatchesServedFlip serves sealed copies without checking their
// batches: a reader gets a flipped byte and S1 fires.
func TestSimCatchesServedFlip(t *testing.T) {
	caughtWith(t, BugServeDamaged, "S1", func(c *Config) { c.FlipRate = 0.4 })
}

// TestSimCatchesNoHeal plans no heal: segments that lost a copy stay
// short and the factor checker fires.
func TestSimCatchesNoHeal(t *testing.T) {
	caughtWith(t, BugNoHeal, "factor", func(*Config) {})
}

// fiveQuiet is a five-node cluster with one range and no seeded fault.
func fiveQuiet() Config {
	cfg := quietConfig(2)
	cfg.Nodes = 5
	return cfg
}

// sealedWithData returns a sealed segment holding records, listed on
// three nodes.
func sealedWithData(t *testing.T, w *world) (segID uint64, holders []uint64) {
	t.Helper()
	for _, seg := range w.sealedSegments() {
		if seg.End > seg.Base && len(seg.Replicas) == 3 {
			return seg.ID, replicaIDs(seg)
		}
	}
	t.Fatalf("no sealed segment with records after %dms (%+v)", w.now, w.stats)
	return 0, nil
}

// TestSimScrubReplacesFlippedCopy flips a bit in the middle of one sealed
// copy: the scrubber finds it, the copy is recorded damaged, a new copy
// is filled, verified and recorded, and only then is the damaged one
// deleted; no reader ever gets the flipped byte (S1, checked on every
// read).
func TestSimScrubReplacesFlippedCopy(t *testing.T) {
	w, ok := newWorld(3, fiveQuiet())
	if !ok {
		t.Fatal(w.chk.violations)
	}
	w.start()
	w.loop(2000)
	seg, holders := sealedWithData(t, w)
	n := w.node(holders[1])
	cf := n.disk.copies[seg]
	if err := n.disk.flip(seg, cf.size/2, 3); err != nil {
		t.Fatal(err)
	}
	w.chk.flipped(n, seg)
	res := settle(w)
	t.Logf("flipped node %d's copy of %d: %+v", n.id, seg, res.Stats)
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if res.Stats.FoundDamaged == 0 || res.Stats.HealsDone == 0 {
		t.Errorf("the flip was not found and healed: found %d, heals %d", res.Stats.FoundDamaged, res.Stats.HealsDone)
	}
	final, _ := w.cp.view(seg)
	if slices.Contains(replicaIDs(final), n.id) && (n.disk.copies[seg] == nil || n.disk.copies[seg].damaged) {
		t.Errorf("node %d is still listed for %d without a good copy: %v", n.id, seg, final.Replicas)
	}
	if c := n.disk.copies[seg]; c != nil && c.damaged {
		t.Errorf("node %d still holds the damaged copy of %d", n.id, seg)
	}
}

// TestSimLostNodeIsHealedAround loses a node for good: past dead-after
// every sealed segment it held gets a new copy and the dead holder is
// dropped. With healing off, the factor checker fires.
func TestSimLostNodeIsHealedAround(t *testing.T) {
	for _, bug := range []Bug{NoBug, BugNoHeal} {
		cfg := fiveQuiet()
		cfg.Bug = bug
		w, ok := newWorld(5, cfg)
		if !ok {
			t.Fatal(w.chk.violations)
		}
		w.start()
		w.loop(2000)
		_, holders := sealedWithData(t, w)
		gone := w.node(holders[0])
		gone.crash(true)
		gone.lost = true
		res := settle(w)
		t.Logf("bug %v, node %d lost: heals %d, drops %d: %v", bug, gone.id, res.Stats.HealsDone, res.Stats.Drops, res.Err())
		switch {
		case bug == NoBug && res.Err() != nil:
			t.Errorf("with healing: %v", res.Err())
		case bug == NoBug && (res.Stats.HealsDone == 0 || res.Stats.Drops == 0):
			t.Errorf("no heal or no drop recorded: %+v", res.Stats)
		case bug == BugNoHeal && !res.Violated("factor"):
			t.Errorf("without healing the factor checker should fire")
		}
	}
}

// TestSimFullDiskMovesWritesAway fills the disk of the node leading the
// active segment: it acknowledges nothing it could not write, the
// segment fails over to other nodes and produce goes on; nothing
// acknowledged is lost.
func TestSimFullDiskMovesWritesAway(t *testing.T) {
	w, ok := newWorld(7, fiveQuiet())
	if !ok {
		t.Fatal(w.chk.violations)
	}
	w.start()
	w.loop(1000)
	_, p := onlyPrimary(t, w)
	p.disk.full = true
	before := w.stats.Acked
	w.loop(4000)
	after := w.stats.Acked
	if len(p.prim) > 0 {
		t.Errorf("node %d still leads a segment with a full disk", p.id)
	}
	p.disk.full = false
	res := settle(w)
	t.Logf("full node %d: acked %d before, %d while full; %+v", p.id, before, after-before, res.Stats)
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Errorf("produce stopped while node %d's disk was full", p.id)
	}
}

// TestSimFailedFsyncFailsTheCopy fails a follower's fsync: its copy stops
// taking appends and acks nothing it did not fsync; the segment's
// other copies carry on and nothing acknowledged is lost.
func TestSimFailedFsyncFailsTheCopy(t *testing.T) {
	w, ok := newWorld(9, fiveQuiet())
	if !ok {
		t.Fatal(w.chk.violations)
	}
	w.start()
	w.loop(500)
	seg, p := onlyPrimary(t, w)
	f := w.node(p.prim[seg].ids[1])
	f.disk.failSync = true
	w.loop(3000)
	if w.stats.FailedCopies == 0 {
		t.Fatalf("node %d's fsync never failed a copy", f.id)
	}
	res := settle(w)
	t.Logf("node %d's fsync failed: %+v", f.id, res.Stats)
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestSimUnverifiedCopyIsCaught loses a node and flips a bit in the copy
// the heal will read from, before any scrub or read finds it. Checked on
// write and verified against the seal before it is recorded, the bad
// copy is never recorded: the source is told, finds its copy damaged,
// and a healthy holder serves the heal. Recorded without those checks
// (BugRecordUnverified), the copy of the flipped bytes is recorded and
// S3 fires.
func TestSimUnverifiedCopyIsCaught(t *testing.T) {
	for _, bug := range []Bug{NoBug, BugRecordUnverified} {
		cfg := fiveQuiet()
		cfg.Bug, cfg.ScrubEvery = bug, 1<<40
		w, ok := newWorld(3, cfg)
		if !ok {
			t.Fatal(w.chk.violations)
		}
		w.start()
		w.loop(2000)
		w.stopping = true // no read finds the flip first
		seg, holders := sealedWithData(t, w)
		gone := w.node(holders[2])
		gone.crash(false)
		gone.lost = true
		w.loop(w.now + cfg.MemberDelay + cfg.DeadAfter - cfg.HealEvery)
		src := w.node(holders[0])
		if err := src.disk.flip(seg, src.disk.copies[seg].size/2, 5); err != nil {
			t.Fatal(err)
		}
		w.chk.flipped(src, seg)
		res := settle(w)
		t.Logf("bug %v: node %d lost, node %d's copy of %d flipped: heals %d, failed %d: %v",
			bug, gone.id, src.id, seg, res.Stats.HealsDone, res.Stats.HealsFailed, res.Err())
		switch {
		case bug == NoBug && res.Err() != nil:
			t.Errorf("with the checks: %v", res.Err())
		case bug == NoBug && res.Stats.HealsFailed == 0:
			t.Errorf("no heal read the flipped copy: the scenario tests nothing")
		case bug == BugRecordUnverified && !res.Violated("S3"):
			t.Errorf("a copy recorded without checks should break S3")
		}
	}
}

// TestSimDamagedHolderRebuildsItsCopy: on three nodes every node holds
// a copy, so when one copy is damaged no node lacks one; the damaged
// holder sets its copy aside, rebuilds it from a healthy one, and the
// segment returns to its factor with no damage recorded.
func TestSimDamagedHolderRebuildsItsCopy(t *testing.T) {
	cfg := quietConfig(2)
	w, ok := newWorld(3, cfg)
	if !ok {
		t.Fatal(w.chk.violations)
	}
	w.start()
	w.loop(2000)
	seg, holders := sealedWithData(t, w)
	n := w.node(holders[1])
	if err := n.disk.flip(seg, n.disk.copies[seg].size/2, 1); err != nil {
		t.Fatal(err)
	}
	w.chk.flipped(n, seg)
	res := settle(w)
	t.Logf("node %d's copy of %d flipped: rebuilds %d, set aside %d, heals %d: %v",
		n.id, seg, res.Stats.Rebuilds, res.Stats.SetAside, res.Stats.HealsDone, res.Err())
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if res.Stats.Rebuilds == 0 || res.Stats.SetAside == 0 {
		t.Fatalf("no damaged holder rebuilt its copy: %+v", res.Stats)
	}
	if got, _ := w.cp.view(seg); !slices.Contains(got.Replicas, nodeName(n.id)) || len(got.Damaged) != 0 {
		t.Fatalf("segment %d ends with list %v, damaged %v: node %d should be listed and whole", seg, got.Replicas, got.Damaged, n.id)
	}
}
