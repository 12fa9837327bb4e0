package sim

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// fixedSeeds is how many seeds `go test ./internal/sim` runs: about
// fifteen to twenty seconds with -race on two cores.
const fixedSeeds = 40

var (
	simSeed  = flag.Uint64("sim.seed", 0, "run only this seed of TestSimSeeds")
	simSeeds = flag.Int("sim.seeds", fixedSeeds, "how many seeds TestSimSeeds runs, from 1")
	simTrace = flag.Bool("sim.trace", false, "print every traced step of -sim.seed to stderr")
)

func replay(seed uint64) string {
	return fmt.Sprintf("go test ./internal/sim -run TestSimSeeds -sim.seed=%d -v", seed)
}

// TestSimSeeds runs the fixed seeds of the default configuration (or
// -sim.seed, or -sim.seeds=N) and fails on any violated invariant, with
// the command that replays the failing seed.
func TestSimSeeds(t *testing.T) {
	var seeds []uint64
	if *simSeed != 0 {
		seeds = []uint64{*simSeed}
		if *simTrace {
			traceOut = os.Stderr
			defer func() { traceOut = nil }()
		}
	} else {
		for s := uint64(1); s <= uint64(*simSeeds); s++ {
			seeds = append(seeds, s)
		}
	}
	var total Stats
	failed := 0
	for _, seed := range seeds {
		res := Run(seed, DefaultConfig())
		if err := res.Err(); err != nil {
			failed++
			t.Errorf("seed %d: %v\n\treplay: %s", seed, err, replay(seed))
			if failed == 5 {
				t.Fatalf("stopping after %d failing seeds", failed)
			}
		}
		if *simSeed != 0 {
			t.Logf("seed %d: digest %016x\n\t%+v", seed, res.Digest, res.Stats)
		}
		total.add(res.Stats)
	}
	t.Logf("%d seeds: %+v", len(seeds), total)
	if len(seeds) < fixedSeeds {
		return
	}
	// The fixed seeds must exercise every fault and both ways of ending a
	// segment, or a passing run proves little.
	for name, v := range map[string]int{
		"acknowledged records": total.Acked, "kill -9 crashes": total.Crashes, "power losses": total.PowerLosses,
		"partitions": total.Partitions, "control-plane outages": total.Outages, "rolls": total.Rolls,
		"failovers": total.Failovers, "dropped messages": total.DroppedMsgs, "duplicated messages": total.DupMsgs,
		"reads": total.Reads, "metadata_unavailable refusals": total.Refusals[reasonUnavailable],
		"bit flips": total.Flips, "full disks": total.DiskFulls, "failed copies": total.FailedCopies,
		"fsync faults": total.FsyncFaults, "lost nodes": total.Lost, "damaged copies found": total.FoundDamaged,
		"heals recorded": total.HealsDone, "dead or damaged holders dropped": total.Drops, "copies collected": total.Collected,
	} {
		if v == 0 {
			t.Errorf("the fixed seeds saw no %s", name)
		}
	}
}

// TestSimDeterministic runs seeds twice: a run is a function of its
// seed and config, and different seeds take different paths.
func TestSimDeterministic(t *testing.T) {
	digests := map[uint64]uint64{}
	for seed := uint64(1); seed <= 3; seed++ {
		a, b := Run(seed, DefaultConfig()), Run(seed, DefaultConfig())
		if a.Digest != b.Digest || fmt.Sprint(a.Stats) != fmt.Sprint(b.Stats) {
			t.Errorf("seed %d: digests %016x and %016x, stats\n\t%+v\n\t%+v", seed, a.Digest, b.Digest, a.Stats, b.Stats)
		}
		for other, d := range digests {
			if d == a.Digest {
				t.Errorf("seeds %d and %d have the same digest %016x", other, seed, d)
			}
		}
		digests[seed] = a.Digest
	}
}

// firstCaught runs the fixed seeds with cfg and returns the first seed
// whose run violated invariant id, and that run.
func firstCaught(t *testing.T, cfg Config, id string) (uint64, Result) {
	t.Helper()
	for seed := uint64(1); seed <= fixedSeeds; seed++ {
		if res := Run(seed, cfg); res.Violated(id) {
			return seed, res
		}
	}
	t.Fatalf("no seed of %d violated %s with bug %v", fixedSeeds, id, cfg.Bug)
	return 0, Result{}
}

// TestSimCatchesAckBeforeQuorum breaks W1 on purpose (an ack after the
// primary's own fsync only) and expects the W1 checker to fire, and the
// failing seed to replay to the same trace.
func TestSimCatchesAckBeforeQuorum(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Bug = BugAckOnPrimaryFsync
	seed, res := firstCaught(t, cfg, "W1")
	t.Logf("seed %d: %v", seed, res.Violations[0])
	if again := Run(seed, cfg); again.Digest != res.Digest || !again.Violated("W1") {
		t.Errorf("seed %d did not replay: digest %016x then %016x", seed, res.Digest, again.Digest)
	}
}

// TestSimCatchesLowFailoverSeal breaks W6 on purpose (a failover seals at
// the lowest fence answer) and expects the W6 checker to fire.
func TestSimCatchesLowFailoverSeal(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Bug = BugSealAtLowestAnswer
	seed, res := firstCaught(t, cfg, "W6")
	for _, v := range res.Violations {
		if v.Invariant == "W6" {
			t.Logf("seed %d: %v", seed, v)
			break
		}
	}
}

// TestSimCatchesDuplicates appends some produces twice on purpose and
// expects the no-dup checker to fire.
func TestSimCatchesDuplicates(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Bug = BugAppendTwice
	seed, res := firstCaught(t, cfg, "no-dup")
	t.Logf("seed %d: %v", seed, res.Violations[0])
}

func (t *Stats) add(s Stats) {
	t.Events += s.Events
	t.Acked += s.Acked
	t.Maybe += s.Maybe
	t.Retried += s.Retried
	t.Crashes += s.Crashes
	t.PowerLosses += s.PowerLosses
	t.Partitions += s.Partitions
	t.Outages += s.Outages
	t.Rolls += s.Rolls
	t.Failovers += s.Failovers
	t.Opens += s.Opens
	t.DroppedMsgs += s.DroppedMsgs
	t.DupMsgs += s.DupMsgs
	t.QueueFull += s.QueueFull
	t.CopiesBehind += s.CopiesBehind
	t.Reads += s.Reads
	t.ReadRecords += s.ReadRecords
	t.Records += s.Records
	t.SealedSegments += s.SealedSegments
	t.Flips += s.Flips
	t.DiskFulls += s.DiskFulls
	t.FsyncFaults += s.FsyncFaults
	t.Lost += s.Lost
	t.FailedCopies += s.FailedCopies
	t.SealsDeferred += s.SealsDeferred
	t.Scrubs += s.Scrubs
	t.FoundDamaged += s.FoundDamaged
	t.MarkedDamaged += s.MarkedDamaged
	t.HealsStarted += s.HealsStarted
	t.HealsDone += s.HealsDone
	t.HealsFailed += s.HealsFailed
	t.HealBytes += s.HealBytes
	t.Drops += s.Drops
	t.Collected += s.Collected
	t.Rebuilds += s.Rebuilds
	t.SetAside += s.SetAside
	if t.Refusals == nil {
		t.Refusals = map[string]int{}
	}
	for k, v := range s.Refusals {
		t.Refusals[k] += v
	}
}
