package broker_test

// Self-healing and scrubbing in a four-node cluster on loopback, with a
// replication factor of three, so a lost or damaged copy has a node to go
// to: a node stopped for good past its dead-after grace has every sealed
// segment it held copied back to three verified replicas, byte for byte
// the same; a byte flipped in a sealed copy on disk is found by the
// scrubber, the copy is replaced and deleted, and no reader is ever given
// the damaged bytes; with no spare node, the damaged holder rebuilds its
// own copy; with no healthy copy left, the damaged ones are kept and
// reported but never served.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// startHealCluster is startCluster with segments rolled at segMax bytes
// and the repair settings hc on every node.
func startHealCluster(t *testing.T, n int, segMax int64, hc broker.HealConfig) *testCluster {
	t.Helper()
	tc := startClusterConfigured(t, n, func(cfg *broker.Config) {
		cfg.SegmentMaxBytes = segMax
		cfg.Cluster.Heal = hc
	})
	tc.waitQuorumSafe() // every heal test loses a node
	return tc
}

func (tc *testCluster) openHeal(nd *clusterNode, cfg broker.Config) {
	tc.t.Helper()
	if err := tc.openConfig(nd, cfg); err != nil {
		tc.t.Fatalf("node %d: %v", nd.id, err)
	}
}

// produceSealed produces n records of about 200 bytes in batches of 4
// through b, so that the topic's range rolls several segments, and
// answers the values in order.
func produceSealed(t *testing.T, b *broker.Broker, topic string, n int) []string {
	t.Helper()
	var want []string
	pad := string(bytes.Repeat([]byte("x"), 200))
	for i := 0; i < n; i += 4 {
		var recs []broker.Record
		for j := i; j < min(i+4, n); j++ {
			v := strconv.Itoa(j) + pad
			recs = append(recs, rec("k", v))
			want = append(want, v)
		}
		eventually(t, 20*time.Second, fmt.Sprintf("produce %d", i), func() error {
			_, err := b.Produce(t.Context(), topic, recs)
			return err
		})
	}
	return want
}

// sealedSegments lists the topic's sealed segments as b sees them.
// victimOf picks the node to lose: a holder of the first sealed segment
// other than node 1 (which the tests produce through), and the sealed
// segments it holds.
func victimOf(sealed []broker.SegmentDescription) (victim string, held []uint64) {
	for _, name := range sealed[0].Replicas {
		if name != "node-1" {
			victim = name
			break
		}
	}
	for _, s := range sealed {
		if slices.Contains(s.Replicas, victim) {
			held = append(held, s.ID)
		}
	}
	return victim, held
}

func sealedSegments(t testing.TB, b *broker.Broker, topic string) []broker.SegmentDescription {
	t.Helper()
	d, err := b.DescribeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []broker.SegmentDescription
	for _, r := range d.Ranges {
		for _, s := range r.Segments {
			if !s.Active {
				out = append(out, s)
			}
		}
	}
	return out
}

func (tc *testCluster) node(name string) *clusterNode {
	for _, nd := range tc.nodes {
		if "node-"+strconv.FormatUint(nd.id, 10) == name {
			return nd
		}
	}
	tc.t.Fatalf("no node %s", name)
	return nil
}

