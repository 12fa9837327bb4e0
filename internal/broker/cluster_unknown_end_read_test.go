package broker_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/vfs"
)

// unknownEnd is a cluster of three in which one range of a four-range
// topic, R, has lost its primary while the only copy that answers for
// it lags. The primary, node X, is cut off from the other nodes on the
// peer network (gossip still says it is alive, so nothing fails over
// until the test lets it); the reader, a follower of R, has forgotten
// its replica state of R (as a restart leaves it); and the third node's
// copy has R's last append unfsynced, so the watermark it serves to
// stays one short of the acknowledged end.
type unknownEnd struct {
	tc    *testCluster
	net   *faultNet
	gates []*syncGate
	topic string
	// primary is X; reader is a follower of R that reads; lagging is
	// R's third node.
	primary, reader, lagging *clusterNode
	segR                     broker.SegmentDescription
	// sent holds every acknowledged value per key, in the order
	// acknowledged.
	sent map[string][]string
}

const unknownEndKeys = 16

func startUnknownEnd(t *testing.T, topic string) *unknownEnd {
	gates := []*syncGate{newSyncGate(), newSyncGate(), newSyncGate()}
	fn := newFaultNet(t)
	tc := startRelayedClusterWith(t, fn, func(nd *clusterNode) {
		nd.fs = vfs.NewFaulty(vfs.OS(), gates[nd.id-1].rule)
		// A read of the cut-off primary fails within this; the page's
		// reads of it are sequential.
		nd.data.CallTimeout = 300 * time.Millisecond
	})
	t.Cleanup(func() { // runs before the cluster closes
		for _, g := range gates {
			g.open()
		}
	})
	tc.waitQuorumSafe()
	u := &unknownEnd{tc: tc, net: fn, gates: gates, topic: topic, sent: map[string][]string{}}
	tc.createEverywhere(tc.nodes[0], topic, 4)
	for round := range 3 {
		for k := range unknownEndKeys {
			u.produce(t, tc.nodes[0], fmt.Sprintf("k%d", k), round)
		}
	}
	d, err := tc.nodes[0].b.DescribeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	const keyR = "k0"
	var rangeR broker.RangeDescription
	pos := keyspace.Position([]byte(keyR), d.Bits)
	for _, r := range d.Ranges {
		if r.Active && r.Start <= pos && pos < r.End {
			rangeR = r
		}
	}
	u.segR = activeOf(t, rangeR)
	u.primary = nodeNamed(t, tc, u.segR.Primary)
	var followers []*clusterNode
	for _, name := range u.segR.Replicas {
		if name != u.segR.Primary {
			followers = append(followers, nodeNamed(t, tc, name))
		}
	}
	if len(followers) != 2 {
		t.Fatalf("segment %d of range %d: replicas %v; want three", u.segR.ID, rangeR.ID, u.segR.Replicas)
	}
	u.reader, u.lagging = followers[0], followers[1]
	// Every copy of every range serves everything acknowledged so far.
	for _, r := range d.Ranges {
		if !r.Active || len(r.Segments) == 0 {
			continue
		}
		seg := activeOf(t, r)
		want := u.rangeEnd(d.Bits, r)
		for _, nd := range tc.nodes {
			eventually(t, 10*time.Second, fmt.Sprintf("node %d to serve segment %d to %d", nd.id, seg.ID, want), func() error {
				if end, err := nd.b.ServedBound(seg.ID, ^uint64(0)); err != nil || end != want {
					return fmt.Errorf("serves to %d, %v", end, err)
				}
				return nil
			})
		}
	}
	// One more record of R, acknowledged by its primary and the reader
	// only: the lagging node takes it but fsyncs nothing.
	before := u.rangeEnd(d.Bits, rangeR)
	gates[u.lagging.id-1].closed.Store(true)
	u.produce(t, u.primary, keyR, 3)
	eventually(t, 10*time.Second, "the reader to serve R's last record", func() error {
		if end, err := u.reader.b.ServedBound(u.segR.ID, ^uint64(0)); err != nil || end != before+1 {
			return fmt.Errorf("serves to %d, %v", end, err)
		}
		return nil
	})
	if end, err := u.lagging.b.ServedBound(u.segR.ID, ^uint64(0)); err != nil || end != before {
		t.Fatalf("node %d, its fsyncs held, serves to %d, %v; want %d", u.lagging.id, end, err, before)
	}
	fn.isolate(u.primary.id, 1, 2, 3)
	u.reader.b.ForgetReplica(u.segR.ID) // as a restart would: the reader does not know R's watermark
	return u
}

