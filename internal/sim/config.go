package sim

import (
	"fmt"

	"github.com/malachi-log/malachi/internal/heal"
)

// Bug switches a deliberately broken variant of one rule on, so that a
// test can show the matching checker catches it. The zero value runs the
// rules as the broker does.
type Bug uint8

const (
	// NoBug runs the real rules.
	NoBug Bug = iota
	// BugAckOnPrimaryFsync acknowledges a produce once the primary's own
	// fsync covers it, without waiting for a quorum: W1 must catch it.
	BugAckOnPrimaryFsync
	// BugSealAtLowestAnswer seals a failed-over segment at the lowest
	// fence answer instead of FailoverEnd's: W6 must catch it.
	BugSealAtLowestAnswer
	// BugAppendTwice appends some produces twice, as a frontend that
	// retried a produce it had already forwarded would: the no-dup
	// checker must catch it.
	BugAppendTwice
	// BugTrustFailedFsync takes a failed fsync for a good one: the copy
	// reports an fsynced end its disk does not hold, and W1 must catch
	// an acknowledgement counting it.
	BugTrustFailedFsync
	// BugIgnoreWriteError lets a copy whose write failed (ENOSPC) go on
	// as if it had been written: W1 must catch an acknowledgement
	// counting it.
	BugIgnoreWriteError
	// BugServeDamaged serves a sealed copy without checking its batch
	// CRCs: S1 must catch a reader given a flipped byte.
	BugServeDamaged
	// BugRecordUnverified records a heal's new copy without checking
	// what it copied (no CRC on write, no heal.Verify before
	// set_segment_replicas): S3 must catch a recorded copy that differs
	// from the seal.
	BugRecordUnverified
	// BugNoHeal plans no heal and scrubs nothing: the factor checker
	// must catch segments left short of copies.
	BugNoHeal
)

func (b Bug) String() string {
	switch b {
	case NoBug:
		return "none"
	case BugAckOnPrimaryFsync:
		return "ack-on-primary-fsync"
	case BugSealAtLowestAnswer:
		return "seal-at-lowest-answer"
	case BugAppendTwice:
		return "append-twice"
	case BugTrustFailedFsync:
		return "trust-failed-fsync"
	case BugIgnoreWriteError:
		return "ignore-write-error"
	case BugServeDamaged:
		return "serve-damaged"
	case BugRecordUnverified:
		return "record-unverified"
	case BugNoHeal:
		return "no-heal"
	}
	return fmt.Sprintf("bug-%d", uint8(b))
}

// Config shapes one run. Times are simulated milliseconds. The zero value
// of a field takes the default of DefaultConfig.
type Config struct {
	Nodes     int // cluster size
	Replicas  int // replication factor of the topic
	Ranges    int // ranges of the one topic
	Producers int // clients, each with its own home node and keys
	Keys      int // keys per producer

	// Duration is how long producers run with faults on; Settle is how
	// long the run goes on after the faults stop and everything heals,
	// before the final roll and the final checks.
	Duration, Settle int64

	// RollBytes is the size at which a primary rolls its segment.
	RollBytes int

	NetDelayMin, NetDelayMax   int64
	DiskDelayMin, DiskDelayMax int64
	// DropRate and DupRate apply to replication messages, which the
	// protocol resends; client requests and replies ride a connection and
	// are lost only with a node or a partition.
	DropRate, DupRate float64
	// SlowRate is the share of messages held up to twenty times longer.
	SlowRate float64

	// FaultEvery is the mean time between two faults; MaxDown bounds the
	// nodes down at once.
	FaultEvery int64
	MaxDown    int
	// ControlPlaneOutages turns control-plane unavailability on as a fault.
	ControlPlaneOutages bool

	ClientTimeout   int64 // a produce not answered by then has an unknown outcome
	ForwardTimeout  int64 // a forwarded produce not answered by then suspects the primary
	FailoverTimeout int64 // a failover without enough fence answers by then gives up
	StuckRoll       int64 // a fenced primary not drained by then is failed over
	HoldMs          int64 // how long a failover holds its range
	ControlDelay    int64 // the time between a failover's answers and its seal
	MemberDelay     int64 // the time membership takes to declare a crashed node dead
	// FenceGrace is how long a failover with enough fence answers waits
	// for the others before it decides (the node's four resend ticks).
	FenceGrace int64
	TickEvery  int64

	// Disk faults and permanent loss. Each is the probability that one
	// fault event is of that kind (the rest are crashes, restarts,
	// partitions and outages): FlipRate flips one bit in the middle of a
	// sealed copy, FullRate fills a node's disk (writes answer ENOSPC)
	// for FullMin to FullMax ms, FsyncRate makes a node's next group
	// commit fail, LossRate loses a node for good (at most one a run,
	// and only with five nodes or more, so a quorum of every replica set
	// of three survives it).
	FlipRate, FullRate, FsyncRate, LossRate float64
	FullMin, FullMax                        int64

	// DeadAfter is the grace after which a node down is dead to the
	// heal planner (--dead-after); HealEvery is how often each node
	// plans, fills and collects; ScrubEvery is the scrub interval
	// (--scrub-interval): each sealed copy is verified about that often.
	// HealRate paces what a source serves to heal targets, bytes/s.
	DeadAfter, HealEvery, ScrubEvery int64
	HealRate                         int64
	// Quiesce bounds the simulated time the run waits, after the final
	// seals, for every sealed segment to return to its factor.
	Quiesce int64

	// MaxEvents bounds the event queue: a message that would pass it is
	// dropped and counted, never queued.
	MaxEvents int

	Bug Bug

	// NoFenceWithoutCopy makes a replica that holds no copy of a segment
	// (the primary never reached it) refuse a failover's fence, as
	// internal/replica once did. A segment whose primary is lost
	// before a quorum of its followers made a copy can then never fail
	// over. By default such a replica creates an empty copy, fences it and
	// answers the segment's base, which is safe: it fsynced nothing (the
	// node's rule too).
	NoFenceWithoutCopy bool

	// VolatileFence keeps a follower's fence in memory only, as
	// internal/replica once did: a fenced copy that restarts before the seal is
	// recorded takes appends from a primary still running, which may then
	// commit above the failover's seal. By default the fence is recorded
	// on disk before it is answered and survives a restart.
	VolatileFence bool

	// SealAtHighestAnswer seals a failed-over segment at the highest
	// fence answer as soon as enough replicas answered, as internal/replica
	// once did: the sealed end may then be on the failed primary's copy
	// alone, the others behind it, and losing that node for good loses
	// acknowledged records no copy serves or heals from. By default the
	// failover waits FenceGrace for every answer and seals at the end a
	// quorum of the answers holds (quorumEnd).
	SealAtHighestAnswer bool

	// CountCreatedCopies counts the answer of a copy the fence itself
	// created (the node held none) like any other, as internal/replica
	// once did: a node back with an empty disk then pulls the failover's
	// seal below records it acknowledged before. By default such an
	// answer is flagged Unknown and lowers the quorum's k.
	CountCreatedCopies bool
}

