package segment

import (
	"math"
	"slices"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
	"pgregory.net/rapid"
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

// seekTimeLinear is SeekTime as it was before the index carried
// timestamps: every durable batch header from the first, in file order.
// The indexed search must agree with it, and the benchmark compares them.
func seekTimeLinear(s *Segment, t int64) (uint64, bool, error) {
	s.mu.RLock()
	d := s.durable
	s.mu.RUnlock()
	if d.Records == 0 || d.MaxTimestamp < t {
		return 0, false, nil
	}
	limit := FileHeaderSize + d.Bytes
	w := &window{f: s.f, size: limit, chunk: s.interval + 2*HeaderSize}
	for pos := int64(FileHeaderSize); pos < limit; {
		hb, err := w.at(pos, HeaderSize)
		if err != nil {
			return 0, false, s.corrupt(pos, shortOr(err))
		}
		h, err := ParseHeader(hb)
		if err != nil {
			return 0, false, s.corrupt(pos, err)
		}
		if h.MaxTimestamp >= t {
			return h.BaseOffset, true, nil
		}
		pos += int64(h.Length)
	}
	return 0, false, nil
}

// modelBatch is what the property test remembers of an appended batch.
type modelBatch struct {
	pos, maxTS int64
}

// seekModes are the ways a segment under test reaches SeekTime.
var seekModes = []string{"active", "sealed", "reopened with idx", "reopened without idx", "recovered"}

// TestSeekTimeMatchesLinearWalk: for random batches with non-monotonic
// timestamps, holes, unsynced tails and any index interval, SeekTime on an
// active, sealed, reopened or recovered segment returns exactly what the
// linear walk does, and every index entry carries the true prefix max.
func TestSeekTimeMatchesLinearWalk(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		mem := vfs.NewMem()
		o := Options{IndexIntervalBytes: rapid.IntRange(1, 1000).Draw(rt, "interval")}
		s, err := Create(mem, "/seg.log", 1, 7, o)
		if err != nil {
			rt.Fatal(err)
		}
		model, ts := appendRandomTimed(rt, s)
		s = reachMode(rt, mem, s, o, rapid.SampledFrom(seekModes).Draw(rt, "mode"))
		defer s.Close()
		checkPrefixMax(rt, s, model)
		lo, hi := slices.Min(append(ts, 0)), slices.Max(append(ts, 0))
		probes := []int64{math.MinInt64, lo - 1, hi + 1, math.MaxInt64}
		for _, x := range ts {
			probes = append(probes, x-1, x, x+1)
		}
		for _, p := range probes {
			base, ok, err := s.SeekTime(p)
			wbase, wok, werr := seekTimeLinear(s, p)
			if base != wbase || ok != wok || err != nil || werr != nil {
				rt.Fatalf("SeekTime(%d) = %d, %v, %v; linear walk %d, %v, %v", p, base, ok, err, wbase, wok, werr)
			}
		}
	})
}

// appendRandomTimed appends random batches, syncing after some of them,
// and returns every batch appended and every timestamp used.
func appendRandomTimed(rt *rapid.T, s *Segment) ([]modelBatch, []int64) {
	var model []modelBatch
	var all []int64
	off, pos := s.Base(), int64(FileHeaderSize)
	for range rapid.IntRange(0, 60).Draw(rt, "batches") {
		off += rapid.Uint64Range(0, 3).Draw(rt, "hole")
		ts := rapid.SliceOfN(rapid.Int64Range(-20, 200), 1, 4).Draw(rt, "timestamps")
		recs := make([]Record, len(ts))
		for i, x := range ts {
			recs[i] = Record{Offset: off + uint64(i), Timestamp: x, Value: []byte("v")}
		}
		b, err := EncodeBatchAt(nil, recs, CodecNone)
		if err == nil {
			err = s.Append(b)
		}
		if err == nil && rapid.Bool().Draw(rt, "sync") {
			err = s.Sync()
		}
		if err != nil {
			rt.Fatal(err)
		}
		model = append(model, modelBatch{pos: pos, maxTS: slices.Max(ts)})
		all = append(all, ts...)
		off += uint64(len(ts))
		pos += int64(len(b))
	}
	return model, all
}

// reachMode turns the freshly written segment s into one in the given
// mode; every mode but "active" syncs first.
func reachMode(rt *rapid.T, fs vfs.FS, s *Segment, o Options, mode string) *Segment {
	if mode == "active" {
		return s
	}
	must(rt, s.Sync())
	w, _ := s.Stats()
	ft, err := s.Footer(w.End, 1)
	if err == nil && mode != "recovered" {
		err = s.WriteIndex(fs, "/seg.idx")
	}
	if err == nil {
		s.MarkSealed(w.End)
	}
	if err != nil || mode == "sealed" {
		must(rt, err)
		return s
	}
	must(rt, s.Close())
	var r *Segment
	switch mode {
	case "recovered":
		r, _, err = Recover(fs, "/seg.log", o)
	case "reopened with idx":
		r, err = OpenSealed(fs, "/seg.log", "/seg.idx", ft, o)
	default:
		r, err = OpenSealed(fs, "/seg.log", "", ft, o)
	}
	must(rt, err)
	return r
}

// must fails the test on an error that only a bug in the setup can cause.
func must(rt *rapid.T, err error) {
	rt.Helper()
	if err != nil {
		rt.Fatal(err)
	}
}

// checkPrefixMax checks that every index entry sits on a batch and carries
// the largest MaxTimestamp from the first batch through that one.
func checkPrefixMax(rt *rapid.T, s *Segment, model []modelBatch) {
	entries := s.IndexEntries()
	if len(model) > 0 && (len(entries) == 0 || entries[0].Pos != FileHeaderSize) {
		rt.Fatalf("index %v does not start at the first batch", entries)
	}
	m, prefix := 0, int64(math.MinInt64)
	for _, e := range entries {
		for ; m < len(model) && model[m].pos <= e.Pos; m++ {
			prefix = max(prefix, model[m].maxTS)
		}
		if model[m-1].pos != e.Pos || e.PrefixMaxTimestamp != prefix {
			rt.Fatalf("entry %+v: batch at %d, prefix max %d", e, model[m-1].pos, prefix)
		}
	}
}
