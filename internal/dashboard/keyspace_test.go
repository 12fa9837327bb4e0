package dashboard

import (
	"slices"
	"testing"

	"github.com/malachi-log/malachi/pkg/client"
)

// A topic of 2^4 keys: range 1 split into 2 and 3, 3 split into 4 and 5,
// then 4 and 5 merged into 6.
func lineage() client.TopicDescription {
	return client.TopicDescription{Name: "t", KeyspaceBits: 4, Ranges: []client.RangeInfo{
		{ID: 1, Start: 0, End: 16},
		{ID: 2, Start: 0, End: 8, Active: true, Parents: []uint64{1}},
		{ID: 3, Start: 8, End: 16, Parents: []uint64{1}},
		{ID: 4, Start: 8, End: 12, Parents: []uint64{3}},
		{ID: 5, Start: 12, End: 16, Parents: []uint64{3}},
		{ID: 6, Start: 8, End: 16, Active: true, Parents: []uint64{4, 5}},
	}}
}

func TestKeyspaceRowsFollowLineage(t *testing.T) {
	d := lineage()
	v := keyspace(&d)
	row := map[uint64]float64{}
	for _, b := range v.Bars {
		row[b.ID] = (b.Y - ksTop) / ksRowH
	}
	want := map[uint64]float64{1: 0, 2: 1, 3: 1, 4: 2, 5: 2, 6: 3}
	for id, r := range want {
		if row[id] != r {
			t.Errorf("range %d on row %v, want %v", id, row[id], r)
		}
	}
	if len(v.Links) != 6 { // 1→2, 1→3, 3→4, 3→5, 4→6, 5→6
		t.Errorf("%d lineage lines, want 6", len(v.Links))
	}
	byID := map[uint64]ksBar{}
	for _, b := range v.Bars {
		byID[b.ID] = b
	}
	if b := byID[6]; b.X != ksWidth/2 || b.W != ksWidth/2 || !b.Active {
		t.Errorf("range 6 [8,16) of 16 keys drawn at x=%v w=%v active=%v", b.X, b.W, b.Active)
	}
}

func TestKeyspaceBoundsBars(t *testing.T) {
	d := client.TopicDescription{KeyspaceBits: 16}
	for i := range ksMaxBars + 10 {
		d.Ranges = append(d.Ranges, client.RangeInfo{ID: uint64(i + 1), Start: 0, End: 1 << 16})
	}
	v := keyspace(&d)
	if len(v.Bars) != ksMaxBars || v.Hidden != 10 || v.Bars[0].ID != 11 {
		t.Fatalf("%d bars, %d hidden, first %d; want %d, 10, 11", len(v.Bars), v.Hidden, v.Bars[0].ID, ksMaxBars)
	}
}

func TestBuddies(t *testing.T) {
	active := []client.RangeInfo{
		{ID: 10, Start: 0, End: 4}, {ID: 11, Start: 4, End: 8}, // buddies
		{ID: 12, Start: 8, End: 12}, {ID: 13, Start: 12, End: 14}, // unequal
		{ID: 14, Start: 14, End: 16},
	}
	got := buddies(active)
	want := [][2]uint64{{10, 11}, {13, 14}}
	if !slices.Equal(got, want) {
		t.Fatalf("buddies %v, want %v", got, want)
	}
}