// DefaultConfig is the configuration the fixed seeds run.
func DefaultConfig() Config {
	return Config{
		Nodes: 5, Replicas: 3, Ranges: 2, Producers: 3, Keys: 6,
		Duration: 6000, Settle: 3000,
		RollBytes:   1500,
		NetDelayMin: 1, NetDelayMax: 15,
		DiskDelayMin: 1, DiskDelayMax: 8,
		DropRate: 0.03, DupRate: 0.03, SlowRate: 0.02,
		FaultEvery: 350, MaxDown: 2, ControlPlaneOutages: true,
		ClientTimeout: 1500, ForwardTimeout: 400, FailoverTimeout: 600, StuckRoll: 800,
		HoldMs: 1500, ControlDelay: 20, MemberDelay: 100, TickEvery: 50, FenceGrace: 200,
		FlipRate: 0.06, FullRate: 0.04, FsyncRate: 0.04, LossRate: 0.03,
		FullMin: 200, FullMax: 1200,
		DeadAfter: 500, HealEvery: 100, ScrubEvery: 1500, HealRate: 64 << 10, Quiesce: 4000,
		MaxEvents: 1 << 16,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	set := func(v *int64, def int64) {
		if *v == 0 {
			*v = def
		}
	}
	seti := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	seti(&c.Nodes, d.Nodes)
	seti(&c.Replicas, d.Replicas)
	seti(&c.Ranges, d.Ranges)
	seti(&c.Producers, d.Producers)
	seti(&c.Keys, d.Keys)
	seti(&c.RollBytes, d.RollBytes)
	seti(&c.MaxDown, d.MaxDown)
	seti(&c.MaxEvents, d.MaxEvents)
	for _, p := range []struct {
		v   *int64
		def int64
	}{
		{&c.Duration, d.Duration}, {&c.Settle, d.Settle}, {&c.NetDelayMin, d.NetDelayMin},
		{&c.NetDelayMax, d.NetDelayMax}, {&c.DiskDelayMin, d.DiskDelayMin}, {&c.DiskDelayMax, d.DiskDelayMax},
		{&c.FaultEvery, d.FaultEvery}, {&c.ClientTimeout, d.ClientTimeout}, {&c.ForwardTimeout, d.ForwardTimeout},
		{&c.FailoverTimeout, d.FailoverTimeout}, {&c.StuckRoll, d.StuckRoll}, {&c.HoldMs, d.HoldMs},
		{&c.ControlDelay, d.ControlDelay}, {&c.MemberDelay, d.MemberDelay}, {&c.TickEvery, d.TickEvery},
		{&c.FenceGrace, d.FenceGrace},
		{&c.FullMin, d.FullMin}, {&c.FullMax, d.FullMax}, {&c.DeadAfter, d.DeadAfter}, {&c.HealEvery, d.HealEvery},
		{&c.ScrubEvery, d.ScrubEvery}, {&c.HealRate, d.HealRate}, {&c.Quiesce, d.Quiesce},
	} {
		set(p.v, p.def)
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 64:
		return fmt.Errorf("sim: %d nodes, want 1 to 64", c.Nodes)
	case c.Replicas < 1 || c.Replicas > c.Nodes:
		return fmt.Errorf("sim: replication factor %d with %d nodes", c.Replicas, c.Nodes)
	case c.Ranges < 1 || c.Ranges > 64 || c.Ranges&(c.Ranges-1) != 0:
		return fmt.Errorf("sim: %d ranges, want a power of two up to 64", c.Ranges)
	case c.Producers < 1 || c.Producers > 64 || c.Keys < 1:
		return fmt.Errorf("sim: %d producers with %d keys each", c.Producers, c.Keys)
	case c.NetDelayMin < 1 || c.NetDelayMax < c.NetDelayMin || c.DiskDelayMin < 1 || c.DiskDelayMax < c.DiskDelayMin:
		return fmt.Errorf("sim: delays must be at least 1ms and ordered")
	case c.FullMax < c.FullMin || c.HealRate > heal.MaxTakeBytes:
		return fmt.Errorf("sim: full-disk times must be ordered and the heal rate at most %d B/s", heal.MaxTakeBytes)
	case c.ClientTimeout <= c.ForwardTimeout+2*c.NetDelayMax:
		return fmt.Errorf("sim: the client timeout must exceed the forward timeout and a round trip")
	}
	return nil
}
