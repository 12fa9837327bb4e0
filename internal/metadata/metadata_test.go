package metadata

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func apply(t *testing.T, st *State, c Command) Result {
	t.Helper()
	c.V = Version
	res := st.Apply(c)
	if err := st.CheckInvariants(); err != nil {
		t.Fatalf("%s: %v", c.Kind, err)
	}
	return res
}

func wantErr(t *testing.T, res Result, want error) {
	t.Helper()
	if !errors.Is(res.Err, want) {
		t.Fatalf("got %v, want %v", res.Err, want)
	}
}

func TestTopicNameLength(t *testing.T) {
	st := New()
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: strings.Repeat("a", 250)}), ErrInvalidTopicName)
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: strings.Repeat("a", 249)}), nil)
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: "é"}), ErrInvalidTopicName)
}

func TestInitialRanges(t *testing.T) {
	for _, tc := range []struct {
		bits  uint8
		n     int
		want  error
		count int
	}{
		{10, 1024, nil, 1024},
		{16, 1024, nil, 1024},
		{32, 1024, nil, 1024},
		{9, 1024, ErrInvalidRangeCount, 0},
		{16, 2048, ErrInvalidRangeCount, 0},
		{1, 2, nil, 2},
		{0, 0, nil, 1},
	} {
		st := New()
		res := apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Bits: tc.bits, Ranges: tc.n})
		wantErr(t, res, tc.want)
		if len(res.RangeIDs) != tc.count {
			t.Fatalf("bits %d ranges %d: %d ids, want %d", tc.bits, tc.n, len(res.RangeIDs), tc.count)
		}
	}
}

func TestGroupEntryCap(t *testing.T) {
	st := New()
	apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Bits: 18})
	entries := make([]GroupEntry, MaxGroupEntries)
	for i := range entries {
		entries[i] = GroupEntry{Source: 1, SliceStart: uint64(i), Offset: 1}
	}
	commit := Command{Kind: KindCommitOffsets, Group: "g", Topic: "t", Entries: entries}
	wantErr(t, apply(t, st, commit), nil)
	// One more distinct slice overflows the stored position.
	commit.Entries = []GroupEntry{{Source: 1, SliceStart: MaxGroupEntries, Offset: 1}}
	wantErr(t, apply(t, st, commit), ErrInvalidCommand)
	// A slice covering all of them replaces them.
	commit.Entries = []GroupEntry{{Source: 1, SliceBits: 18, Offset: 9}}
	wantErr(t, apply(t, st, commit), nil)
	if got := st.GroupEntries("g", 1); len(got) != 1 || got[0].Offset != 9 {
		t.Fatalf("entries after a covering commit: %v", got)
	}
	commit.Entries = make([]GroupEntry, MaxGroupEntries+1)
	wantErr(t, apply(t, st, commit), ErrInvalidCommand)
}

// TestTopicHeaderIsTopicWithoutRanges: TopicHeader and TopicHeaderByID
// answer what Topic does but the range list, and nothing for an unknown
// name or id.
func TestTopicHeaderIsTopicWithoutRanges(t *testing.T) {
	st := New()
	apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Bits: 4})
	apply(t, st, Command{Kind: KindSplitRange, Range: 1})
	full, _ := st.Topic("t")
	meta, ok := st.TopicHeader("t")
	if !ok || meta.Ranges != nil || len(full.Ranges) != 3 {
		t.Fatalf("TopicHeader = %+v, %v (Topic: %+v)", meta, ok, full)
	}
	full.Ranges = nil
	if !reflect.DeepEqual(meta, full) {
		t.Fatalf("TopicHeader = %+v, want %+v", meta, full)
	}
	if _, ok := st.TopicHeader("nope"); ok {
		t.Fatal("TopicHeader found a topic that does not exist")
	}
	byID, ok := st.TopicHeaderByID(full.ID)
	if !ok || !reflect.DeepEqual(byID, meta) {
		t.Fatalf("TopicHeaderByID = %+v, %v, want %+v", byID, ok, meta)
	}
	if _, ok := st.TopicHeaderByID(full.ID + 1); ok {
		t.Fatal("TopicHeaderByID found a topic that does not exist")
	}
}

