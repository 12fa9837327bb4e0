package heal

import (
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/malachi-log/malachi/internal/batch"
)

// Seal is what the control plane recorded when it sealed a segment: the
// reference every copy of it is verified against.
type Seal struct {
	Segment            uint64
	Base, End, Records uint64
	// Bytes is the total size of the segment's batches.
	Bytes int64
	// ContentHash is xxhash64 of the batches, in order; 0 when the
	// metadata recorded none, and then it is not checked.
	ContentHash uint64
	// Generation above 0 marks a compacted rewrite, whose batches may
	// leave gaps between them; generation 0 batches follow each other
	// without a gap from Base.
	Generation uint32
}

// Counted reports whether the seal records its bytes and records. A
// failover seal records only the end its fence answers gave (Bytes 0 for
// a non-empty range); a copy of it is checked against that end alone,
// which is a batch boundary: its batches must reach exactly End.
func (s Seal) Counted() bool { return s.Bytes > 0 || s.End == s.Base }

// Reader answers whole stored batches of a copy, verbatim, starting with
// the one holding offset from (or the first after it), about maxBytes of
// them (the first whole), and nothing once the copy has no batch at or
// after from. Storage's Store.Read and the data plane's copy call both
// have this shape. An error wrapping batch.ErrCorrupt reports damage the
// reader found itself; any other error means the copy could not be read.
type Reader func(from uint64, maxBytes int) ([]byte, error)

// Outcome classifies a verification.
type Outcome uint8

const (
	// Whole: the copy matches its seal.
	Whole Outcome = iota
	// Damaged: a batch fails its checks, is out of place, or the copy
	// holds more than the seal says.
	Damaged
	// Short: every batch read is good but the copy stops before the
	// seal's end: a fill that has not finished, or a lost tail.
	Short
	// Unreadable: the copy could not be read (an I/O or transport error,
	// not damage); nothing is known about it.
	Unreadable
)

func (o Outcome) String() string {
	switch o {
	case Whole:
		return "whole"
	case Damaged:
		return "damaged"
	case Short:
		return "short"
	case Unreadable:
		return "unreadable"
	}
	return fmt.Sprintf("outcome-%d", uint8(o))
}

// Verdict is what Verify found. At is the offset where the damage starts
// (the first offset not covered by good batches), or where a short copy
// stops; Records and Bytes count the good batches before it.
type Verdict struct {
	Outcome Outcome
	At      uint64
	Reason  string
	Records uint64
	Bytes   int64
}

// Whole reports whether the copy matches its seal.
func (v Verdict) Whole() bool { return v.Outcome == Whole }

func (v Verdict) String() string {
	if v.Outcome == Whole {
		return fmt.Sprintf("whole: %d records, %d bytes", v.Records, v.Bytes)
	}
	return fmt.Sprintf("%v at offset %d: %s", v.Outcome, v.At, v.Reason)
}

// DefaultPageBytes is the read size Verify asks for when given none.
const DefaultPageBytes = 1 << 20

// Verify reads a copy through read, page by page, and checks it against
// seal: each batch's header and CRC (S1), offsets that start at the
// seal's base and follow each other (with gaps only in a compacted
// generation), nothing at or past the seal's end, and at the end the
// record count, the bytes and the content hash (for a seal that is not
// Counted, that the batches reach its end). Work is bounded by the
// seal: a copy that holds more bytes than the seal says is damaged as
// soon as it does.
func Verify(seal Seal, read Reader, pageBytes int) Verdict {
	if pageBytes <= 0 {
		pageBytes = DefaultPageBytes
	}
	v := verifier{seal: seal, next: seal.Base, hash: xxhash.New()}
	for {
		page, err := read(v.next, pageBytes)
		if err != nil {
			return v.readFailed(err)
		}
		if len(page) == 0 {
			return v.finish()
		}
		if bad, done := v.page(page); done {
			return bad
		}
	}
}

// verifier is Verify's running state: the good batches so far.
type verifier struct {
	seal    Seal
	next    uint64 // the offset after the last good batch
	records uint64
	bytes   int64
	hash    *xxhash.Digest
}

func (v *verifier) verdict(o Outcome, format string, args ...any) Verdict {
	return Verdict{Outcome: o, At: v.next, Reason: fmt.Sprintf(format, args...), Records: v.records, Bytes: v.bytes}
}

func (v *verifier) readFailed(err error) Verdict {
	if errors.Is(err, batch.ErrCorrupt) || errors.Is(err, batch.ErrBadVersion) || errors.Is(err, batch.ErrShortBatch) {
		return v.verdict(Damaged, "the reader found damage: %v", err)
	}
	return v.verdict(Unreadable, "%v", err)
}

// page checks the batches of one page; done is true with the verdict
// when one of them is bad.
func (v *verifier) page(page []byte) (bad Verdict, done bool) {
	for len(page) > 0 {
		n, bad, ok := v.batch(page)
		if !ok {
			return bad, true
		}
		page = page[n:]
	}
	return Verdict{}, false
}

// batch checks the batch at the start of b and counts it; n is its size.
func (v *verifier) batch(b []byte) (n int, bad Verdict, ok bool) {
	h, err := batch.ParseHeader(b)
	if err == nil {
		err = batch.Verify(b)
	}
	if err != nil {
		return 0, v.verdict(Damaged, "bad batch: %v", err), false
	}
	switch {
	case h.BaseOffset < v.next:
		return 0, v.verdict(Damaged, "batch at %d overlaps the previous one, which ends at %d", h.BaseOffset, v.next), false
	case h.BaseOffset > v.next && v.seal.Generation == 0:
		return 0, v.verdict(Damaged, "gap: the next batch starts at %d", h.BaseOffset), false
	case h.LastOffset() >= v.seal.End:
		return 0, v.verdict(Damaged, "batch [%d, %d] reaches past the seal's end %d", h.BaseOffset, h.LastOffset(), v.seal.End), false
	case !v.seal.Counted():
	case v.bytes+int64(h.Length) > v.seal.Bytes:
		return 0, v.verdict(Damaged, "more than the seal's %d bytes", v.seal.Bytes), false
	case v.records+uint64(h.RecordCount) > v.seal.Records:
		return 0, v.verdict(Damaged, "more than the seal's %d records", v.seal.Records), false
	}
	_, _ = v.hash.Write(b[:h.Length])
	v.next = h.LastOffset() + 1
	v.records += uint64(h.RecordCount)
	v.bytes += int64(h.Length)
	return h.Length, Verdict{}, true
}

// finish judges a copy whose batches were all good once its reader has
// no more. A copy may end below the seal's end only when it holds all the
// seal's records and bytes: a seal may record an end past the last batch.
func (v *verifier) finish() Verdict {
	switch {
	case !v.seal.Counted() && v.next < v.seal.End:
		return v.verdict(Short, "the batches end at %d, the seal at %d", v.next, v.seal.End)
	case v.records < v.seal.Records || v.bytes < v.seal.Bytes:
		return v.verdict(Short, "%d of %d records, %d of %d bytes", v.records, v.seal.Records, v.bytes, v.seal.Bytes)
	case v.seal.ContentHash != 0 && v.hash.Sum64() != v.seal.ContentHash:
		return Verdict{Outcome: Damaged, At: v.seal.Base, Reason: fmt.Sprintf("content hash %016x, the seal says %016x",
			v.hash.Sum64(), v.seal.ContentHash), Records: v.records, Bytes: v.bytes}
	}
	return Verdict{Outcome: Whole, At: v.seal.End, Records: v.records, Bytes: v.bytes}
}
