package metadata

import (
	"bytes"
	"strings"
	"testing"
)

// TestShardIDs: a sharded state hands out topic, range and segment ids in
// its own block, each naming its shard, and two shards fed the same
// commands never share an id.
func TestShardIDs(t *testing.T) {
	seen := map[[2]uint64]uint16{} // kind, id
	for _, shard := range []uint16{2, 3, MaxShard} {
		st := NewShard(shard)
		if st.Shard() != shard {
			t.Fatalf("Shard() = %d, want %d", st.Shard(), shard)
		}
		res := apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Ranges: 2})
		wantErr(t, res, nil)
		split := apply(t, st, Command{Kind: KindSplitRange, Range: res.RangeIDs[0]})
		wantErr(t, split, nil)
		seg := apply(t, st, Command{Kind: KindOpenSegment, Range: split.RangeIDs[0]})
		wantErr(t, seg, nil)
		ids := [][]uint64{{res.TopicID}, append(res.RangeIDs, split.RangeIDs...), {seg.SegmentID}}
		for kind, list := range ids {
			for _, id := range list {
				if ShardOf(id) != shard {
					t.Errorf("shard %d handed out id %#x of shard %d", shard, id, ShardOf(id))
				}
				key := [2]uint64{uint64(kind), id}
				if other, dup := seen[key]; dup {
					t.Errorf("id %#x handed out by shards %d and %d", id, other, shard)
				}
				seen[key] = shard
			}
		}
		if res.TopicID != uint64(shard)<<ShardShift|1 {
			t.Errorf("first topic of shard %d is %#x", shard, res.TopicID)
		}
	}
}

// TestShardSnapshot: the shard survives Snapshot and Restore (and Clone),
// shard 0 snapshots carry no shard field, and Restore refuses a state
// whose ids lie outside its shard.
func TestShardSnapshot(t *testing.T) {
	st := NewShard(5)
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: "t"}), nil)
	b, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Restore(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Shard() != 5 || st.Clone().Shard() != 5 {
		t.Fatalf("shard lost: restored %d, cloned %d", back.Shard(), st.Clone().Shard())
	}
	again, _ := back.Snapshot()
	if !bytes.Equal(b, again) {
		t.Fatalf("snapshot of a restored sharded state differs")
	}
	res := apply(t, back, Command{Kind: KindCreateTopic, Topic: "u"})
	if res.TopicID != 5<<ShardShift|2 {
		t.Fatalf("restored counter: next topic %#x", res.TopicID)
	}

	plain, _ := New().Snapshot()
	if strings.Contains(string(plain), `"shard"`) {
		t.Fatalf("shard 0 snapshot names a shard: %s", plain)
	}
	// The same image claiming another shard holds foreign ids.
	moved := strings.Replace(string(b), `"shard":5`, `"shard":6`, 1)
	if _, err := Restore([]byte(moved)); err == nil {
		t.Fatalf("restore accepted ids outside the state's shard")
	}
}

// TestShardMinID: a sharded state takes an open_segment floor only inside
// its own block, and never lets the counter run towards the next shard.
func TestShardMinID(t *testing.T) {
	st := NewShard(7)
	res := apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Ranges: 4})
	wantErr(t, res, nil)
	base := uint64(7) << ShardShift
	open := func(i int, minID uint64) Result {
		return apply(t, st, Command{Kind: KindOpenSegment, Range: res.RangeIDs[i], MinID: minID})
	}
	wantErr(t, open(0, 3), ErrInvalidCommand)               // shard 0's block
	wantErr(t, open(0, 8<<ShardShift|3), ErrInvalidCommand) // the next shard's
	wantErr(t, open(0, base+MaxShardSegmentCounter+1), ErrInvalidCommand)
	if r := open(0, base+40); r.Err != nil || r.SegmentID != base+40 {
		t.Fatalf("floor inside the block: %+v", r)
	}
	if r := open(1, 0); r.Err != nil || r.SegmentID != base+41 {
		t.Fatalf("no floor: %+v", r)
	}
	if r := open(2, base+MaxShardSegmentCounter); r.Err != nil || ShardOf(r.SegmentID) != 7 {
		t.Fatalf("highest floor: %+v", r)
	}
}