// TestAccessorsReturnCopies: mutating what an accessor returned must not
// reach the state.
func TestAccessorsReturnCopies(t *testing.T) {
	st := New()
	apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Bits: 4})
	apply(t, st, Command{Kind: KindSplitRange, Range: 1})
	apply(t, st, Command{Kind: KindOpenSegment, Range: 2, Replicas: []string{"a"}})
	apply(t, st, Command{Kind: KindCommitOffsets, Group: "g", Topic: "t", Entries: []GroupEntry{{Source: 2}}})
	apply(t, st, Command{Kind: KindCreateUser, User: "u", PasswordHash: "h", Perms: []string{PermAdmin}})
	apply(t, st, Command{Kind: KindInitCluster, ClusterSecret: []byte("0123456789abcdef")})
	before, _ := st.Snapshot()

	tp, _ := st.Topic("t")
	tp.Ranges[0] = 99
	r, _ := st.Range(2)
	r.Lineage[0], r.Parents[0] = 99, 99
	st.ActiveRanges(1)[0].Lineage[0] = 99
	seg, _ := st.ActiveSegment(2)
	seg.Replicas[0] = "z"
	st.RangeSegments(2)[0].Replicas[0] = "z"
	st.GroupEntries("g", 1)[0].Offset = 99
	u, _ := st.User("u")
	u.Perms[0] = "x"
	st.ClusterSecret()[0] = 'x'

	after, _ := st.Snapshot()
	if !bytes.Equal(before, after) {
		t.Fatal("an accessor leaked the state's memory")
	}
}

func TestSealResultIsACopy(t *testing.T) {
	st := New()
	apply(t, st, Command{Kind: KindCreateTopic, Topic: "t"})
	apply(t, st, Command{Kind: KindOpenSegment, Range: 1, Replicas: []string{"a"}})
	res := apply(t, st, Command{Kind: KindSealSegment, Segment: 1, End: 3, Records: 3})
	res.Sealed.Replicas[0] = "z"
	again := apply(t, st, Command{Kind: KindSealSegment, Segment: 1, End: 5})
	wantErr(t, again, ErrAlreadySealed)
	if again.Sealed == nil || again.Sealed.End != 3 || again.Sealed.Replicas[0] != "a" {
		t.Fatalf("already_sealed result: %+v", again.Sealed)
	}
}

func TestRestoreRefuses(t *testing.T) {
	st := New()
	apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Bits: 4, Ranges: 2})
	good, _ := st.Snapshot()
	for name, b := range map[string]string{
		"garbage":        "{",
		"trailing":       string(good) + "{}",
		"unknown field":  strings.Replace(string(good), `"format":1`, `"format":1,"new":2`, 1),
		"format":         strings.Replace(string(good), `"format":1`, `"format":2`, 1),
		"overlap":        strings.Replace(string(good), `"start":8`, `"start":4`, 1),
		"counter behind": strings.Replace(string(good), `"last_range":2`, `"last_range":1`, 1),
		"lost range":     strings.Replace(string(good), `"ranges":[1,2]`, `"ranges":[1]`, 1),
	} {
		if b == string(good) {
			t.Fatalf("%s: the edit did not apply", name)
		}
		if _, err := Restore([]byte(b)); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: Restore = %v, want ErrBadSnapshot", name, err)
		}
	}
	if _, err := Restore(good); err != nil {
		t.Fatal(err)
	}
}

func TestErrorsAreWireReasons(t *testing.T) {
	re := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	seen := make(map[Error]bool)
	for _, e := range Errors {
		if !re.MatchString(e.Error()) || seen[e] {
			t.Errorf("reason %q: not snake_case or listed twice", e)
		}
		seen[e] = true
	}
	if len(seen) != 31 {
		t.Errorf("%d reasons, want 31", len(seen))
	}
}

