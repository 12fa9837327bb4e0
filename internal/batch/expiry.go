package batch

import "encoding/binary"

// ExpiredAt counts the records of a batch whose expiry has passed at nowMs
// (Expiry != 0 && Expiry <= nowMs). It answers from the header alone when
// it can: no expiry flag means none, and a max expiry that has passed
// means all; otherwise it reads each record's expiry and skips the rest
// of the record by its lengths, materialising nothing: a read of a TTL
// topic runs it on every batch it serves. With stopAtFirst it returns 1
// at the first expired record found, for a caller that only asks whether
// there is one.
//
// It does not check the CRC: it serves reads of batches the store or a
// peer's answer already checked. Every length is still checked against
// the bytes left, so a malformed batch is an ErrCorrupt error, never a
// read out of bounds.
func ExpiredAt(b []byte, nowMs int64, stopAtFirst bool) (n int, err error) {
	h, err := ParseHeader(b)
	if err != nil {
		return 0, err
	}
	switch {
	case !h.HasExpiry():
		return 0, nil
	case h.MaxExpiry != 0 && h.MaxExpiry <= nowMs:
		return int(h.RecordCount), nil
	}
	err = walkExpiries(b, h, func(e int64) bool {
		if e != 0 && e <= nowMs {
			n++
			return !stopAtFirst
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// walkExpiries calls fn with the expiry of each record of batch b (header
// h) in order, until fn returns false, skipping the rest of each record by
// its lengths.
func walkExpiries(b []byte, h BatchHeader, fn func(expiry int64) bool) error {
	if len(b) < h.Length {
		return corruptf("batch of %d bytes cut at %d", h.Length, len(b))
	}
	raw, err := decompress(b[HeaderSize:h.Length], h)
	if err != nil {
		return err
	}
	// An index into raw rather than a re-sliced raw: the loop then writes
	// no pointers, which costs write barriers while a GC runs.
	i, bad := 0, false
	for r := uint32(0); r < h.RecordCount; r++ {
		_, i, bad = uvarintAt(raw, i, bad) // offset delta
		i, bad = skipVarintAt(raw, i, bad)
		var e uint64
		e, i, bad = uvarintAt(raw, i, bad)
		i, bad = skipBytesAt(raw, i, bad)
		i, bad = skipBytesAt(raw, i, bad)
		var nh uint64
		nh, i, bad = uvarintAt(raw, i, bad)
		for ; nh > 0 && !bad; nh-- {
			i, bad = skipBytesAt(raw, i, bad)
			i, bad = skipBytesAt(raw, i, bad)
		}
		if bad || e > 1<<63-1 {
			return corruptf("record %d truncated or its expiry overflows", r)
		}
		if !fn(int64(e)) {
			return nil
		}
	}
	return nil
}

// uvarintAt reads the uvarint at b[i:]; once bad, it reads nothing. The
// one-byte case, most lengths and deltas, is read inline.
func uvarintAt(b []byte, i int, bad bool) (uint64, int, bool) {
	if bad || i >= len(b) {
		return 0, i, true
	}
	if c := b[i]; c < 0x80 {
		return uint64(c), i + 1, false
	}
	v, n := binary.Uvarint(b[i:])
	if n <= 0 {
		return 0, i, true
	}
	return v, i + n, false
}

func skipVarintAt(b []byte, i int, bad bool) (int, bool) {
	if bad || i >= len(b) {
		return i, true
	}
	if b[i] < 0x80 {
		return i + 1, false
	}
	_, n := binary.Varint(b[i:])
	if n <= 0 {
		return i, true
	}
	return i + n, false
}

// skipBytesAt passes the len+1 encoded string at b[i:].
func skipBytesAt(b []byte, i int, bad bool) (int, bool) {
	l, i, bad := uvarintAt(b, i, bad)
	switch {
	case bad:
		return i, true
	case l <= 1:
		return i, false
	case l-1 > uint64(len(b)-i):
		return i, true
	}
	return i + int(l-1), false
}

// MinExpiry is the earliest expiry among the records of a batch that have
// one, 0 when none has. It reads the records as ExpiredAt does, and does
// not check the CRC either.
func MinExpiry(b []byte) (int64, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return 0, err
	}
	if !h.HasExpiry() {
		return 0, nil
	}
	var first int64
	err = walkExpiries(b, h, func(e int64) bool {
		if e != 0 && (first == 0 || e < first) {
			first = e
		}
		return true
	})
	return first, err
}
