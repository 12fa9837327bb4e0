package wire

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"
)

// The pieces of a vectored fetch answer, written one after the other,
// must be the very frame AppendOKFrame encodes, for any mix of batch
// sizes either side of the inline limit.
func TestFetchBatchesPiecesAreTheFrame(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		corr := genU32.Draw(t, "corr")
		r := &FetchBatchesResponse{NextCursor: genNStr.Draw(t, "cursor")}
		sizes := rapid.SliceOfN(rapid.OneOf(
			rapid.IntRange(0, 64),
			rapid.IntRange(inlineBatch-2, inlineBatch+2),
			rapid.IntRange(0, 3*inlineBatch),
		), 0, 12).Draw(t, "sizes")
		for i, n := range sizes {
			b := make([]byte, n)
			for j := range b {
				b[j] = byte(i*31 + j)
			}
			r.Batches = append(r.Batches, RangeBatch{Range: genU64.Draw(t, "range"), Batch: b})
		}
		want := AppendOKFrame(nil, corr, r)

		// A buffer lent with room is written from its start whatever it
		// held; one without room, or none, is replaced.
		var lent []byte
		switch rapid.IntRange(0, 2).Draw(t, "lent") {
		case 1:
			lent = bytes.Repeat([]byte{0xee}, FetchBatchesHeadLen(r)+rapid.IntRange(0, 64).Draw(t, "spare"))
		case 2:
			lent = make([]byte, 0, rapid.IntRange(0, FetchBatchesHeadLen(r)-1).Draw(t, "short"))
		}
		before := [][]byte{[]byte("earlier")}
		pieces, n := AppendFetchBatchesPieces(before, lent, corr, r)
		if cap(lent) >= FetchBatchesHeadLen(r) && &pieces[1][0] != &lent[:1][0] {
			t.Fatalf("a lent buffer of %d bytes, room for %d, was not used", cap(lent), FetchBatchesHeadLen(r))
		}
		if !bytes.Equal(pieces[0], []byte("earlier")) {
			t.Fatalf("the pieces already in the slice were changed: %q", pieces[0])
		}
		got := bytes.Join(pieces[1:], nil)
		if !bytes.Equal(got, want) {
			t.Fatalf("pieces joined are %d bytes, AppendOKFrame gives %d; first difference at %d",
				len(got), len(want), firstDiff(got, want))
		}
		if n != len(want) {
			t.Fatalf("reported length %d, frame is %d bytes", n, len(want))
		}
		// A large batch goes out from where it is, not copied.
		for _, b := range r.Batches {
			if len(b.Batch) >= inlineBatch && !aliasesSome(pieces, b.Batch) {
				t.Fatalf("a batch of %d bytes was copied rather than referenced", len(b.Batch))
			}
		}
	})
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func aliasesSome(pieces [][]byte, b []byte) bool {
	for _, p := range pieces {
		if len(p) == len(b) && len(p) > 0 && &p[0] == &b[0] {
			return true
		}
	}
	return false
}
