package metadata

import (
	"bytes"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// TestProperties applies random command sequences and checks, after every
// step, the invariants through the public accessors (and CheckInvariants),
// that a refused command changed nothing, determinism against a twin fed the
// same commands, and that Snapshot/Restore round-trips. Every few steps the
// twin is replaced by a restored copy, so rebuilt indexes keep being
// exercised by later commands.
func TestProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		st, twin := New(), New()
		steps := rapid.IntRange(1, 120).Draw(t, "steps")
		for i := range steps {
			cmd := genCommand(t, st, int64(i))
			before := snap(t, st)
			res := st.Apply(cmd)
			twinRes := twin.Apply(cmd)
			if !reflect.DeepEqual(res, twinRes) {
				t.Fatalf("step %d %s: results differ: %+v vs %+v", i, cmd.Kind, res, twinRes)
			}
			after := snap(t, st)
			if res.Err != nil && !bytes.Equal(before, after) {
				t.Fatalf("step %d %s: refused (%v) but the state changed", i, cmd.Kind, res.Err)
			}
			if !bytes.Equal(after, snap(t, twin)) {
				t.Fatalf("step %d %s: twin diverged", i, cmd.Kind)
			}
			checkModel(t, st)
			restored := roundTrip(t, st)
			if i%7 == 0 {
				twin = restored
			}
		}
	})
}

