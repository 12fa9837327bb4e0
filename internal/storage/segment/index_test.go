package segment

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// sealedTimed writes and seals a segment with an entry on every batch and
// non-monotonic timestamps, and returns its footer and index entries.
func sealedTimed(t *testing.T, mem vfs.FS) (Footer, []IndexEntry) {
	t.Helper()
	s := newSeg(t, mem, 10, Options{IndexIntervalBytes: 1})
	appendSync(t, s,
		mkTimedBatch(t, 10, 100, 200),
		mkTimedBatch(t, 12, 900),
		mkTimedBatch(t, 13, 300, 500),
		mkTimedBatch(t, 15, 1000),
	)
	ft := sealSeg(t, mem, s, 16, true)
	entries := s.IndexEntries()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var got [][2]int64
	for _, e := range entries {
		got = append(got, [2]int64{int64(e.Offset), e.PrefixMaxTimestamp})
	}
	if want := "[[10 200] [12 900] [13 900] [15 1000]]"; fmt.Sprint(got) != want {
		t.Fatalf("entries (offset, prefix max) %v, want %s", got, want)
	}
	return ft, entries
}

// writeIdx writes an .idx file of the given version whose entries hold
// the first width bytes of each version-2 entry, under a valid CRC.
func writeIdx(t *testing.T, fs vfs.FS, version uint16, width int, entries []IndexEntry) {
	t.Helper()
	le := binary.LittleEndian
	b := le.AppendUint16([]byte(idxMagic), version)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint32(b, uint32(len(entries)))
	for _, e := range entries {
		var full []byte
		full = le.AppendUint64(full, e.Offset)
		full = le.AppendUint64(full, uint64(e.Pos))
		full = le.AppendUint64(full, uint64(e.PrefixMaxTimestamp))
		b = append(b, full[:width]...)
	}
	b = le.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if err := WriteFileAtomic(fs, "/seg.idx", b); err != nil {
		t.Fatal(err)
	}
}

// TestIndexFileVersions: a current .idx is used as written; a version-1
// file (no timestamps) or one whose prefix maxima fall is refused, and the
// sealed segment rebuilds the same index from its batch headers.
func TestIndexFileVersions(t *testing.T) {
	mem := vfs.NewMem()
	ft, want := sealedTimed(t, mem)
	size := FileHeaderSize + ft.Bytes

	// A prefix max raised under a valid CRC is still consistent, so the
	// file is taken as is: proof that an open reads it.
	raised := append([]IndexEntry(nil), want...)
	raised[3].PrefixMaxTimestamp = 2000
	writeIdx(t, mem, idxVersion, idxEntrySize, raised)
	probe := &Segment{interval: 1}
	if !loadIndex(mem, probe, "/seg.idx", size) || fmt.Sprint(probe.idx.Entries()) != fmt.Sprint(raised) {
		t.Fatalf("current index not loaded: %v", probe.idx.Entries())
	}

	falling := append([]IndexEntry(nil), want...)
	falling[2].PrefixMaxTimestamp = 800
	for name, write := range map[string]func(){
		"version 1": func() { writeIdx(t, mem, 1, 16, want) },
		"falling":   func() { writeIdx(t, mem, idxVersion, idxEntrySize, falling) },
	} {
		write()
		if loadIndex(mem, &Segment{interval: 1}, "/seg.idx", size) {
			t.Errorf("%s: index accepted", name)
		}
		r, err := OpenSealed(mem, "/seg.log", "/seg.idx", ft, Options{IndexIntervalBytes: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.IndexEntries(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: rebuilt index %v, want %v", name, got, want)
		}
		if base, ok, err := r.SeekTime(901); base != 15 || !ok || err != nil {
			t.Errorf("%s: SeekTime(901) = %d, %v, %v", name, base, ok, err)
		}
		_ = r.Close()
	}
}
