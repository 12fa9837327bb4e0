package broker_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/vfs"
)

// syncGate holds the fsyncs of a node's segment store while it is
// closed: the node's copies take appends but fsync none of them, so
// the watermark a follower's copy serves to stays where it was.
type syncGate struct {
	closed  atomic.Bool
	release chan struct{}
	once    sync.Once
}

func newSyncGate() *syncGate { return &syncGate{release: make(chan struct{})} }

func (g *syncGate) rule(op vfs.Op, name string) error {
	if (op == vfs.OpSync || op == vfs.OpSyncFiles) && g.closed.Load() &&
		strings.Contains(name, string(filepath.Separator)+"segments") {
		<-g.release
	}
	return nil
}

// open lets every held fsync through, for good.
func (g *syncGate) open() { g.once.Do(func() { close(g.release) }) }

// R3: when the primary of an active segment is gone and the reading
// node's copy does not know its watermark, the read goes to another
// follower, whose copy stops at the watermark it learned: behind the
// acknowledged end when its last appends are not fsynced there (or the
// primary's last watermark never reached it). That copy's empty answer
// at its watermark is not the segment's end: the page holds what the
// copy vouched for (committed) and the next answers metadata_unavailable
// (or, once failed over, the rest), never an empty page that stops short
// of an acknowledged record, as caught up.
func TestClusterReadPastLaggingFollowerIsUnavailable(t *testing.T) {
	gate := newSyncGate()
	tc := startClusterWith(t, 3, func(nd *clusterNode) {
		if nd.id == 3 {
			nd.fs = vfs.NewFaulty(vfs.OS(), gate.rule)
		}
	})
	t.Cleanup(gate.open) // runs before the cluster closes
	tc.waitQuorumSafe()
	ctx := t.Context()
	n1, n2, n3 := tc.nodes[0].b, tc.nodes[1].b, tc.nodes[2].b
	const topic = "laggingcopy"
	tc.createEverywhere(tc.nodes[0], topic, 1)
	for i := range 3 {
		if _, err := n1.Produce(ctx, topic, []broker.Record{rec("k", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	seg := activeSegment(t, n1, topic)
	if seg.Primary != "node-1" || len(seg.Replicas) != 3 {
		t.Fatalf("segment %d: primary %q, replicas %v; want node-1 leading three", seg.ID, seg.Primary, seg.Replicas)
	}
	for _, b := range []*broker.Broker{n2, n3} {
		eventually(t, 10*time.Second, "the followers to serve the acknowledged records", func() error {
			if end, err := b.ServedBound(seg.ID, ^uint64(0)); err != nil || end != 3 {
				return fmt.Errorf("serves to %d, %v", end, err)
			}
			return nil
		})
	}

	gate.closed.Store(true)
	if _, err := n1.Produce(ctx, topic, []broker.Record{rec("k", "3")}); err != nil {
		t.Fatal(err) // acknowledged by nodes 1 and 2
	}
	eventually(t, 10*time.Second, "node 2 to serve the fourth record", func() error {
		if end, err := n2.ServedBound(seg.ID, ^uint64(0)); err != nil || end != 4 {
			return fmt.Errorf("serves to %d, %v", end, err)
		}
		return nil
	})
	if end, err := n3.ServedBound(seg.ID, ^uint64(0)); err != nil || end != 3 {
		t.Fatalf("node 3, its fsyncs held, serves to %d, %v; want 3", end, err)
	}

	tc.stop(tc.nodes[0])
	n2.ForgetReplica(seg.ID) // as a restart would: node 2 does not know the watermark
	p, err := n2.Fetch(ctx, broker.FetchRequest{Topic: topic, Max: 1000})
	switch {
	case err == nil && len(p.Records) == 4:
		return // the range failed over first: its end is known
	case err != nil:
		t.Fatalf("a read of a range whose end is unknown: %v, want the records its copies vouch for", err)
	case len(p.Records) != 3:
		t.Fatalf("a read of a range whose end is unknown answered %d records; want the 3 the lagging copy vouches for", len(p.Records))
	}
	p, err = n2.Fetch(ctx, broker.FetchRequest{Topic: topic, Cursor: p.Cursor, Max: 1000})
	switch {
	case err == nil && len(p.Records) == 1:
		// The range failed over meanwhile: its end is known.
	case err == nil:
		t.Fatalf("a read of a range whose end is unknown answered %d records after 3 of 4, as caught up", len(p.Records))
	case !errors.Is(err, broker.ErrMetadataUnavailable):
		t.Fatalf("a read of a range whose end is unknown: %v, want metadata unavailable", err)
	}
}