// failOver lets R's end be known again: the primary comes back on the
// network and stops (a graceful stop: the others fail its ranges over
// at once), and the lagging node's fsyncs go through.
func (u *unknownEnd) failOver(t *testing.T) {
	u.gates[u.lagging.id-1].open()
	u.net.healAll()
	u.tc.stop(u.primary)
}

// startRelayedClusterWith starts three nodes whose peer connections go
// through fn's relays (cluster_partition_test.go), each adjusted by set
// first, with their client servers.
func startRelayedClusterWith(t *testing.T, fn *faultNet, set func(nd *clusterNode)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, log: quietLogger()}
	root := t.TempDir()
	t.Cleanup(tc.closeAll)
	for i := uint64(1); i <= 3; i++ {
		nd := &clusterNode{id: i, dir: filepath.Join(root, strconv.FormatUint(i, 10)), clientAddr: freeAddr(t), peer: freeAddr(t), gossip: freeAddr(t)}
		set(nd)
		tc.nodes = append(tc.nodes, nd)
		var join []string
		if i > 1 {
			join = []string{tc.nodes[0].gossip}
		}
		cfg := tc.config(nd, join)
		cfg.Cluster.PeerAdvertise = fn.front(t, i, nd.peer)
		if err := tc.openConfig(nd, cfg); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	t.Cleanup(fn.healAll) // before the nodes close, which must reach each other
	tc.waitVoters(3)
	return tc
}

func (u *unknownEnd) produce(t *testing.T, nd *clusterNode, key string, seq int) {
	t.Helper()
	v := fmt.Sprintf("%s:%d", key, seq)
	if _, err := nd.b.Produce(t.Context(), u.topic, []broker.Record{rec(key, v)}); err != nil {
		t.Fatal(err)
	}
	u.sent[key] = append(u.sent[key], v)
}

// rangeEnd is how many acknowledged records r holds (a fresh topic's
// offsets start at 0, one per record).
func (u *unknownEnd) rangeEnd(bits uint8, r broker.RangeDescription) uint64 {
	var n uint64
	for key, vs := range u.sent {
		if pos := keyspace.Position([]byte(key), bits); r.Start <= pos && pos < r.End {
			n += uint64(len(vs))
		}
	}
	return n
}

// total is the number of acknowledged records.
func (u *unknownEnd) total() int {
	n := 0
	for _, vs := range u.sent {
		n += len(vs)
	}
	return n
}

// check fails unless got holds every acknowledged record at most once
// and in order per key, and, when all, every one of them.
func (u *unknownEnd) check(t *testing.T, got []broker.Record, all bool) {
	t.Helper()
	per := map[string][]string{}
	for _, r := range got {
		per[string(r.Key)] = append(per[string(r.Key)], string(r.Value))
	}
	for key, vs := range per {
		want := u.sent[key]
		if len(vs) > len(want) || !slices.Equal(vs, want[:len(vs)]) {
			t.Fatalf("key %s read as %v; acknowledged %v", key, vs, want)
		}
	}
	if all && len(got) != u.total() {
		t.Fatalf("read %d records; %d were acknowledged", len(got), u.total())
	}
}

func activeOf(t *testing.T, r broker.RangeDescription) broker.SegmentDescription {
	t.Helper()
	for _, s := range r.Segments {
		if s.Active {
			return s
		}
	}
	t.Fatalf("range %d has no active segment", r.ID)
	return broker.SegmentDescription{}
}

func nodeNamed(t *testing.T, tc *testCluster, name string) *clusterNode {
	t.Helper()
	for _, nd := range tc.nodes {
		if name == fmt.Sprintf("node-%d", nd.id) {
			return nd
		}
	}
	t.Fatalf("no node %q", name)
	return nil
}

