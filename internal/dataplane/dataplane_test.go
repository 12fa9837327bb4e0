package dataplane

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestRequestsRoundTrip(t *testing.T) {
	app := Append{Topic: 1 << 50, Range: 7, Batches: [][]byte{[]byte("one"), {}, bytes.Repeat([]byte{9}, 300)}}
	if got, err := DecodeAppend(app.Encode()); err != nil || !reflect.DeepEqual(got, app) {
		t.Fatalf("append: %+v, %v", got, err)
	}
	rd := Read{Segment: 3, From: 1 << 40, MaxBytes: 1 << 20, UpTo: ^uint64(0)}
	if got, err := DecodeRead(rd.Encode()); err != nil || got != rd {
		t.Fatalf("read: %+v, %v", got, err)
	}
	in := Info{Segment: 99}
	if got, err := DecodeInfo(in.Encode()); err != nil || got != in {
		t.Fatalf("info: %+v, %v", got, err)
	}
	sk := Seek{Segment: 4, AtMs: -12345}
	if got, err := DecodeSeek(sk.Encode()); err != nil || got != sk {
		t.Fatalf("seek: %+v, %v", got, err)
	}
	it := Interest{TTLMs: 3000, Topics: []uint64{1, 2, 1 << 60}}
	if got, err := DecodeInterest(it.Encode()); err != nil || !reflect.DeepEqual(got, it) {
		t.Fatalf("interest: %+v, %v", got, err)
	}
	ap := Appended{Ends: []End{{1, 2, 3}, {4, 5, 1 << 62}}}
	if got, err := DecodeAppended(ap.Encode()); err != nil || !reflect.DeepEqual(got, ap) {
		t.Fatalf("appended: %+v, %v", got, err)
	}
}

// An append's encoding never exceeds what AppendHeaderBytes and
// AppendBatchBytes say, the sizes a sender cuts its appends by.
func TestAppendSizeBound(t *testing.T) {
	for _, sizes := range [][]int{nil, {0}, {1, 127, 128}, {16383, 16384, 1 << 21}} {
		app := Append{Topic: ^uint64(0), Range: ^uint64(0)}
		bound := AppendHeaderBytes
		for _, n := range sizes {
			app.Batches = append(app.Batches, make([]byte, n))
			bound += AppendBatchBytes(n)
		}
		if got := len(app.Encode()); got > bound {
			t.Errorf("batches of %v bytes: encoded %d bytes, bound %d", sizes, got, bound)
		}
		if got := len(app.Encode()); got < bound-AppendHeaderBytes {
			t.Errorf("batches of %v bytes: encoded %d bytes, far below the bound %d", sizes, got, bound)
		}
	}
}

func TestAnswersRoundTrip(t *testing.T) {
	aa := AppendAnswer{Bases: []uint64{0, 512, 1024}}
	if got, err := DecodeAppendAnswer(aa.Encode()); err != nil || !reflect.DeepEqual(got, aa) {
		t.Fatalf("append answer: %+v, %v", got, err)
	}
	ra := ReadAnswer{Next: 10, DurableEnd: 12, Sealed: true, Batches: []byte("batches")}
	if got, err := DecodeReadAnswer(ra.Encode()); err != nil || !reflect.DeepEqual(got, ra) {
		t.Fatalf("read answer: %+v, %v", got, err)
	}
	ia := InfoAnswer{Base: 1, DurableEnd: 2, Records: 3, MaxTimestamp: -4, Sealed: true}
	if got, err := DecodeInfoAnswer(ia.Encode()); err != nil || got != ia {
		t.Fatalf("info answer: %+v, %v", got, err)
	}
	sa := SeekAnswer{Found: true, Base: 77}
	if got, err := DecodeSeekAnswer(sa.Encode()); err != nil || got != sa {
		t.Fatalf("seek answer: %+v, %v", got, err)
	}
	na := InterestAnswer{Ends: []End{{1, 2, 3}}}
	if got, err := DecodeInterestAnswer(na.Encode()); err != nil || !reflect.DeepEqual(got, na) {
		t.Fatalf("interest answer: %+v, %v", got, err)
	}
}

