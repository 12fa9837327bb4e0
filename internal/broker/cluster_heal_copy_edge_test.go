package broker_test

// The copy call as a peer may send it, valid or not: only a sealed,
// undamaged copy is ever answered, whole batches that check, bounded.

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/dataplane"
)

func TestCopyCallAnswersOnlySealedUndamagedCopiesWithinBounds(t *testing.T) {
	tc := startHealCluster(t, 3, 2<<10, scrubEverything)
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "copycall", 1)
	produceSealed(t, n1.b, "copycall", 40)
	d, err := n1.b.DescribeTopic("copycall")
	if err != nil {
		t.Fatal(err)
	}
	segs := d.Ranges[0].Segments
	sealed, active := tc.wholeSealed(n1.b, "copycall"), segs[len(segs)-1]
	if !active.Active {
		t.Fatalf("want an active last segment: %+v", segs)
	}
	holder := tc.node(sealed.Replicas[len(sealed.Replicas)-1])
	call := func(seg, from, max uint64) (dataplane.CopyAnswer, error) {
		raw, err := holder.b.CopyCall(t.Context(), 2, (&dataplane.Copy{Segment: seg, From: from, MaxBytes: max}).Encode())
		if err != nil {
			return dataplane.CopyAnswer{}, err
		}
		return dataplane.DecodeCopyAnswer(raw)
	}

	// The whole copy, at the largest size a peer may ask: every batch
	// checks, Next walks to the seal's end and no further.
	next, got := sealed.Base, 0
	for next < sealed.End {
		ans, err := call(sealed.ID, next, dataplane.MaxCopyBytes)
		if err != nil {
			t.Fatalf("copy of sealed segment %d from %d: %v", sealed.ID, next, err)
		}
		if !ans.Sealed || ans.End != sealed.End || ans.Next <= next || ans.Next > sealed.End {
			t.Fatalf("answer from %d: next %d end %d sealed %v, seal ends at %d", next, ans.Next, ans.End, ans.Sealed, sealed.End)
		}
		for p := ans.Batches; len(p) > 0; {
			h, err := batch.ParseHeader(p)
			if err != nil || h.Length > len(p) || batch.Verify(p[:h.Length]) != nil {
				t.Fatalf("a served batch does not check: %v", err)
			}
			p = p[h.Length:]
			got++
		}
		next = ans.Next
	}
	if got == 0 {
		t.Fatal("no batch served")
	}
	if ans, err := call(sealed.ID, sealed.End, 1); err != nil || len(ans.Batches) != 0 {
		t.Fatalf("a copy from the seal's end: %d bytes, %v; want none", len(ans.Batches), err)
	}

	if _, err := call(active.ID, active.Base, 1<<20); err == nil {
		t.Fatalf("the active segment %d was served by a copy call", active.ID)
	}
	if _, err := call(sealed.ID+1<<40, 0, 1<<20); err == nil {
		t.Fatal("a segment the metadata does not know was served")
	}
	for _, bad := range [][]byte{nil, {0xff}, (&dataplane.Copy{Segment: sealed.ID, MaxBytes: dataplane.MaxCopyBytes + 1}).Encode()} {
		if _, err := holder.b.CopyCall(t.Context(), 2, bad); err == nil {
			t.Fatalf("a malformed copy call %x was answered", bad)
		}
	}

	// Damaged: once the scrubber finds it, the copy is refused.
	flipMiddleByte(t, holder.b.SegmentLogPath(sealed.ID))
	eventually(t, 30*time.Second, fmt.Sprintf("node %d refuses its damaged copy", holder.id), func() error {
		for from := sealed.Base; ; {
			ans, err := call(sealed.ID, from, 1<<20)
			if err != nil {
				return nil
			}
			if len(ans.Batches) == 0 || ans.Next >= sealed.End {
				return errors.New("the damaged copy was served whole")
			}
			from = ans.Next
		}
	})
	// And stays refused from its start, not only where the damage is.
	if _, err := call(sealed.ID, sealed.Base, 1<<20); err == nil {
		t.Fatal("a copy known to be damaged was served from its start")
	}
}