// R3 with several ranges: a range whose end is unknown (its primary
// cut off, the copy that answers lagging) stops a page at what its
// copies vouch for; it does not fail the page. A fetch through a
// follower gets every other range's records and R's committed ones,
// then, caught up elsewhere, metadata_unavailable, never an empty page
// (which would read as caught up), by fetch, long poll and wire v2
// fetch alike; once R fails over, every acknowledged record has been
// read exactly once, in order per key.
func TestClusterUnknownEndStopsOnlyItsRange(t *testing.T) {
	u := startUnknownEnd(t, "unknownend")
	ctx := t.Context()
	b := u.reader.b
	p, err := b.Fetch(ctx, broker.FetchRequest{Topic: u.topic, Max: 1000})
	if err != nil {
		t.Fatalf("a fetch of a topic with one range's end unknown: %v; want the other ranges' records", err)
	}
	got := p.Records
	u.check(t, got, false)
	if len(got) != u.total()-1 {
		t.Fatalf("the first page holds %d of %d acknowledged records; want all but R's last", len(got), u.total())
	}
	cur := p.Cursor
	u.caughtUpElsewhere(t, b, cur)
	u.failOver(t)
	eventually(t, 60*time.Second, "R to fail over and its last record to be read", func() error {
		for len(got) < u.total() {
			p, err := b.Fetch(ctx, broker.FetchRequest{Topic: u.topic, Cursor: cur, Max: 1000})
			switch {
			case errors.Is(err, broker.ErrMetadataUnavailable):
				return err
			case err != nil:
				t.Fatal(err)
			case len(p.Records) == 0:
				t.Fatalf("an empty page with %d of %d records read", len(got), u.total())
			}
			got, cur = append(got, p.Records...), p.Cursor
			u.check(t, got, false)
		}
		return nil
	})
	u.check(t, got, true)
	p, err = b.Fetch(ctx, broker.FetchRequest{Topic: u.topic, Cursor: cur, Max: 1000})
	if err != nil || len(p.Records) != 0 {
		t.Fatalf("after everything was read: %d records, %v; want an empty page", len(p.Records), err)
	}
}

// caughtUpElsewhere checks the answers to a reader at cur that has read
// everything but R's last record while R's end is unknown: each is
// metadata_unavailable, a long poll's once its wait has passed.
func (u *unknownEnd) caughtUpElsewhere(t *testing.T, b *broker.Broker, cur *string) {
	t.Helper()
	ctx := t.Context()
	check := func(how string, n int, err error) {
		t.Helper()
		if !errors.Is(err, broker.ErrMetadataUnavailable) {
			t.Fatalf("%s while R's end is unknown: %d records, %v; want metadata unavailable", how, n, err)
		}
	}
	p, err := b.Fetch(ctx, broker.FetchRequest{Topic: u.topic, Cursor: cur, Max: 1000})
	check("fetch", len(p.Records), err)
	const wait = 500 * time.Millisecond
	start := time.Now()
	p, err = b.Fetch(ctx, broker.FetchRequest{Topic: u.topic, Cursor: cur, Max: 1000, Wait: wait})
	check("long poll", len(p.Records), err)
	if took := time.Since(start); took < wait {
		t.Fatalf("a long poll answered %v after %v, before its wait passed", err, took)
	}
	bp, err := b.FetchBatches(ctx, broker.FetchBatchesRequest{FetchRequest: broker.FetchRequest{Topic: u.topic, Cursor: cur}})
	check("v2 fetch", len(bp.Batches), err)
	bp.Release()
}

// A group member subscribed through the follower is pushed every record
// the copies vouch for and no empty page while R's end is unknown, and
// its stream stays up (metadata_unavailable does not end it): once R
// fails over, it is pushed R's last record, each record once, in order
// per key.
func TestClusterUnknownEndSubscriptionWaits(t *testing.T) {
	u := startUnknownEnd(t, "unknownendsub")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	group, member := "g", "m"
	s, err := u.reader.b.Subscribe(u.topic, &group, &member, 10000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	pages := make(chan broker.Page, 64)
	ran := make(chan error, 1)
	go func() { // ends when ctx does
		ran <- s.Run(ctx, func(p broker.Page) error {
			select {
			case pages <- p:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	var got []broker.Record
	deadline := time.After(60 * time.Second)
	for len(got) < u.total() {
		select {
		case p := <-pages:
			if len(p.Records) == 0 {
				t.Fatal("an empty page pushed")
			}
			got = append(got, p.Records...)
			u.check(t, got, false)
			if len(got) == u.total()-1 {
				// The stream waits on, pushing nothing, while R's end is
				// unknown.
				select {
				case p := <-pages:
					t.Fatalf("a page of %d records pushed while R's end is unknown", len(p.Records))
				case err := <-ran:
					t.Fatalf("the stream ended while R's end is unknown: %v", err)
				case <-time.After(time.Second):
				}
				u.failOver(t)
			}
		case err := <-ran:
			t.Fatalf("the stream ended with %d of %d records read: %v", len(got), u.total(), err)
		case <-deadline:
			t.Fatalf("read %d of %d records", len(got), u.total())
		}
	}
	u.check(t, got, true)
	cancel()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Fatalf("the stream ended with %v", err)
	}
}