// A refusal decodes as a *Refusal error from every answer decoder.
func TestRefusalComesBackAsError(t *testing.T) {
	want := &Refusal{Status: StatusRetired, Stored: 2, Node: 3, Reason: "sealed", Message: "range 5 was split"}
	msg := want.Encode()
	for name, decode := range map[string]func([]byte) error{
		"append":   func(b []byte) error { _, err := DecodeAppendAnswer(b); return err },
		"read":     func(b []byte) error { _, err := DecodeReadAnswer(b); return err },
		"info":     func(b []byte) error { _, err := DecodeInfoAnswer(b); return err },
		"seek":     func(b []byte) error { _, err := DecodeSeekAnswer(b); return err },
		"interest": func(b []byte) error { _, err := DecodeInterestAnswer(b); return err },
	} {
		var got *Refusal
		if err := decode(msg); !errors.As(err, &got) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v, want %+v", name, err, want)
		}
	}
	// A refusal built with StatusOK is still a refusal.
	var got *Refusal
	if _, err := DecodeReadAnswer((&Refusal{Reason: "retry"}).Encode()); !errors.As(err, &got) || got.Status != StatusRefused {
		t.Fatalf("refusal with status OK: %v", err)
	}
}

func TestMalformedRefused(t *testing.T) {
	good := (&Append{Topic: 1, Range: 2, Batches: [][]byte{[]byte("abc")}}).Encode()
	cases := map[string][]byte{
		"empty":     {},
		"wrong":     (&Read{}).Encode(),
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte(nil), good...), 0),
		// A count claiming more items than the bytes could hold.
		"count": {byte(KindAppend), 1, 2, 0xff, 0xff, 0x03},
		// A byte string longer than what follows.
		"bytes": {byte(KindAppend), 1, 2, 1, 100, 'a'},
	}
	for name, msg := range cases {
		if _, err := DecodeAppend(msg); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	if _, err := DecodeSeekAnswer([]byte{byte(StatusOK), 2, 0}); !errors.Is(err, ErrMalformed) {
		t.Errorf("a flag of 2: %v", err)
	}
	if _, err := DecodeSeekAnswer([]byte{9}); !errors.Is(err, ErrMalformed) {
		t.Errorf("an unknown status: %v", err)
	}
}

// Decoders never panic, and what decodes encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add((&Append{Topic: 1, Range: 2, Batches: [][]byte{[]byte("x")}}).Encode())
	f.Add((&Read{Segment: 1, From: 2, MaxBytes: 3, UpTo: 4}).Encode())
	f.Add((&Info{Segment: 5}).Encode())
	f.Add((&Seek{Segment: 1, AtMs: -1}).Encode())
	f.Add((&Interest{TTLMs: 1, Topics: []uint64{1}}).Encode())
	f.Add((&Appended{Ends: []End{{1, 2, 3}}}).Encode())
	f.Add((&ReadAnswer{Next: 1, Batches: []byte("b")}).Encode())
	f.Add((&Refusal{Status: StatusNotHere, Node: 2, Reason: "r", Message: "m"}).Encode())
	f.Fuzz(func(t *testing.T, msg []byte) {
		if m, err := DecodeAppend(msg); err == nil {
			same(t, msg, m.Encode())
		}
		if m, err := DecodeRead(msg); err == nil {
			same(t, msg, m.Encode())
		}
		if m, err := DecodeInfo(msg); err == nil {
			same(t, msg, m.Encode())
		}
		if m, err := DecodeSeek(msg); err == nil {
			same(t, msg, m.Encode())
		}
		if m, err := DecodeInterest(msg); err == nil {
			same(t, msg, m.Encode())
		}
		if m, err := DecodeAppended(msg); err == nil {
			same(t, msg, m.Encode())
		}
		_, _ = DecodeAppendAnswer(msg)
		_, _ = DecodeInfoAnswer(msg)
		_, _ = DecodeSeekAnswer(msg)
		_, _ = DecodeInterestAnswer(msg)
		if m, err := DecodeReadAnswer(msg); err == nil {
			same(t, msg, m.Encode())
		}
	})
}

// same compares a decoded message's encoding with its input. Varints have
// more than one encoding (padded with 0x80 bytes), so only a canonical
// input must come back byte for byte: a non-canonical one must decode to
// the same value again.
func same(t *testing.T, in, out []byte) {
	t.Helper()
	if !bytes.Equal(in, out) && len(out) >= len(in) {
		t.Fatalf("encoding of a decoded message differs: %x, then %x", in, out)
	}
}
