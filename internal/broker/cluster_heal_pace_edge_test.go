package broker

import "testing"

// --heal-rate is "bytes per second a node serves to heals" and may be
// set as low as 1 B/s, to keep repair from taking a busy node's disk.
// From a full bucket, what the copy call's pacer lets through at once
// must stay within about a second of that rate (one batch may go over,
// into debt): a minimum burst of a whole heal chunk lets a node set to
// 64 KiB/s serve 1 MiB, sixteen seconds' worth, in an instant.
func TestHealPacerBurstStaysNearTheConfiguredRate(t *testing.T) {
	for _, rate := range []int64{1 << 10, 64 << 10, 512 << 10} {
		p, err := newPacer(rate, 0)
		if err != nil {
			t.Fatal(err)
		}
		const piece = 4 << 10 // a small batch
		var released int64
		for released <= 64<<20 {
			wait, err := p.b.Take(0, piece)
			if err != nil {
				t.Fatal(err)
			}
			if wait > 0 {
				break
			}
			released += piece
		}
		if limit := rate + piece; released > limit {
			t.Errorf("rate %d B/s: %d bytes released at once, want at most %d (a second's worth and one batch)", rate, released, limit)
		}
	}
}
