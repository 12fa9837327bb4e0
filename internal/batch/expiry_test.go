package batch

import (
	"errors"
	"testing"
)

func TestCheckProduceReportsReservedHeaders(t *testing.T) {
	cases := []struct {
		name    string
		headers []Header
		want    bool
	}{
		{"none", nil, false},
		{"application", []Header{{Key: []byte("trace"), Value: []byte("x")}}, false},
		{"prefix alone is not enough", []Header{{Key: []byte("malachi"), Value: []byte("x")}}, false},
		{"ttl", []Header{{Key: []byte("a"), Value: nil}, {Key: []byte("malachi.ttl_ms"), Value: []byte("5")}}, true},
		{"forged expiry", []Header{{Key: []byte("malachi.expiry_ms"), Value: []byte("1")}}, true},
	}
	for _, codec := range []Codec{CodecNone, CodecZstd} {
		for _, c := range cases {
			recs := []Record{{Offset: 0, Value: []byte("a")}, {Offset: 1, Value: []byte("b"), Headers: c.headers}}
			b, err := EncodeBatch(nil, 0, recs, codec)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := CheckProduceReport(b, produceLimits, nil)
			if err != nil {
				t.Fatalf("%s/%s: %v", codec, c.name, err)
			}
			if rep.Reserved != c.want || !rep.KeysInside || rep.Header.RecordCount != 2 {
				t.Fatalf("%s/%s: report %+v, want reserved %v", codec, c.name, rep, c.want)
			}
		}
	}
}

func TestExpiredAt(t *testing.T) {
	enc := func(codec Codec, expiries ...int64) []byte {
		var recs []Record
		for i, e := range expiries {
			recs = append(recs, Record{Offset: uint64(i), Key: []byte("k"), Value: []byte("v"), Expiry: e,
				Headers: []Header{{Key: []byte("h"), Value: []byte("x")}, {Key: nil, Value: nil}}})
		}
		b, err := EncodeBatch(nil, 100, recs, codec)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name      string
		expiries  []int64
		now       int64
		want      int
		wantFirst int
	}{
		{"no expiry", []int64{0, 0}, 1 << 40, 0, 0},
		{"none passed", []int64{50, 60}, 49, 0, 0},
		{"at the expiry", []int64{50, 60}, 50, 1, 1},
		{"mixed with never", []int64{0, 10, 0, 20}, 15, 1, 1},
		{"mixed all passed", []int64{0, 10, 0, 20}, 1 << 40, 2, 1},
		{"max expiry passed: from the header", []int64{10, 20}, 20, 2, 2},
	}
	for _, codec := range []Codec{CodecNone, CodecZstd, CodecS2} {
		for _, c := range cases {
			b := enc(codec, c.expiries...)
			if got, err := ExpiredAt(b, c.now, false); err != nil || got != c.want {
				t.Fatalf("%s/%s: %d expired, %v; want %d", codec, c.name, got, err, c.want)
			}
			if got, err := ExpiredAt(b, c.now, true); err != nil || got != c.wantFirst {
				t.Fatalf("%s/%s, up to the first: %d expired, %v; want %d", codec, c.name, got, err, c.wantFirst)
			}
		}
	}
	cut := enc(CodecNone, 0, 10)
	if _, err := ExpiredAt(cut[:len(cut)-3], 5, false); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a cut batch: %v, want ErrCorrupt", err)
	}
	// A key length past the end of the records: refused, never read.
	long := enc(CodecNone, 0, 10)
	long[HeaderSize+3] = 0x7f
	if _, err := ExpiredAt(long, 5, false); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a key longer than the batch: %v, want ErrCorrupt", err)
	}
}

// BenchmarkMinExpiry is the walk a wire v2 read makes, once per TTL batch,
// to find its earliest expiry: 1,000 records of 128 bytes with the two
// headers a TTL record carries once stored.
func BenchmarkMinExpiry(b *testing.B) {
	var recs []Record
	value := make([]byte, 128)
	for i := 0; i < 1000; i++ {
		recs = append(recs, Record{Offset: uint64(i), Value: value, Expiry: 1_700_003_600_000,
			Headers: []Header{{Key: []byte("malachi.ttl_ms"), Value: []byte("3600000")},
				{Key: []byte("malachi.expiry_ms"), Value: []byte("1700003600000")}}})
	}
	batch, err := EncodeBatch(nil, 0, recs, CodecNone)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MinExpiry(batch); err != nil {
			b.Fatal(err)
		}
	}
}
