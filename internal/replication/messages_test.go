package replication

// Codec tests: every message round-trips, and every malformed input
// (truncated at each length, trailing bytes, an unknown version or kind,
// a byte string longer than its message or than MaxAppendBytes, an Append
// ending below its base or whose batches do not tile [Base, End), an
// unknown role) is refused with ErrMalformed. FuzzDecode runs its
// seed corpus in every `go test`; `go test ./internal/replication -run
// '^$' -fuzz FuzzDecode -fuzztime 60s` searches further.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/malachi-log/malachi/internal/batch"
)

func sampleMessages() []Message {
	return []Message{
		Append{Segment: 1 << 60, Base: 10, End: 14, Watermark: 9, Batches: stampedRun(10, 1, 3)},
		Append{Segment: 3, Base: 7, End: 7, Watermark: 7},
		Ack{Segment: 5, End: ^uint64(0)},
		Behind{Segment: 0, Has: 123456},
		Fence{Segment: 42},
		FenceAnswer{Segment: 42, End: 99},
		FenceAnswer{Segment: 42, End: 99, Role: RolePrimary},
	}
}

// stampedRun encodes batches of the given record counts at consecutive
// offsets from base, concatenated.
func stampedRun(base uint64, counts ...int) []byte {
	var out []byte
	for _, n := range counts {
		recs := make([]batch.Record, n)
		for i := range recs {
			recs[i] = batch.Record{Value: []byte("v")}
		}
		b, err := batch.EncodeBatch(nil, 0, recs, batch.CodecNone)
		if err == nil {
			err = batch.Restamp(b, base)
		}
		if err != nil {
			panic(err)
		}
		out = append(out, b...)
		base += uint64(n)
	}
	return out
}

func TestMessagesRoundTrip(t *testing.T) {
	for _, want := range sampleMessages() {
		enc := Encode(want)
		if enc[0] != Version || Kind(enc[1]) != want.Kind() {
			t.Errorf("%v: starts %x, want version %d and kind %d", want.Kind(), enc[:2], Version, want.Kind())
		}
		got, err := Decode(enc)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%v: decoded %+v, %v; want %+v", want.Kind(), got, err, want)
		}
		// AppendTo appends: a prefix in dst is kept.
		if withPrefix := want.AppendTo([]byte("xy")); !bytes.Equal(withPrefix[2:], enc) || string(withPrefix[:2]) != "xy" {
			t.Errorf("%v: AppendTo does not append", want.Kind())
		}
	}
}

// A decoded Append owns its batches: the input buffer may be reused.
func TestDecodeCopiesBatches(t *testing.T) {
	want := stampedRun(1, 1)
	enc := Encode(Append{Base: 1, End: 2, Batches: want})
	m, err := Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range enc {
		enc[i] = 0
	}
	if got := m.(Append).Batches; !bytes.Equal(got, want) {
		t.Fatalf("batches changed with the input buffer: %x", got)
	}
}

func TestDecodeRefusesTruncated(t *testing.T) {
	for _, m := range sampleMessages() {
		enc := Encode(m)
		for n := range len(enc) {
			if _, err := Decode(enc[:n]); !errors.Is(err, ErrMalformed) {
				t.Errorf("%v cut to %d of %d bytes: %v, want ErrMalformed", m.Kind(), n, len(enc), err)
			}
		}
		if _, err := Decode(append(enc, 0)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%v with a trailing byte: %v", m.Kind(), err)
		}
	}
}

func TestDecodeRefusesMalformed(t *testing.T) {
	huge := binary.AppendUvarint([]byte{Version, byte(KindAppend), 1, 1, 2, 1}, MaxAppendBytes+1)
	cases := map[string][]byte{
		"empty":            {},
		"version 0":        {0, byte(KindAck), 1, 2},
		"version 2":        {2, byte(KindAck), 1, 2},
		"kind 0":           {Version, 0, 1, 2},
		"unknown kind":     {Version, 6, 1, 2},
		"kind 255":         {Version, 255},
		"overlong uvarint": append([]byte{Version, byte(KindFence)}, bytes.Repeat([]byte{0xff}, 11)...),
		"bytes past end":   {Version, byte(KindAppend), 1, 1, 2, 1, 10, 'a'},
		"oversized bytes":  append(huge, make([]byte, 16)...),
		"end below base":   Encode(Append{Segment: 1, Base: 5, End: 4}),
		"unknown role":     {Version, byte(KindFenceAnswer), 1, 2, 2},
		"unknown flag":     {Version, byte(KindFenceAnswer), 1, 2, 0, 2},
		"flag and more":    {Version, byte(KindFenceAnswer), 1, 2, 0, 1, 1},
		"batches past End": Encode(Append{Segment: 1, Base: 10, End: 11, Batches: stampedRun(10, 1, 1)}),
		"cut batch":        Encode(Append{Segment: 1, Base: 10, End: 11, Batches: stampedRun(10, 1)[:40]}),
	}
	for name, msg := range cases {
		if m, err := Decode(msg); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: decoded %+v, %v; want ErrMalformed", name, m, err)
		}
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindAppend: "append", KindAck: "ack", KindBehind: "behind",
		KindFence: "fence", KindFenceAnswer: "fence-answer", 77: "kind-77"} {
		if got := k.String(); got != want {
			t.Errorf("%d: %q, want %q", k, got, want)
		}
	}
	for r, want := range map[Role]string{RoleFollower: "follower", RolePrimary: "primary", 9: "role-9"} {
		if got := r.String(); got != want {
			t.Errorf("role %d: %q, want %q", r, got, want)
		}
	}
}

// FuzzDecode: Decode never panics, refuses with ErrMalformed only, and
// whatever it accepts encodes back to exactly the input.
func FuzzDecode(f *testing.F) {
	for _, m := range sampleMessages() {
		f.Add(Encode(m))
	}
	f.Add([]byte{Version, byte(KindAppend), 0, 0, 0, 0, 0})
	f.Add([]byte{Version, 9})
	f.Fuzz(func(t *testing.T, msg []byte) {
		m, err := Decode(msg)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if enc := Encode(m); !bytes.Equal(enc, msg) {
			// Uvarints have one shortest form, but a decoder also reads
			// padded ones; only those may differ.
			again, err := Decode(enc)
			if err != nil || !reflect.DeepEqual(again, m) {
				t.Fatalf("re-encoding %+v gave %x, which decodes to %+v, %v", m, enc, again, err)
			}
		}
	})
}

// TestFenceAnswerFlagIsCompatible: an answer without the Unknown flag is
// the older encoding byte for byte, and one with it is that plus one
// byte (cut off, it reads as an unflagged answer, as an older node sent).
func TestFenceAnswerFlagIsCompatible(t *testing.T) {
	plain := Encode(FenceAnswer{Segment: 1, End: 2})
	if want := []byte{Version, byte(KindFenceAnswer), 1, 2, 0}; !bytes.Equal(plain, want) {
		t.Fatalf("plain answer %v, want %v", plain, want)
	}
	flagged := Encode(FenceAnswer{Segment: 1, End: 2, Unknown: true})
	if want := append(plain, 1); !bytes.Equal(flagged, want) {
		t.Fatalf("flagged answer %v, want %v", flagged, want)
	}
	for _, msg := range [][]byte{plain, flagged} {
		m, err := Decode(msg)
		if err != nil {
			t.Fatal(err)
		}
		if a := m.(FenceAnswer); a.Unknown != (len(msg) > len(plain)) || a.Segment != 1 || a.End != 2 {
			t.Fatalf("%v decoded as %+v", msg, a)
		}
	}
}
