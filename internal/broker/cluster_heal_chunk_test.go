package broker_test

import (
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/dataplane"
)

// A node serving copies at a low --heal-rate answers each copy call with
// at most a quarter second of that rate (one batch when a batch is
// larger), whatever the caller asks: a peer asking for the most a call
// may carry cannot take many seconds of the node's rate in one call.
func TestCopyCallServesAtMostOneChunkOfTheHealRate(t *testing.T) {
	const rate = 4 << 10 // a chunk of 1 KiB, below two of the test's batches
	tc := startHealCluster(t, 3, 2<<10, broker.HealConfig{
		DeadAfter: time.Hour, Interval: 100 * time.Millisecond, Rate: rate, ScrubInterval: time.Hour,
	})
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "chunked", 1)
	produceSealed(t, n1.b, "chunked", 40)
	sealed := sealedSegments(t, n1.b, "chunked")[0]
	holder := tc.node(sealed.Replicas[len(sealed.Replicas)-1])
	calls, batches := 0, 0
	for next := sealed.Base; next < sealed.End; calls++ {
		raw, err := holder.b.CopyCall(t.Context(), 2, (&dataplane.Copy{Segment: sealed.ID, From: next, MaxBytes: dataplane.MaxCopyBytes}).Encode())
		if err != nil {
			t.Fatalf("copy from %d: %v", next, err)
		}
		ans, err := dataplane.DecodeCopyAnswer(raw)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for p := ans.Batches; len(p) > 0; n++ {
			h, err := batch.ParseHeader(p)
			if err != nil || h.Length > len(p) {
				t.Fatalf("a served batch does not parse: %v", err)
			}
			p = p[h.Length:]
		}
		if n == 0 {
			t.Fatalf("no batch served from %d, below the seal's end %d", next, sealed.End)
		}
		if n > 1 && len(ans.Batches) > rate/4 {
			t.Fatalf("one call served %d batches, %d bytes; want at most %d bytes or one batch", n, len(ans.Batches), rate/4)
		}
		batches += n
		next = ans.Next
	}
	if batches < 2 {
		t.Fatalf("segment %d holds %d batch; the test needs at least two", sealed.ID, batches)
	}
}
