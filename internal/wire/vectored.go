package wire

import "encoding/binary"

// Fetch answers of wire v2 are mostly stored batches, megabytes of them.
// Encoding one with AppendOKFrame copies every batch into a fresh frame;
// AppendFetchBatchesPieces lays out the same frame as pieces for a
// vectored write (writev), so the batches go to the socket from where
// the node read them.

// inlineBatch is the largest batch copied into the framing rather than
// sent as a piece of its own: below it, an extra iovec costs more than
// the copy.
const inlineBatch = 4 << 10

// FetchBatchesHeadLen is how many bytes AppendFetchBatchesPieces lays out
// in its buffer for r: the framing, and the batches it copies.
func FetchBatchesHeadLen(r *FetchBatchesResponse) int {
	head := LenPrefixSize + ResponseHeaderSize + 4 + 1 + skipsSize
	if r.NextCursor != nil {
		head += 4 + len(*r.NextCursor)
	}
	for _, b := range r.Batches {
		head += 8 + 4
		if len(b.Batch) < inlineBatch {
			head += len(b.Batch)
		}
	}
	return head
}

// AppendFetchBatchesPieces appends to pieces the ok answer frame of
// fetch_batches (82), or of a subscribe_batches push (83), on correlation
// id corr. The pieces, written in order, are byte for byte the frame
// AppendOKFrame(nil, corr, r) encodes. The framing, and batches smaller
// than 4 KiB, are copied into buf from its start when it has room for
// FetchBatchesHeadLen(r) bytes, else into a buffer allocated to fit (a
// page over many ranges is mostly such batches: the caller lends a buffer
// it reuses, so the node does not touch a fresh megabyte per page). Every
// larger batch is a piece of its own that aliases r's batch, so r's
// batches, and buf, must stay unchanged until the pieces are written. It
// returns the pieces and the frame's length in bytes.
func AppendFetchBatchesPieces(pieces [][]byte, buf []byte, corr uint32, r *FetchBatchesResponse) ([][]byte, int) {
	head := FetchBatchesHeadLen(r)
	// buf never grows past head, so the pieces cut from it stay valid.
	if cap(buf) < head {
		buf = make([]byte, 0, head)
	}
	buf = buf[:0]
	buf, start := startResponse(buf, corr, CodeOK)
	buf = appendU32(appendNStr(buf, r.NextCursor), uint32(len(r.Batches)))
	cut := 0
	for _, b := range r.Batches {
		buf = appendU32(appendU64(buf, b.Range), uint32(len(b.Batch)))
		if len(b.Batch) < inlineBatch {
			buf = append(buf, b.Batch...)
			continue
		}
		pieces = append(pieces, buf[cut:len(buf):len(buf)], b.Batch)
		cut = len(buf)
	}
	buf = r.Skips.appendTo(buf)
	if cut < len(buf) {
		pieces = append(pieces, buf[cut:len(buf):len(buf)])
	}
	n := r.Size() + LenPrefixSize + ResponseHeaderSize
	binary.BigEndian.PutUint32(buf[start:], uint32(n-LenPrefixSize))
	return pieces, n
}
