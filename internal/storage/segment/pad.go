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
// With padding, an append that ends inside a region of PadBytes (aligned)
// that the file does not reach yet fills that region with zeros to its
// end, in the same system call as the batches' bytes in it. Every other
// system call of the append ends on a region boundary (gather), so every
// region is first written by one call that covers it from its start and
// gets folios as large as the region; later appends overwrite the zeros.
// Readers never see the zeros: they read up to the durable end. The file
// is longer than its data by less than PadBytes until TrimPadding, which
// a seal calls: a sealed file is exactly as long as its data.
//
// The cost: less than PadBytes of extra disk per file that takes
// appends, and each padded region's zeros cross into the page cache and,
// when written back before the batches fill them, reach the disk. A
// crash leaves the zeros past the data; recovery cuts them off with the
// rest of an unsynced tail (they are no batch). The store pads only with
// its node journal on, where segment files are synced by checkpoints,
// not by every round.

// The shape padding leaves a file in, which internal/segfile uses to
// tell padding from damage: a store pads in regions that are a multiple
// of PadAlign bytes and at most MaxPadBytes long, so a padded file ends on
// a PadAlign boundary with less than MaxPadBytes of zeros past its data.
const (
	PadAlign    = 512
	MaxPadBytes = 1 << 20
)

// padTarget is where an append of n bytes at pos, the file's data end,
// zero-fills to: the end of the region of unit bytes the append ends in,
// when the file does not reach into that region yet (it starts at or
// after pos) and the append does not end on its boundary; 0 otherwise.
// Past the data the file holds only the zeros of pos's own region, so
// whether a region is reached needs no more than pos.
func padTarget(pos, n, unit int64) int64 {
	end := pos + n
	if unit <= 0 || n <= 0 || end%unit == 0 {
		return 0
	}
	start := end - end%unit
	if start < pos {
		return 0 // the append stays in pos's region, which is there already
	}
	return start + unit
}

// toBoundary is how many bytes from at to the next multiple of unit (0
// when at is one).
func toBoundary(at, unit int64) int64 {
	return (unit - at%unit) % unit
}

// write writes batches, n bytes in all, contiguously from pos, padded
// when padTarget says so. A disk too full for the zeros takes the
// batches without them: the zeros serve only the page cache, and the
// store's free-space reserve is sized for the batches it has queued.
func (s *Segment) write(batches [][]byte, pos, n int64) error {
	padTo := padTarget(pos, n, s.pad)
	if padTo == 0 {
		return s.gather(batches, pos)
	}
	err := s.writePadded(batches, pos, padTo)
	if !noSpace(err) {
		return err
	}
	// The torn write's bytes go, so that they hold no space the retry
	// needs. A filesystem that needs space to truncate (copy-on-write)
	// may refuse: then the retry writes over them, and whatever of the
	// zeros stays past the data lies in the region the data end in, as
	// padding's zeros do, though the file may then end off a PadAlign
	// boundary (which internal/segfile reports as damage, naming the
	// zeros). Any other failure is Append's to handle.
	if terr := s.f.Truncate(pos); terr != nil && !noSpace(terr) {
		return err
	}
	return s.gather(batches, pos)
}

// writePadded writes batches from pos, then zeros up to padTo: the bytes
// before padTo's region by gather, and those in it with the zeros in one
// system call.
func (s *Segment) writePadded(batches [][]byte, pos, padTo int64) error {
	from := max(pos, padTo-s.pad)
	head, tail := splitBytes(batches, from-pos)
	if err := s.gather(head, pos); err != nil {
		return err
	}
	size := int(padTo - from)
	bp, _ := padBufs.Get().(*[]byte)
	if bp == nil || cap(*bp) < size {
		b := make([]byte, 0, max(size, int(s.pad)))
		bp = &b
	}
	b := (*bp)[:0]
	for _, t := range tail {
		b = append(b, t...)
	}
	data := len(b)
	_, err := s.f.WriteAt(b[:size], from)
	clear(b[:data])
	padBufs.Put(bp)
	return err
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

// TrimPadding cuts the zeros past the written data off the file, so that
// the file is exactly as long as its data. A seal calls it before the
// seal's fsync; like Append, it must not run beside another write. A disk
// too full to truncate (a copy-on-write filesystem may need space for it)
// is reported and changes nothing; any other failure is sticky.
func (s *Segment) TrimPadding() error {
	s.mu.RLock()
	end, err := FileHeaderSize+s.written.Bytes, s.err
	s.mu.RUnlock()
	if err != nil {
		return err
	}
	size, err := s.f.Size()
	if err != nil || size <= end {
		return err
	}
	if err := s.f.Truncate(end); err != nil {
		if !noSpace(err) {
			s.fail(err)
		}
		return err
	}
	return nil
}
