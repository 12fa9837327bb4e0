package dataplane

import "fmt"

// KindCopy asks a node for the stored batches of one of its copies of a
// sealed segment, verbatim, so that a new replica can be filled from it
// (healing) or a damaged one replaced (scrubbing). It takes the next kind
// after KindRoll; 8-15 stay free for the first block.
//
//	copy    (call)  segment, from, max bytes
//	answer          next, end, sealed (1 byte), batches (byte string)
const KindCopy Kind = 17

// Bounds of a copy call. A request asks for at most MaxCopyBytes; the
// answer may exceed that by one batch, since the first batch is always
// sent whole, but never MaxCopyAnswerBytes (the largest stored batch,
// internal/batch.MaxBatchSize, or MaxCopyBytes, whichever is larger).
const (
	MaxCopyBytes       = 16 << 20
	MaxCopyAnswerBytes = 32 << 20
)

// Copy asks for the batches of segment Segment from offset From: whole
// batches, the first one holding From (or the first after it), at most
// MaxBytes in total except that the first batch is sent whole.
type Copy struct {
	Segment, From uint64
	MaxBytes      uint64
}

// CopyAnswer carries batches exactly as the answering node stores them
// (the receiver checks each batch's CRC again before storing it), Next,
// the offset after the last one (the request's From when none is sent),
// and End, where the answering copy ends: a receiver has the whole copy
// once Next reaches End on a Sealed copy.
type CopyAnswer struct {
	Next, End uint64
	Sealed    bool
	Batches   []byte
}

func (m *Copy) Encode() []byte {
	var e encoder
	e.kind(KindCopy)
	e.u(m.Segment)
	e.u(m.From)
	e.u(m.MaxBytes)
	return e.buf
}

func (m *CopyAnswer) Encode() []byte {
	e := encoder{buf: make([]byte, 0, len(m.Batches)+32)}
	e.status(StatusOK)
	e.u(m.Next)
	e.u(m.End)
	e.flag(m.Sealed)
	e.bytes(m.Batches)
	return e.buf
}

// DecodeCopy decodes a copy request, refusing a MaxBytes of 0 (a call
// that could never make progress) or above MaxCopyBytes.
func DecodeCopy(msg []byte) (Copy, error) {
	d := decoder{buf: msg}
	d.kind(KindCopy)
	m := Copy{Segment: d.u(), From: d.u(), MaxBytes: d.u()}
	if err := d.finish(); err != nil {
		return Copy{}, err
	}
	if m.MaxBytes == 0 || m.MaxBytes > MaxCopyBytes {
		return Copy{}, fmt.Errorf("%w: copy of segment %d asks for %d bytes, want 1..%d",
			ErrMalformed, m.Segment, m.MaxBytes, MaxCopyBytes)
	}
	return m, nil
}

// DecodeCopyAnswer decodes a copy answer; a refusal comes back as a
// *Refusal error. It refuses batches over MaxCopyAnswerBytes and a Next
// past End: batches beyond the end the copy claims.
func DecodeCopyAnswer(msg []byte) (CopyAnswer, error) {
	d, err := answer(msg)
	if err != nil {
		return CopyAnswer{}, err
	}
	m := CopyAnswer{Next: d.u(), End: d.u(), Sealed: d.flag()}
	if n := d.peekLen(); n > MaxCopyAnswerBytes {
		d.fail("copy answer of %d bytes, at most %d", n, MaxCopyAnswerBytes)
	}
	m.Batches = d.bytes()
	if err := d.finish(); err != nil {
		return CopyAnswer{}, err
	}
	if m.Next > m.End {
		return CopyAnswer{}, fmt.Errorf("%w: copy answer ends its batches at %d, past the copy's end %d",
			ErrMalformed, m.Next, m.End)
	}
	return m, nil
}

// peekLen reads the length prefix of the next byte string without
// consuming it, so a caller can apply a tighter bound than MaxBytes
// before the bytes are copied. It answers 0 after a failure.
func (d *decoder) peekLen() uint64 {
	if d.err != nil {
		return 0
	}
	saved := d.buf
	n := d.u()
	d.buf = saved
	return n
}