// waitCopiesWhole waits until every replica of each segment holds a copy
// that verifies whole. A produce is acknowledged once a quorum holds it,
// so the last replica may still be catching up, its file not made yet: a
// test that damages every copy waits for them first.
func (tc *testCluster) waitCopiesWhole(segs ...broker.SegmentDescription) {
	tc.t.Helper()
	eventually(tc.t, 30*time.Second, "every copy whole", func() error {
		for _, s := range segs {
			if err := tc.copiesWhole(s); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkCopiesWhole verifies every replica's copy of seg against its
// seal and against each other, byte for byte.
func (tc *testCluster) checkCopiesWhole(seg broker.SegmentDescription) {
	tc.t.Helper()
	var first []byte
	for i, name := range seg.Replicas {
		nd := tc.node(name)
		v, err := nd.b.VerifyLocalCopy(seg.ID)
		if err != nil || !v.Whole() {
			tc.t.Fatalf("segment %d on %s: %v %v", seg.ID, name, v, err)
		}
		got, err := nd.b.LocalCopyBytes(seg.ID)
		if err != nil {
			tc.t.Fatalf("segment %d on %s: %v", seg.ID, name, err)
		}
		if i == 0 {
			first = got
		} else if !bytes.Equal(got, first) {
			tc.t.Fatalf("segment %d: %s's copy differs from %s's", seg.ID, name, seg.Replicas[0])
		}
	}
}

// wholeSealed waits for a sealed segment of topic, as b sees it, whose
// three listed copies all verify whole, and answers the first. A seal
// waits for a quorum only, so a copy may stop short of it until a heal
// fills it (docs/operations.md): a test that needs three whole copies
// to begin with picks such a segment rather than the first sealed one.
func (tc *testCluster) wholeSealed(b *broker.Broker, topic string) broker.SegmentDescription {
	tc.t.Helper()
	var seg broker.SegmentDescription
	eventually(tc.t, 20*time.Second, "a sealed segment with three whole copies", func() error {
		errs := []error{fmt.Errorf("no sealed segment of %s has three whole copies", topic)}
		for _, s := range sealedSegments(tc.t, b, topic) {
			if len(s.Replicas) != 3 {
				errs = append(errs, fmt.Errorf("segment %d has replicas %v, want three", s.ID, s.Replicas))
				continue
			}
			err := tc.copiesWhole(s)
			if err == nil {
				seg = s
				return nil
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
	return seg
}

// checkRead reads the whole topic through b and compares it with want.
func checkRead(t *testing.T, b *broker.Broker, topic string, want []string) {
	t.Helper()
	if got := values(readAll(t, b, topic, len(want))); !slices.Equal(got, want) {
		t.Fatalf("read %d records that differ from the %d produced", len(got), len(want))
	}
}

func TestClusterHealsTheSegmentsOfADeadNode(t *testing.T) {
	tc := startHealCluster(t, 4, 2<<10, broker.HealConfig{DeadAfter: time.Second, Interval: 100 * time.Millisecond, ScrubInterval: time.Hour})
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "heal", 1)
	want := produceSealed(t, n1.b, "heal", 60)
	sealed := sealedSegments(t, n1.b, "heal")
	if len(sealed) < 2 {
		t.Fatalf("%d sealed segments, want several", len(sealed))
	}
	victim, held := victimOf(sealed)
	tc.stop(tc.node(victim))

	// A copy that stopped short of its seal is healed too, after the
	// others: the list may be back at three before it is whole.
	eventually(t, 60*time.Second, "every sealed segment "+victim+" held back at three whole replicas", func() error {
		for _, s := range sealedSegments(t, n1.b, "heal") {
			if !slices.Contains(held, s.ID) {
				continue
			}
			if len(s.Replicas) != 3 || slices.Contains(s.Replicas, victim) {
				return fmt.Errorf("segment %d has replicas %v", s.ID, s.Replicas)
			}
			if err := tc.copiesWhole(s); err != nil {
				return err
			}
		}
		return nil
	})
	for _, s := range sealedSegments(t, n1.b, "heal") {
		if slices.Contains(held, s.ID) {
			tc.checkCopiesWhole(s)
		}
	}
	for _, nd := range tc.nodes {
		if nd.b != nil {
			checkRead(t, nd.b, "heal", want)
		}
	}

	// Back from the dead, the node finds its copies superseded: it
	// deletes them once the metadata confirms nothing lists them (S4).
	back := tc.node(victim)
	cfg := tc.config(back, []string{n1.gossip})
	cfg.SegmentMaxBytes = 2 << 10
	cfg.Cluster.Heal = broker.HealConfig{DeadAfter: time.Second, Interval: 100 * time.Millisecond, ScrubInterval: time.Hour}
	tc.openHeal(back, cfg)
	eventually(t, 30*time.Second, victim+"'s stale copies deleted", func() error {
		for _, id := range held {
			if back.b.HasLocalCopy(id) {
				return fmt.Errorf("%s still holds segment %d", victim, id)
			}
		}
		return nil
	})
	checkRead(t, back.b, "heal", want)
}

// flipMiddleByte flips one byte in the middle of the file at path and
// answers the file's bytes as it left them. They are read through the
// same open file, so a heal that sets the file aside meanwhile cannot
// make them another file's.
func flipMiddleByte(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil {
		t.Fatal(err)
	}
	off := st.Size() / 2
	data[off] ^= 0x40
	if _, err := f.WriteAt(data[off:off+1], off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return data
}

func TestClusterScrubberReplacesADamagedCopy(t *testing.T) {
	tc := startHealCluster(t, 4, 2<<10, broker.HealConfig{
		DeadAfter: time.Hour, Interval: 100 * time.Millisecond,
		ScrubInterval: 300 * time.Millisecond, ScrubRate: 64 << 20,
	})
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "scrub", 1)
	want := produceSealed(t, n1.b, "scrub", 40)
	seg := tc.wholeSealed(n1.b, "scrub")
	tc.checkCopiesWhole(seg)
	var bad *clusterNode
	for _, name := range seg.Replicas {
		if name != "node-1" {
			bad = tc.node(name)
			break
		}
	}
	flipMiddleByte(t, bad.b.SegmentLogPath(seg.ID))

	// Until the copy is replaced, a read through the damaged node may
	// fail, never answer other records than those produced.
	eventually(t, 60*time.Second, fmt.Sprintf("segment %d replaced off node %d", seg.ID, bad.id), func() error {
		readNeverWrong(t, bad.b, "scrub", want)
		for _, s := range sealedSegments(t, n1.b, "scrub") {
			if s.ID == seg.ID && (len(s.Replicas) != 3 || slices.Contains(s.Replicas, fmt.Sprintf("node-%d", bad.id))) {
				return fmt.Errorf("replicas %v", s.Replicas)
			}
		}
		return nil
	})
	eventually(t, 30*time.Second, "the damaged copy deleted", func() error {
		if bad.b.HasLocalCopy(seg.ID) {
			return fmt.Errorf("node %d still holds segment %d", bad.id, seg.ID)
		}
		return nil
	})
	for _, s := range sealedSegments(t, n1.b, "scrub") {
		if s.ID == seg.ID {
			tc.checkCopiesWhole(s)
		}
	}
	for _, nd := range tc.nodes {
		checkRead(t, nd.b, "scrub", want)
	}
}

// readNeverWrong reads the topic through b once from its start: an error
// is allowed (the copy refuses damaged batches), records that differ
// from want are not.
func readNeverWrong(t *testing.T, b *broker.Broker, topic string, want []string) {
	t.Helper()
	var cur *string
	var got []string
	for len(got) < len(want) {
		p, err := b.Fetch(t.Context(), broker.FetchRequest{Topic: topic, Cursor: cur, Max: 1000})
		if err != nil || len(p.Records) == 0 {
			return
		}
		got = append(got, values(p.Records)...)
		if len(got) > len(want) || !slices.Equal(got, want[:len(got)]) {
			t.Fatalf("a read through a node with a damaged copy answered records that were never produced")
		}
		cur = p.Cursor
	}
}

// With as many nodes as the factor, a damaged copy has no spare node to
// go to: its holder sets it aside and rebuilds its own copy from a healthy
// replica. The segment returns to three listed copies that verify whole,
// no read through the damaged node ever answers other records than those
// produced, and the damaged bytes are kept in quarantine, never served.
func TestClusterDamagedHolderRebuildsItsCopyWithNoSpareNode(t *testing.T) {
	tc := startHealCluster(t, 3, 2<<10, broker.HealConfig{
		DeadAfter: time.Hour, Interval: 100 * time.Millisecond,
		ScrubInterval: 300 * time.Millisecond, ScrubRate: 64 << 20,
	})
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "rebuild", 1)
	want := produceSealed(t, n1.b, "rebuild", 40)
	seg := tc.wholeSealed(n1.b, "rebuild")
	bad := tc.node(seg.Replicas[len(seg.Replicas)-1])
	if got := bad.b.QuarantinedCopies(seg.ID); len(got) != 0 {
		t.Fatalf("node %d has quarantined copies %v before any damage", bad.id, got)
	}
	damaged := flipMiddleByte(t, bad.b.SegmentLogPath(seg.ID))

	eventually(t, 60*time.Second, fmt.Sprintf("node %d's copy of segment %d rebuilt", bad.id, seg.ID), func() error {
		for _, nd := range tc.nodes {
			readNeverWrong(t, nd.b, "rebuild", want)
		}
		if len(bad.b.QuarantinedCopies(seg.ID)) == 0 {
			return fmt.Errorf("node %d set no copy of segment %d aside", bad.id, seg.ID)
		}
		if d := damagedOn(n1.b.ClusterStatus().Heal, bad.id); slices.Contains(d, seg.ID) {
			return fmt.Errorf("node %d's copy still reported damaged", bad.id)
		}
		for _, s := range sealedSegments(t, n1.b, "rebuild") {
			if s.ID == seg.ID && (len(s.Replicas) != 3 || !slices.Contains(s.Replicas, fmt.Sprintf("node-%d", bad.id))) {
				return fmt.Errorf("replicas %v", s.Replicas)
			}
		}
		return tc.copiesWhole(seg)
	})
	for _, s := range sealedSegments(t, n1.b, "rebuild") {
		if s.ID == seg.ID {
			tc.checkCopiesWhole(s)
		}
	}
	for _, nd := range tc.nodes {
		checkRead(t, nd.b, "rebuild", want)
	}
	kept := bad.b.QuarantinedCopies(seg.ID)
	if len(kept) != 1 {
		t.Fatalf("quarantined copies %v, want the one damaged copy", kept)
	}
	aside, err := os.ReadFile(kept[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(aside, damaged) {
		t.Fatalf("the file set aside (%d bytes) is not the damaged copy (%d bytes)", len(aside), len(damaged))
	}
	now, err := os.ReadFile(bad.b.SegmentLogPath(seg.ID))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(now, damaged) {
		t.Fatalf("node %d serves the damaged bytes as its copy of segment %d", bad.id, seg.ID)
	}
}

// With every copy of a segment damaged there is no healthy source: the
// copies are kept (S4), reported and never served, and the list is left
// as it was. A read through any node may fail; it never
// answers other records than those produced.
func TestClusterDamagedCopiesWithNoHealthySourceAreKeptAndNotServed(t *testing.T) {
	tc := startHealCluster(t, 3, 2<<10, broker.HealConfig{
		DeadAfter: time.Hour, Interval: 100 * time.Millisecond,
		ScrubInterval: 300 * time.Millisecond, ScrubRate: 64 << 20,
	})
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "kept", 1)
	want := produceSealed(t, n1.b, "kept", 40)
	// A produce is acknowledged once a quorum holds it: the last replica
	// may still be catching up, its file not made yet. Every copy is whole
	// before each is damaged (the first sealed segment was taken as it
	// was, and its third copy's file could be missing).
	seg := tc.wholeSealed(n1.b, "kept")
	damaged := map[uint64][]byte{}
	for _, name := range seg.Replicas {
		nd := tc.node(name)
		damaged[nd.id] = flipMiddleByte(t, nd.b.SegmentLogPath(seg.ID))
	}

	eventually(t, 30*time.Second, "every copy reported damaged and the segment reported without a healthy source", func() error {
		for _, nd := range tc.nodes {
			readNeverWrong(t, nd.b, "kept", want)
		}
		for _, nd := range tc.nodes {
			h := nd.b.ClusterStatus().Heal
			for _, name := range seg.Replicas {
				if id := tc.node(name).id; !slices.Contains(damagedOn(h, id), seg.ID) {
					return fmt.Errorf("node %d: node %d's copy not reported damaged: %+v", nd.id, id, h)
				}
			}
			if !slices.ContainsFunc(h.Problems, func(p broker.HealProblem) bool {
				return p.Segment == seg.ID && p.Problem == "no healthy source"
			}) {
				return fmt.Errorf("node %d's problems %+v", nd.id, h.Problems)
			}
		}
		return nil
	})
	for _, nd := range tc.nodes {
		readNeverWrong(t, nd.b, "kept", want)
		// A rebuild begun before its source was found damaged ends;
		// every node's plan now has no source, so none begins.
		waitFillDone(t, nd, seg.ID)
	}
	for _, name := range seg.Replicas {
		nd := tc.node(name)
		if !nd.b.HasLocalCopy(seg.ID) {
			t.Fatalf("node %d deleted its damaged copy of segment %d, which nothing replaced", nd.id, seg.ID)
		}
		// A holder marked damaged before the others were found damaged
		// may have started a rebuild from one of them and set its copy
		// aside: its bytes must still be on the node.
		if !keepsBytes(t, nd, seg.ID, damaged[nd.id]) {
			t.Fatalf("node %d no longer holds its damaged copy of segment %d, live or set aside", nd.id, seg.ID)
		}
		if v, err := nd.b.VerifyLocalCopy(seg.ID); err != nil || v.Whole() {
			t.Fatalf("node %d's damaged copy verifies %v (%v)", nd.id, v, err)
		}
	}
	for _, s := range sealedSegments(t, n1.b, "kept") {
		if s.ID == seg.ID && !slices.Equal(s.Replicas, seg.Replicas) {
			t.Fatalf("replicas %v, want %v unchanged", s.Replicas, seg.Replicas)
		}
	}
}

// keepsBytes reports whether nd holds want as its copy of segment id or
// as a copy it set aside. It looks at the copy in service first: one set
// aside after that look is in the quarantine by the time it looks there.
func keepsBytes(t *testing.T, nd *clusterNode, id uint64, want []byte) bool {
	t.Helper()
	for _, path := range append([]string{nd.b.SegmentLogPath(id)}, nd.b.QuarantinedCopies(id)...) {
		got, err := os.ReadFile(path)
		if err == nil && bytes.Equal(got, want) {
			return true
		}
	}
	return false
}
