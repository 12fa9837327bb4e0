package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func samplePage(next *string, copies bool) *DescribeTopicPageResponse {
	r := &DescribeTopicPageResponse{ID: 7, Name: "orders", Bits: 16, CreatedAt: 1700000000000,
		RangesTotal: 100000, ActiveRanges: 4096, Groups: []string{"billing"}, GroupsOmitted: 3, Next: next, Copies: copies,
		Ranges: []RangeInfo{
			{ID: 5, Start: 0, End: 1 << 15, Parents: []uint64{1}, CreatedAt: 1, SealedAt: 2, SegmentsOmitted: 40,
				Segments: []SegmentInfo{{ID: 9, Base: 10, End: 20, Records: 10, Bytes: 100, Replicas: []string{"node-1", "node-2"}, OpenedAt: 3, SealedAt: 4}}},
			{ID: 6, Start: 1 << 15, End: 1 << 16, Active: true, Parents: []uint64{1}, CreatedAt: 1,
				Segments: []SegmentInfo{{ID: 11, Active: true, Replicas: []string{"node-1"}}}},
		}}
	if copies {
		r.Ranges[0].Segments[0].Copies = []SegmentCopy{{Node: 1, State: CopyVerified}, {Node: 2, State: CopyMissing}}
	}
	return r
}

func TestDescribeTopicPageRoundTrip(t *testing.T) {
	for _, want := range []*DescribeTopicPageResponse{
		samplePage(new("d1.7.6"), false),
		samplePage(nil, false),
		samplePage(new("d1.7.6"), true),
		{Name: "empty"},
	} {
		var got DescribeTopicPageResponse
		if err := got.Decode(want.AppendPayload(nil)); err != nil {
			t.Fatalf("%+v: %v", want, err)
		}
		if want.Ranges == nil {
			want.Groups, want.GroupsOmitted = nil, 0
		}
		if !reflect.DeepEqual(&got, want) {
			t.Fatalf("decoded\n%+v\nwant\n%+v", got, *want)
		}
	}
	for _, want := range []*DescribeTopicRequest{
		{Topic: new("orders"), Flags: FlagPaged, MaxRanges: 1000},
		{Topic: new("orders"), Flags: FlagPaged | FlagActiveOnly | FlagCopies, PageToken: new("d1.7.6"), MaxRanges: 1},
	} {
		var got DescribeTopicRequest
		if err := got.Decode(want.AppendPayload(nil)); err != nil || !reflect.DeepEqual(&got, want) {
			t.Fatalf("request %+v decoded %+v, %v", want, got, err)
		}
		if !got.Paged() || got.ActiveOnly() != (want.Flags&FlagActiveOnly != 0) {
			t.Fatalf("request %+v: paged %v active only %v", got, got.Paged(), got.ActiveOnly())
		}
	}
}

// A request that does not ask for a page keeps the older layouts byte
// for byte, whatever page fields the struct holds.
func TestDescribeTopicUnpagedIsTheOlderLayout(t *testing.T) {
	plain := DescribeTopicRequest{Topic: new("orders"), PageToken: new("x"), MaxRanges: 5}.AppendPayload(nil)
	if want := appendNStr(nil, new("orders")); !bytes.Equal(plain, want) {
		t.Fatalf("version 1 request % x, want % x", plain, want)
	}
	copies := DescribeTopicRequest{Topic: new("orders"), Flags: FlagCopies, MaxRanges: 5}.AppendPayload(nil)
	if want := append(appendNStr(nil, new("orders")), FlagCopies); !bytes.Equal(copies, want) {
		t.Fatalf("version 2 request % x, want % x", copies, want)
	}
}

func TestDescribeTopicPageBadInput(t *testing.T) {
	topic := appendNStr(nil, new("t"))
	withPage := func(flags uint8, token *string, n uint32) []byte {
		return appendU32(appendNStr(append(bytes.Clone(topic), flags), token), n)
	}
	for name, payload := range map[string][]byte{
		"page of 0 ranges":          withPage(FlagPaged, nil, 0),
		"empty token":               withPage(FlagPaged, new(""), 10),
		"token too long":            withPage(FlagPaged, new(strings.Repeat("a", MaxPageTokenLen+1)), 10),
		"active only without page":  append(bytes.Clone(topic), FlagActiveOnly),
		"paged without page fields": append(bytes.Clone(topic), FlagPaged),
		"page size cut short":       withPage(FlagPaged, nil, 10)[:len(topic)+3],
		"trailing byte":             append(withPage(FlagPaged, nil, 10), 0),
		"unknown flag":              withPage(FlagPaged|1<<3, nil, 10),
	} {
		var r DescribeTopicRequest
		if err := r.Decode(payload); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want malformed", name, err)
		}
	}
	good := samplePage(new("d1.7.6"), true).AppendPayload(nil)
	// Cut anywhere before the optional copies section.
	for n := range len(samplePage(new("d1.7.6"), false).AppendPayload(nil)) {
		if err := new(DescribeTopicPageResponse).Decode(good[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("page cut at %d of %d bytes: %v", n, len(good), err)
		}
	}
	if err := new(DescribeTopicPageResponse).Decode(samplePage(new(""), false).AppendPayload(nil)); !errors.Is(err, ErrMalformed) {
		t.Errorf("present empty next token: %v", err)
	}
}

// The sizes the node budgets pages with are the encoded sizes.
func TestDescribeSizes(t *testing.T) {
	whole := sampleDescribeWithCopies()
	whole.Copies = false
	if got, want := DescribeTopicSize(whole), len(whole.AppendPayload(nil)); got != want {
		t.Errorf("DescribeTopicSize %d, encoded %d", got, want)
	}
	page := samplePage(new(strings.Repeat("z", MaxPageTokenLen)), false)
	size := PageHeaderSize(page.Name) + StringsSize(page.Groups)
	for i := range page.Ranges {
		size += RangeInfoSize(&page.Ranges[i])
		for j := range page.Ranges[i].Segments {
			size += SegmentInfoSize(&page.Ranges[i].Segments[j])
		}
	}
	if want := len(page.AppendPayload(nil)); size != want {
		t.Errorf("page sized %d, encoded %d", size, want)
	}
}