// FuzzApply: any command against a populated state keeps the invariants,
// and a refused one changes nothing.
func FuzzApply(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"k":"create_topic","topic":"n","bits":5,"ranges":4}`,
		`{"v":1,"k":"split_range","range":2}`,
		`{"v":1,"k":"create_topic","topic":"o","owner":"u","ranges":2,"quota":{"topics":2,"owner_ranges":2}}`,
		`{"v":1,"k":"split_range","range":2,"quota":{"ranges":5}}`,
		`{"v":1,"k":"commit_offsets","group":"h","topic":"t","quota":{"groups_per_topic":1}}`,
		`{"v":1,"k":"merge_ranges","range":3,"range_b":4}`,
		`{"v":1,"k":"hold_range","range":3,"until":5000,"now":1000}`,
		`{"v":1,"k":"open_segment","range":1,"base":7,"replicas":["a","b"]}`,
		`{"v":1,"k":"seal_segment","segment":1,"end":9,"records":2}`,
		`{"v":1,"k":"set_segment_replicas","segment":1,"expect":[],"replicas":["a","b"]}`,
		`{"v":1,"k":"mark_copy_damaged","segment":1,"node":"a"}`,
		`{"v":1,"k":"commit_offsets","group":"g","topic":"t","entries":[{"source":1,"slice_start":0,"slice_bits":2,"offset":5}]}`,
		`{"v":1,"k":"grant_acl","user":"u","operation":"produce","pattern":"t*"}`,
		`{"v":1,"k":"delete_topic","topic":"t"}`,
		`{"v":1,"k":"define_policy","policy":"p","policy_fields":{"retention.max_age_ms":{"int":5},"spread_by":{"off":true}}}`,
		`{"v":1,"k":"delete_policy","policy":"p","force":true}`,
		`{"v":1,"k":"bind_topic_policy","topic":"t","policy":"p"}`,
		`{"v":1,"k":"delete_segment","segment":1,"reason":"retention"}`,
		`{"v":3,"k":"nope"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Command
		if json.Unmarshal(b, &c) != nil {
			return
		}
		st := New()
		apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Bits: 3, Ranges: 4})
		apply(t, st, Command{Kind: KindOpenSegment, Range: 1})
		apply(t, st, Command{Kind: KindCreateUser, User: "u", PasswordHash: "h", Perms: []string{PermProduce}})
		before, _ := st.Snapshot()
		res := st.Apply(c)
		if err := st.CheckInvariants(); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		after, _ := st.Snapshot()
		if res.Err != nil && !bytes.Equal(before, after) {
			t.Fatalf("%s: refused but changed the state", b)
		}
	})
}

// FuzzRestore: Restore never panics and only accepts consistent states.
func FuzzRestore(f *testing.F) {
	st := New()
	st.Apply(Command{V: Version, Kind: KindCreateTopic, Topic: "t", Bits: 3, Ranges: 2})
	st.Apply(Command{V: Version, Kind: KindSplitRange, Range: 1})
	st.Apply(Command{V: Version, Kind: KindOpenSegment, Range: 2})
	good, _ := st.Snapshot()
	f.Add(good)
	f.Add([]byte(`{"format":1,"topics":[{"id":1,"name":"x","bits":70,"ranges":[]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Restore(b)
		if err != nil {
			return
		}
		if err := s.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		again, _ := s.Snapshot()
		if _, err := Restore(again); err != nil {
			t.Fatalf("re-restore: %v", err)
		}
	})
}

// TestOpenSegmentMinID: an id floor given by the node raises the counter,
// a lower floor changes nothing, ids never repeat, and a refused command
// leaves the counter alone.
func TestOpenSegmentMinID(t *testing.T) {
	st := New()
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Ranges: 2}), nil)
	open := func(rng, minID uint64) Result {
		return apply(t, st, Command{Kind: KindOpenSegment, Range: rng, MinID: minID})
	}
	seal := func(seg, end uint64) {
		wantErr(t, apply(t, st, Command{Kind: KindSealSegment, Segment: seg, End: end}), nil)
	}
	if r := open(1, 0); r.Err != nil || r.SegmentID != 1 {
		t.Fatalf("first open: %+v", r)
	}
	seal(1, 0)
	if r := open(1, 7); r.Err != nil || r.SegmentID != 7 {
		t.Fatalf("open with floor 7: %+v", r)
	}
	// A refused open (range 1 has an active segment) must not move the counter.
	wantErr(t, open(1, 100), ErrActiveSegmentExists)
	wantErr(t, open(2, MaxSegmentID+1), ErrInvalidCommand)
	if r := open(2, 3); r.Err != nil || r.SegmentID != 8 {
		t.Fatalf("a floor below the counter must not lower it: %+v", r)
	}
}