func snap(t *rapid.T, st *State) []byte {
	b, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func roundTrip(t *rapid.T, st *State) *State {
	b := snap(t, st)
	r, err := Restore(b)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if !bytes.Equal(b, snap(t, r)) {
		t.Fatal("Snapshot(Restore(x)) != x")
	}
	if !bytes.Equal(b, snap(t, st.Clone())) {
		t.Fatal("Clone differs")
	}
	return r
}

// checkModel checks the invariants from outside, with accessors only.
func checkModel(t *rapid.T, st *State) {
	if err := st.CheckInvariants(); err != nil {
		t.Fatalf("CheckInvariants: %v", err)
	}
	for _, tp := range st.Topics() {
		checkTiling(t, st, tp)
		pos := make(map[uint64]int)
		for _, r := range st.TopicRanges(tp.ID) {
			checkLineageOrder(t, st, r, pos)
			checkSegments(t, st, r)
			checkSpans(t, r)
		}
		for _, g := range st.Groups(tp.ID) {
			if _, _, ok := st.GroupSkipped(tp.Name, g); !ok {
				t.Fatalf("topic %s: group %s has a position but no counter", tp.Name, g)
			}
		}
	}
	for _, p := range st.Policies() {
		if fs, err := ValidatePolicy(p.Fields); err != nil || len(fs) != len(p.Fields) {
			t.Fatalf("policy %s stored invalid: %v", p.Name, err)
		}
	}
}

// checkSpans: the spans lie below the range's live segments' data and
// DeletedBetween over everything is the sum of the skip spans' records.
func checkSpans(t *rapid.T, r Range) {
	var sum uint64
	bound := false
	for _, sp := range r.Deleted {
		if sp.Skip {
			sum += sp.Records
			bound = bound || sp.Bound
		}
	}
	if n, b := r.DeletedBetween(0, r.NextOffset); n != sum || b != bound {
		t.Fatalf("range %d: DeletedBetween(0, next) = %d,%v, spans say %d,%v", r.ID, n, b, sum, bound)
	}
	if len(r.Deleted) > 0 && r.Deleted[len(r.Deleted)-1].End > r.NextOffset {
		t.Fatalf("range %d: a span ends past next offset", r.ID)
	}
}

func checkTiling(t *rapid.T, st *State, tp Topic) {
	var next uint64
	for _, r := range st.ActiveRanges(tp.ID) {
		if !r.Active || r.Start != next || !isPow2(r.Size()) || r.Start%r.Size() != 0 {
			t.Fatalf("topic %s: range %d [%d,%d) breaks the tiling at %d", tp.Name, r.ID, r.Start, r.End, next)
		}
		for _, pos := range []uint64{r.Start, r.End - 1, r.Start + r.Size()/2} {
			if got, ok := st.ActiveRangeFor(tp.ID, pos); !ok || got.ID != r.ID {
				t.Fatalf("ActiveRangeFor(%d) = %d, want %d", pos, got.ID, r.ID)
			}
		}
		next = r.End
	}
	if next != 1<<tp.Bits {
		t.Fatalf("topic %s: active ranges end at %d", tp.Name, next)
	}
}

// checkLineageOrder: each ancestor is listed after all of its own
// ancestors, and IsAncestor agrees. pos is scratch space.
func checkLineageOrder(t *rapid.T, st *State, r Range, pos map[uint64]int) {
	clear(pos)
	for i, a := range r.Lineage {
		if !st.IsAncestor(a, r.ID) || st.IsAncestor(r.ID, a) {
			t.Fatalf("IsAncestor(%d, %d) disagrees with the lineage", a, r.ID)
		}
		ar, _ := st.Range(a)
		for _, aa := range ar.Lineage {
			if j, ok := pos[aa]; !ok || j >= i {
				t.Fatalf("range %d: ancestor %d listed before its ancestor %d", r.ID, a, aa)
			}
		}
		pos[a] = i
	}
	for _, p := range r.Parents {
		if _, ok := pos[p]; !ok {
			t.Fatalf("range %d: parent %d not in lineage", r.ID, p)
		}
	}
}

func checkSegments(t *rapid.T, st *State, r Range) {
	segs := st.RangeSegments(r.ID)
	active := 0
	var end uint64
	for i, s := range segs {
		if s.Base < end || s.End < s.Base {
			t.Fatalf("range %d: segment %d [%d,%d) overlaps the previous end %d", r.ID, s.ID, s.Base, s.End, end)
		}
		if s.Active {
			active++
			if i != len(segs)-1 || !r.Active {
				t.Fatalf("range %d: active segment %d not last or range sealed", r.ID, s.ID)
			}
		}
		end = s.End
	}
	head, ok := st.ActiveSegment(r.ID)
	if active > 1 || ok != (active == 1) || ok && head.ID != segs[len(segs)-1].ID {
		t.Fatalf("range %d: %d active segments, head %v", r.ID, active, ok)
	}
}

// genCommand draws a command, mostly aimed at things that exist so that
// sequences get deep (splits of splits, merges of those), sometimes at
// things that do not, so every refusal is exercised too.
func genCommand(t *rapid.T, st *State, now int64) Command {
	c := Command{V: Version, Now: now}
	kind := rapid.IntRange(0, 18).Draw(t, "kind")
	if kind > 13 {
		genRetention(t, st, &c, kind)
		c.Quota = genQuota(t)
		return c
	}
	switch kind {
	case 0:
		genCreate(t, &c)
	case 1, 2:
		genOpen(t, st, &c)
	case 3, 4:
		genSeal(t, st, &c)
	case 5:
		c.Kind, c.Segment = KindDeleteSegment, pickSegment(t, st)
	case 6, 7:
		c.Kind, c.Range = KindSplitRange, pickRange(t, st)
	case 8, 9:
		genMerge(t, st, &c)
	case 10:
		genCommit(t, st, &c)
	case 11:
		c.Kind, c.Topic = KindDeleteTopic, rapid.SampledFrom(topicNames).Draw(t, "topic")
	case 12:
		genAccess(t, &c)
	default:
		genUnknown(t, &c)
	}
	c.Quota = genQuota(t)
	return c
}

// genQuota attaches small limits to some commands, so quota refusals meet
// every kind of state.
func genQuota(t *rapid.T) *Quota {
	if rapid.IntRange(0, 2).Draw(t, "quota") != 0 {
		return nil
	}
	limit := func(name string) int { return rapid.IntRange(0, 12).Draw(t, name) }
	return &Quota{Topics: limit("q.topics"), Ranges: limit("q.ranges"), OwnerTopics: limit("q.owner_topics"),
		OwnerRanges: limit("q.owner_ranges"), GroupsPerTopic: limit("q.groups")}
}

var topicNames = []string{"a", "b", "c"}

func genCreate(t *rapid.T, c *Command) {
	c.Kind = KindCreateTopic
	c.Topic = rapid.SampledFrom(append(topicNames, "", "..")).Draw(t, "topic")
	c.Bits = uint8(rapid.IntRange(0, 6).Draw(t, "bits"))
	c.Ranges = rapid.SampledFrom([]int{0, 1, 2, 4, 3, 64}).Draw(t, "ranges")
	c.Owner = rapid.SampledFrom([]string{"", "u", "v"}).Draw(t, "owner")
}

// pickRange returns an existing range id most of the time.
func pickRange(t *rapid.T, st *State) uint64 {
	if st.lastRange == 0 || rapid.IntRange(0, 9).Draw(t, "stray") == 0 {
		return rapid.Uint64Range(0, st.lastRange+2).Draw(t, "range")
	}
	// Prefer active ranges: they are where splits, merges and opens succeed.
	var ids []uint64
	for _, tp := range st.Topics() {
		for _, r := range st.ActiveRanges(tp.ID) {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return rapid.Uint64Range(1, st.lastRange).Draw(t, "range")
	}
	return rapid.SampledFrom(ids).Draw(t, "range")
}

// pickSegment returns an active segment most of the time.
func pickSegment(t *rapid.T, st *State) uint64 {
	var ids []uint64
	for _, tp := range st.Topics() {
		for _, r := range st.ActiveRanges(tp.ID) {
			if seg, ok := st.ActiveSegment(r.ID); ok {
				ids = append(ids, seg.ID)
			}
		}
	}
	if len(ids) == 0 || rapid.IntRange(0, 3).Draw(t, "stray") == 0 {
		return rapid.Uint64Range(0, st.lastSegment+1).Draw(t, "segment")
	}
	return rapid.SampledFrom(ids).Draw(t, "segment")
}

func genOpen(t *rapid.T, st *State, c *Command) {
	c.Kind, c.Range = KindOpenSegment, pickRange(t, st)
	r, _ := st.Range(c.Range)
	c.Base = r.NextOffset + rapid.Uint64Range(0, 3).Draw(t, "gap")
	if r.NextOffset > 0 && rapid.IntRange(0, 9).Draw(t, "overlap") == 0 {
		c.Base = r.NextOffset - 1
	}
	c.Replicas = rapid.SampledFrom([][]string{nil, {"n1"}, {"n1", "n2", "n3"}, {"n1", "n1"}}).Draw(t, "replicas")
}

func genSeal(t *rapid.T, st *State, c *Command) {
	c.Kind, c.Segment = KindSealSegment, pickSegment(t, st)
	seg, _ := st.Segment(c.Segment)
	n := rapid.Uint64Range(0, 50).Draw(t, "len")
	c.End = seg.Base + n
	c.Records = rapid.Uint64Range(0, n+1).Draw(t, "records")
	c.Bytes = int64(c.Records) * 10
	if rapid.IntRange(0, 9).Draw(t, "short") == 0 && seg.Base > 0 {
		c.End = seg.Base - 1
	}
}

func genMerge(t *rapid.T, st *State, c *Command) {
	c.Kind, c.Range = KindMergeRanges, pickRange(t, st)
	c.RangeB = pickRange(t, st)
	r, ok := st.Range(c.Range)
	if !ok || !r.Active || rapid.IntRange(0, 3).Draw(t, "random_b") == 0 {
		return
	}
	// Aim at the buddy, when it exists as one active range.
	buddyStart := r.Start ^ r.Size()
	if b, ok := st.ActiveRangeFor(r.Topic, buddyStart); ok && b.Start == buddyStart {
		c.RangeB = b.ID
	}
}

func genCommit(t *rapid.T, st *State, c *Command) {
	c.Kind = KindCommitOffsets
	c.Group = rapid.SampledFrom([]string{"g1", "g2", ""}).Draw(t, "group")
	c.Topic = rapid.SampledFrom(topicNames).Draw(t, "topic")
	tp, ok := st.Topic(c.Topic)
	if !ok {
		return
	}
	n := rapid.IntRange(0, 4).Draw(t, "entries")
	for range n {
		bits := uint8(rapid.IntRange(0, int(tp.Bits)+1).Draw(t, "slice_bits"))
		start := rapid.Uint64Range(0, 1<<tp.Bits).Draw(t, "slice_start") &^ (1<<bits - 1)
		c.Entries = append(c.Entries, GroupEntry{
			Source:     rapid.SampledFrom(tp.Ranges).Draw(t, "source"),
			SliceStart: start, SliceBits: bits,
			Offset: rapid.Uint64Range(0, 100).Draw(t, "offset"),
		})
	}
}

func genAccess(t *rapid.T, c *Command) {
	c.Kind = rapid.SampledFrom([]string{KindCreateUser, KindDeleteUser, KindSetPassword,
		KindGrantACL, KindRevokeACL, KindInitCluster}).Draw(t, "access")
	c.User = rapid.SampledFrom([]string{"u1", "u2"}).Draw(t, "user")
	c.PasswordHash = rapid.SampledFrom([]string{"h", ""}).Draw(t, "hash")
	c.Perms = rapid.SampledFrom([][]string{{PermAdmin}, {PermConsume, PermProduce}, nil}).Draw(t, "perms")
	c.Operation = rapid.SampledFrom([]string{OpProduce, OpConsume, "x"}).Draw(t, "op")
	c.Pattern = rapid.SampledFrom([]string{"a", "a*", "*", "a b"}).Draw(t, "pattern")
	c.ClusterSecret = rapid.SampledFrom([][]byte{[]byte("0123456789abcdef"), nil}).Draw(t, "secret")
}

func genUnknown(t *rapid.T, c *Command) {
	c.Kind = rapid.SampledFrom([]string{"bogus", KindCreateTopic, KindSplitRange}).Draw(t, "kind_unknown")
	c.V = rapid.SampledFrom([]int{0, 2, Version}).Draw(t, "v")
	if c.V == Version {
		c.Kind = "bogus"
	}
	c.Topic, c.Range = "a", 1
}

var policyNames = []string{"p", "q", ""}

// genRetention draws the policy, retention and seek commands.
func genRetention(t *rapid.T, st *State, c *Command, kind int) {
	c.Policy = rapid.SampledFrom(policyNames).Draw(t, "policy")
	switch kind {
	case 14:
		c.Kind = KindDefinePolicy
		c.PolicyFields = map[string]PolicyValue{}
		for range rapid.IntRange(0, 3).Draw(t, "fields") {
			name := rapid.SampledFrom([]string{FieldMaxAge, "retention.max_bytes", FieldReplicas,
				FieldPlacement, FieldSpreadBy, "bogus"}).Draw(t, "field")
			c.PolicyFields[name] = rapid.SampledFrom([]PolicyValue{{Off: true}, {Int: 0}, {Int: 3},
				{Int: -1}, {Str: "hard", IsStr: true}}).Draw(t, "value")
		}
	case 15:
		c.Kind, c.Force = KindDeletePolicy, rapid.Bool().Draw(t, "force")
	case 16:
		c.Kind = rapid.SampledFrom([]string{KindBindTopicPolicy, KindCreateTopic}).Draw(t, "bind_or_create")
		c.Topic = rapid.SampledFrom(topicNames).Draw(t, "topic")
	case 17:
		c.Kind, c.Segment = KindDeleteSegment, pickSealed(t, st)
		c.Reason = rapid.SampledFrom([]string{ReasonOperator, ReasonRetention, ReasonTTL, "x"}).Draw(t, "reason")
	default:
		genCommit(t, st, c)
		c.Kind = rapid.SampledFrom([]string{KindCommitOffsets, KindSetOffsets, KindDeleteGroup}).Draw(t, "group_kind")
	}
}

// pickSealed returns a sealed segment, most often the first of its range.
func pickSealed(t *rapid.T, st *State) uint64 {
	var firsts, all []uint64
	for _, tp := range st.Topics() {
		for _, r := range st.TopicRanges(tp.ID) {
			for i, seg := range st.RangeSegments(r.ID) {
				if seg.Active {
					continue
				}
				all = append(all, seg.ID)
				if i == 0 {
					firsts = append(firsts, seg.ID)
				}
			}
		}
	}
	switch {
	case len(all) == 0:
		return rapid.Uint64Range(0, st.lastSegment+1).Draw(t, "segment")
	case len(firsts) > 0 && rapid.IntRange(0, 2).Draw(t, "first") > 0:
		return rapid.SampledFrom(firsts).Draw(t, "segment")
	}
	return rapid.SampledFrom(all).Draw(t, "segment")
}
