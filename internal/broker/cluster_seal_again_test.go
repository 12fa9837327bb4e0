package broker_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// A holder whose seal of its copy gave up (SealCopy timed out) keeps a
// whole copy unsealed: neither scrubbed nor counted behind. Past the
// grace, the scrub seals it, without waiting for the node to restart.
func TestClusterWholeUnsealedCopyIsSealedAgain(t *testing.T) {
	restore := broker.SkipSealCopy()
	defer restore()
	tc := startHealCluster(t, 3, 4<<10, broker.HealConfig{
		DeadAfter: time.Hour, Interval: 100 * time.Millisecond,
		ScrubInterval: 300 * time.Millisecond, ScrubRate: 64 << 20,
	})
	n1 := tc.nodes[0].b
	tc.createEverywhere(tc.nodes[0], "reseal", 1)
	produceSealed(t, n1, "reseal", 64)
	segs := sealedSegments(t, n1, "reseal")
	if len(segs) == 0 {
		t.Fatal("no sealed segment")
	}
	unsealed := func() error {
		var errs []error
		for _, s := range segs {
			for _, name := range s.Replicas {
				recorded, local := tc.node(name).b.SealContentHashes(s.ID)
				if local != recorded {
					errs = append(errs, fmt.Errorf("segment %d on %s: sealed copy's hash %x, recorded %x", s.ID, name, local, recorded))
				}
			}
		}
		return errors.Join(errs...)
	}
	// A seal waits for a quorum: the primary's copy and at least one
	// follower's reach the end, and the followers' are left unsealed.
	if unsealed() == nil {
		t.Fatal("every copy is sealed although holders skip sealing theirs")
	}
	restore()
	eventually(t, 30*time.Second, "every copy of the sealed segments sealed", unsealed)
	for _, s := range segs {
		tc.checkCopiesWhole(s)
	}
}
