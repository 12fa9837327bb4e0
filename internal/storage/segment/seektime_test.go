package segment

import (
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// mkTimedBatch encodes one record per timestamp at consecutive offsets
// from base.
func mkTimedBatch(t *testing.T, base uint64, ts ...int64) []byte {
	t.Helper()
	recs := make([]Record, len(ts))
	for i, x := range ts {
		recs[i] = Record{Offset: base + uint64(i), Timestamp: x, Value: []byte("v")}
	}
	b, err := EncodeBatchAt(nil, recs, CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSeekTime(t *testing.T) {
	s := newSeg(t, vfs.NewMem(), 10, Options{IndexIntervalBytes: 64})
	if _, ok, err := s.SeekTime(0); ok || err != nil {
		t.Fatalf("empty segment: ok %v err %v", ok, err)
	}
	// Timestamps out of order across batches: the batch at 13 has a max
	// of 500, earlier than the batch at 12's 900.
	appendSync(t, s,
		mkTimedBatch(t, 10, 100, 200),
		mkTimedBatch(t, 12, 900),
		mkTimedBatch(t, 13, 300, 500),
		mkTimedBatch(t, 15, 1000),
	)
	for _, tc := range []struct {
		t    int64
		base uint64
		ok   bool
	}{
		{0, 10, true}, {200, 10, true}, {201, 12, true}, {900, 12, true},
		{901, 15, true}, {1000, 15, true}, {1001, 0, false},
	} {
		base, ok, err := s.SeekTime(tc.t)
		if err != nil || ok != tc.ok || base != tc.base {
			t.Errorf("SeekTime(%d) = %d, %v, %v; want %d, %v", tc.t, base, ok, err, tc.base, tc.ok)
		}
	}
}
