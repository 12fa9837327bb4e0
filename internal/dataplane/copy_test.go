package dataplane

// The copy call's codec: values round-trip, every truncation and every
// length or bound a sender could lie about is refused with ErrMalformed
// before anything is allocated for it, and a refusal comes back as a
// *Refusal error like the other calls'.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

func TestCopyRoundTrip(t *testing.T) {
	for _, c := range []Copy{
		{Segment: 1, From: 0, MaxBytes: 1},
		{Segment: 1 << 62, From: 1 << 50, MaxBytes: MaxCopyBytes},
	} {
		if got, err := DecodeCopy(c.Encode()); err != nil || got != c {
			t.Fatalf("copy %+v: %+v, %v", c, got, err)
		}
		if k, err := KindOf(c.Encode()); err != nil || k != KindCopy {
			t.Fatalf("kind of a copy: %v, %v", k, err)
		}
	}
	for _, a := range []CopyAnswer{
		{Next: 7, End: 7, Sealed: true, Batches: []byte{}},
		{Next: 100, End: 1 << 40, Sealed: false, Batches: bytes.Repeat([]byte{0x4d}, 70_000)},
	} {
		if got, err := DecodeCopyAnswer(a.Encode()); err != nil || !reflect.DeepEqual(got, a) {
			t.Fatalf("copy answer %d bytes: %+v, %v", len(a.Batches), got.Next, err)
		}
	}
}

// The kind must not collide with any other kind of the data plane.
func TestCopyKindIsFree(t *testing.T) {
	for _, k := range []Kind{KindAppend, KindRead, KindInfo, KindSeek, KindInterest, KindAppended, KindGroup, KindRoll} {
		if k == KindCopy {
			t.Fatalf("KindCopy %d collides with %v", KindCopy, k)
		}
	}
}

func TestCopyMalformedRefused(t *testing.T) {
	full := (&Copy{Segment: 1 << 40, From: 1 << 33, MaxBytes: 4096}).Encode()
	for n := range len(full) {
		if _, err := DecodeCopy(full[:n]); !errors.Is(err, ErrMalformed) {
			t.Errorf("a copy cut to %d of %d bytes: %v", n, len(full), err)
		}
	}
	cases := map[string][]byte{
		"trailing":  append(append([]byte(nil), full...), 0),
		"wrong":     (&Roll{Range: 1, Segment: 2}).Encode(),
		"zero":      (&Copy{Segment: 1, MaxBytes: 0}).Encode(),
		"too large": (&Copy{Segment: 1, MaxBytes: MaxCopyBytes + 1}).Encode(),
		"huge":      (&Copy{Segment: 1, MaxBytes: ^uint64(0)}).Encode(),
	}
	for name, msg := range cases {
		if _, err := DecodeCopy(msg); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func TestCopyAnswerMalformedRefused(t *testing.T) {
	full := (&CopyAnswer{Next: 300, End: 1 << 20, Sealed: true, Batches: []byte("batches")}).Encode()
	for n := range len(full) {
		if _, err := DecodeCopyAnswer(full[:n]); !errors.Is(err, ErrMalformed) {
			t.Errorf("an answer cut to %d of %d bytes: %v", n, len(full), err)
		}
	}
	head := []byte{byte(StatusOK), 1, 2, 1}
	cases := map[string][]byte{
		"trailing": append(append([]byte(nil), full...), 0),
		"flag":     {byte(StatusOK), 1, 2, 2, 0},
		// Lengths that lie: longer than what follows, longer than any
		// copy answer may be, and beyond what a uvarint can hold.
		"longer than sent": append(binary.AppendUvarint(bytes.Clone(head), 100), 'a'),
		"over the bound":   binary.AppendUvarint(bytes.Clone(head), MaxCopyAnswerBytes+1),
		"huge":             binary.AppendUvarint(bytes.Clone(head), ^uint64(0)),
		"overlong varint":  append(bytes.Clone(head), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
		"next past end":    (&CopyAnswer{Next: 9, End: 8, Sealed: true}).Encode(),
		"unknown status":   {9},
	}
	for name, msg := range cases {
		if _, err := DecodeCopyAnswer(msg); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func TestCopyRefusalComesBackAsError(t *testing.T) {
	want := &Refusal{Status: StatusNotFound, Node: 4, Reason: "not_found", Message: "segment 9 has no copy here"}
	var got *Refusal
	if _, err := DecodeCopyAnswer(want.Encode()); !errors.As(err, &got) || !reflect.DeepEqual(got, want) {
		t.Fatalf("refusal: %v, want %+v", err, want)
	}
}

// Decoders never panic, and what decodes encodes back to the same bytes.
func FuzzDecodeCopy(f *testing.F) {
	f.Add((&Copy{Segment: 1, From: 2, MaxBytes: 3}).Encode())
	f.Add((&CopyAnswer{Next: 1, End: 2, Sealed: true, Batches: []byte("b")}).Encode())
	f.Add((&Refusal{Status: StatusNotHere, Node: 2, Reason: "r", Message: "m"}).Encode())
	f.Fuzz(func(t *testing.T, msg []byte) {
		if m, err := DecodeCopy(msg); err == nil {
			same(t, msg, m.Encode())
		}
		if m, err := DecodeCopyAnswer(msg); err == nil {
			same(t, msg, m.Encode())
		}
	})
}

// Logs and errors name the copy call, not a bare number.
func TestKindCopyIsNamed(t *testing.T) {
	if got := KindCopy.String(); got != "copy" {
		t.Fatalf("KindCopy.String() = %q, want copy", got)
	}
	if got := Kind(99).String(); got != "kind-99" {
		t.Fatalf("Kind(99).String() = %q, want kind-99", got)
	}
}
