package heal_test

// The pieces of a scrub composed as a node would run them, on a manual
// clock: the scrubber picks a copy, Verify reads it through a reader that
// takes every page from a Bucket (waiting by moving the clock), and the
// verdict goes back to the scrubber. Over a simulated hour no
// verification reads faster than the rate allows after the burst, and
// every copy is verified about once per interval.

import (
	"testing"

	"github.com/malachi-log/malachi/internal/heal"
)

func TestScrubAtItsRate(t *testing.T) {
	const (
		rate     = 2 << 10 // B/s: a copy takes seconds to verify
		burst    = 4 << 10
		interval = 10 * 60 * 1000
		hour     = 60 * 60 * 1000
	)
	stored := map[uint64][][]byte{}
	var tracked []heal.LocalCopy
	seals := map[uint64]heal.Seal{}
	for id := uint64(1); id <= 8; id++ {
		b := copyOf(t, 0, 50, 50, 50, 50) // about 4 × 2.6 KiB
		stored[id] = b
		seals[id] = sealOf(t, id, 0, b)
		tracked = append(tracked, heal.LocalCopy{Segment: id, Bytes: seals[id].Bytes})
	}
	s := newScrubber(t, heal.ScrubConfig{IntervalMs: interval, RateBytes: rate})
	if err := s.Track(0, tracked); err != nil {
		t.Fatal(err)
	}
	bucket := newBucket(t, rate, burst, 0)
	now := int64(0)
	verified := map[uint64]int{}
	for now < hour {
		seg, wait, ok := s.Next(now)
		if !ok {
			now += wait
			continue
		}
		inner := memReader(stored[seg])
		start, read := now, int64(0)
		paced := func(from uint64, maxBytes int) ([]byte, error) {
			for {
				w, err := bucket.Take(now, int64(maxBytes))
				if err != nil {
					return nil, err
				}
				if w == 0 {
					break
				}
				now += w
			}
			page, err := inner(from, maxBytes)
			read += int64(len(page))
			return page, err
		}
		v := heal.Verify(seals[seg], paced, 4<<10)
		if !v.Whole() {
			t.Fatalf("segment %d: %v", seg, v)
		}
		verified[seg]++
		s.Done(now, seg, v)
		if limit := burst + (now-start)*rate/1000; read > limit || now == start {
			t.Fatalf("segment %d: %d bytes read in %d ms; the rate allows %d", seg, read, now-start, limit)
		}
	}
	for id := uint64(1); id <= 8; id++ {
		if n := verified[id]; n < 5 || n > 7 {
			t.Fatalf("segment %d verified %d times in an hour at a 10-minute interval", id, n)
		}
	}
}
