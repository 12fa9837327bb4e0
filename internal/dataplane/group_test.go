package dataplane

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestGroupRoundTrip(t *testing.T) {
	for _, m := range []Group{
		{Op: GroupJoin, Topic: 1 << 50, Group: "billing", Member: "m-1", Owner: "alice"},
		{Op: GroupCommit, Topic: 3, Group: "g", Member: "m", Generation: 7<<32 | 12},
		{Op: GroupLive, Topic: 9},
	} {
		got, err := DecodeGroup(m.Encode())
		if err != nil || got != m {
			t.Fatalf("%v: %+v, %v", m.Op, got, err)
		}
	}
	a := GroupAnswer{
		Generation: 5<<32 | 3, Live: true, Ranges: []uint64{1, 1 << 49}, Held: 2, Count: 3,
		Members:   []GroupMember{{Name: "a", LastSeen: 1_700_000_000_000, Ranges: []uint64{4}}, {Name: "b", LastSeen: -1}},
		Groups:    []string{"g1", "g2"},
		Committed: []GroupEntry{{Source: 1 << 49, SliceStart: 1 << 31, SliceBits: 31, Offset: 12}, {Source: 4, Offset: 1}},
	}
	if got, err := DecodeGroupAnswer(a.Encode()); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("answer: %+v, %v", got, err)
	}
	var r *Refusal
	want := &Refusal{Status: StatusNotHere, Node: 2, Reason: "not_owner", Message: "node-1 no longer leads vnode-0"}
	if _, err := DecodeGroupAnswer(want.Encode()); !errors.As(err, &r) || !reflect.DeepEqual(r, want) {
		t.Fatalf("refusal: %v", err)
	}
}

// Names past MaxNameBytes, unknown operations, and lists longer than the
// message could hold are refused before anything is allocated for them.
func TestGroupMalformedRefused(t *testing.T) {
	long := strings.Repeat("x", MaxNameBytes+1)
	good := (&Group{Op: GroupJoin, Topic: 1, Group: "g", Member: "m"}).Encode()
	cases := map[string][]byte{
		"long group":  (&Group{Op: GroupJoin, Group: long, Member: "m"}).Encode(),
		"long member": (&Group{Op: GroupLeave, Group: "g", Member: long}).Encode(),
		"op 0":        (&Group{Op: 0, Group: "g"}).Encode(),
		"op 7":        (&Group{Op: 7, Group: "g"}).Encode(),
		"truncated":   good[:len(good)-1],
		"trailing":    append(bytes.Clone(good), 0),
		"other kind":  (&Info{Segment: 1}).Encode(),
	}
	for name, msg := range cases {
		if _, err := DecodeGroup(msg); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	if (&Group{Group: "g", Member: long}).NamesFit() || !(&Group{Group: "g", Member: long[1:]}).NamesFit() {
		t.Error("NamesFit disagrees with the decoder's bound")
	}
	answers := map[string][]byte{
		"long group name": (&GroupAnswer{Groups: []string{long}}).Encode(),
		"long member":     (&GroupAnswer{Members: []GroupMember{{Name: long}}}).Encode(),
		// 2^20 ranges claimed, none following.
		"ranges count": {byte(StatusOK), 0, 0, 0x80, 0x80, 0x40},
		// One committed entry whose slice has 2^65 positions.
		"slice bits": {byte(StatusOK), 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 65, 1},
	}
	for name, msg := range answers {
		if _, err := DecodeGroupAnswer(msg); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// Group decoders never panic, and what decodes encodes back.
func FuzzDecodeGroup(f *testing.F) {
	f.Add((&Group{Op: GroupJoin, Topic: 1, Group: "g", Member: "m", Owner: "o", Generation: 2}).Encode())
	f.Add((&GroupAnswer{Ranges: []uint64{1}, Members: []GroupMember{{Name: "a", Ranges: []uint64{2}}}, Groups: []string{"g"}}).Encode())
	f.Fuzz(func(t *testing.T, msg []byte) {
		if m, err := DecodeGroup(msg); err == nil {
			same(t, msg, m.Encode())
		}
		if m, err := DecodeGroupAnswer(msg); err == nil {
			same(t, msg, m.Encode())
		}
	})
}
