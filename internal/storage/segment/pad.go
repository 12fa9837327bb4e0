package segment

import "sync"

// Padding (Options.PadBytes) keeps the page cache's copy of a file in
// large pieces. Linux (6.x, ext4 and others with large folios) gives a
// buffered write folios no larger than the write's length and the
// alignment of its position allow, and a page keeps its folio until it
// is evicted. Appends of batches at arbitrary positions therefore leave
// the file in folios that shrink toward every write's ends: a topic of
// 1,024 ranges, written a few tens of KiB per range and round, sat in
// the page cache at 2.6 pages per physically contiguous run and was
// copied out by pread at 5.6-6.1 GB/s; written with 64 KiB padding, at
// 7.5 pages per run and 7.0-7.4 GB/s (docs/perf.md, ninth round of
// "Many ranges").
//
// With padding, a write that ends inside a region of PadBytes no write
// has reached yet fills that region with zeros to its end, in the same
// system call. Every region is then first written by one write that
// covers it from its start (the regions a write passes through are
// covered whole by it), so each gets folios as large as the region, and
// later writes only overwrite the zeros. Readers never see the zeros:
// they read up to the durable end. The file is longer than its data by
// less than PadBytes until TrimPadding, which a seal calls: a sealed
// file is exactly as long as its data.
//
// The cost: up to PadBytes of extra disk per file that takes appends,
// and each region's zeros cross into the page cache once, and reach the
// disk at most once (a checkpoint that finds them before the data).
// A crash leaves the zeros past the data; recovery cuts them off with
// the rest of an unsynced tail (they are no batch). The store pads only
// with its node journal on, where segment files are synced by
// checkpoints, not by every round.

// padTarget is where a write of n bytes at pos, into a file whose writes
// have reached filled (at least pos), zero-fills to: the end of the
// region of unit bytes the write ends in, when no write reached that
// region before and the write does not end on its boundary; 0 otherwise.
func padTarget(pos, n, filled, unit int64) int64 {
	end := pos + n
	if unit <= 0 || n <= 0 || end%unit == 0 {
		return 0
	}
	start := end - end%unit
	if start < filled {
		return 0 // the region is there already: the write overwrites or extends it
	}
	return start + unit
}

// splitBytes splits bs after its first k bytes.
func splitBytes(bs [][]byte, k int64) (head, tail [][]byte) {
	for i, b := range bs {
		if k >= int64(len(b)) {
			k -= int64(len(b))
			continue
		}
		if k == 0 {
			return bs[:i:i], bs[i:]
		}
		head = append(bs[:i:i], b[:k])
		tail = append([][]byte{b[k:]}, bs[i+1:]...)
		return head, tail
	}
	return bs, nil
}

// padBufs lends writePadded its buffers, kept all zero between uses.
var padBufs sync.Pool

// writePadded writes the bytes of bs at from followed by zeros up to
// padTo, in one system call.
func (s *Segment) writePadded(bs [][]byte, from, padTo int64) error {
	size := int(padTo - from)
	bp, _ := padBufs.Get().(*[]byte)
	if bp == nil || cap(*bp) < size {
		b := make([]byte, 0, max(size, int(s.pad)))
		bp = &b
	}
	b := (*bp)[:0]
	for _, t := range bs {
		b = append(b, t...)
	}
	data := len(b)
	_, err := s.f.WriteAt(b[:size], from)
	clear(b[:data])
	padBufs.Put(bp)
	return err
}

// TrimPadding cuts the zeros past the written data off the file, so that
// the file is exactly as long as its data. A seal calls it before the
// seal's fsync; like Append, it must not run beside another write.
func (s *Segment) TrimPadding() error {
	s.mu.RLock()
	end, filled, err := FileHeaderSize+s.written.Bytes, s.filled, s.err
	s.mu.RUnlock()
	switch {
	case err != nil:
		return err
	case filled <= end:
		return nil
	}
	if err := s.f.Truncate(end); err != nil {
		s.fail(err)
		return err
	}
	s.setFilled(end)
	return nil
}
