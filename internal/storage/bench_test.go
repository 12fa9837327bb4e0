package storage

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/storage/segment"
)

// benchBatch encodes recs records with val-byte random values at offset 0.
func benchBatch(b *testing.B, recs, val int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	rs := make([]segment.Record, recs)
	for i := range rs {
		v := make([]byte, val)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		rs[i] = segment.Record{Timestamp: 1_700_000_000_000, Key: []byte(fmt.Sprintf("key-%d", i)), Value: v}
	}
	out, err := segment.EncodeBatch(nil, 0, rs, segment.CodecNone)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// rebase sets a batch's base offset and CRC in one pass, as a primary
// encoding the batch at its final offset would; segment.Rebase also
// verifies the old CRC first, which is harness cost, not storage cost.
func rebase(b []byte, base uint64) {
	binary.LittleEndian.PutUint64(b[6:], base)
	binary.LittleEndian.PutUint32(b[2:], crc32.Checksum(b[6:], castagnoli))
}

// BenchmarkAppend measures durable appends (fdatasync before every ack) to
// one segment on the real filesystem under the test's temp directory. Each
// appender assigns the next offsets, queues its batch and waits for the
// ack, as a broker's produce path does; group commit shares each fsync
// among the appenders waiting at that moment. B/round is the average size
// of one write+fsync: compare the disk's fsync'd bandwidth at that size.
func BenchmarkAppend(b *testing.B) {
	for _, recs := range []int{1, 100, 1000} {
		for _, val := range []int{128, 1024} {
			for _, apps := range []int{1, 8} {
				name := fmt.Sprintf("recs=%d/val=%d/appenders=%d", recs, val, apps)
				b.Run(name, func(b *testing.B) { benchAppend(b, recs, val, apps, 1) })
			}
		}
	}
}

// BenchmarkAppendSegments spreads the appenders over many segments, with
// the node journal (one fdatasync per round) and without it (a round
// fdatasyncs every segment file it wrote).
func BenchmarkAppendSegments(b *testing.B) {
	for _, segs := range []int{1, 8, 64} {
		for _, journal := range []bool{true, false} {
			name := fmt.Sprintf("recs=100/val=128/appenders=%d/segments=%d/journal=%v", max(segs, 8), segs, journal)
			b.Run(name, func(b *testing.B) { benchAppendMode(b, 100, 128, max(segs, 8), segs, !journal) })
		}
	}
}

func benchAppend(b *testing.B, recs, val, apps, segs int) {
	benchAppendMode(b, recs, val, apps, segs, false)
}

func benchAppendMode(b *testing.B, recs, val, apps, segs int, noJournal bool) {
	s, err := Open(Config{Dir: b.TempDir(), NoJournal: noJournal})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	next := make([]uint64, segs)
	for i := range segs {
		if err := s.Create(SegmentID(i), 0); err != nil {
			b.Fatal(err)
		}
	}
	tmpl := benchBatch(b, recs, val)
	b.SetBytes(int64(len(tmpl)))
	var mu sync.Mutex
	var wg sync.WaitGroup
	b.ResetTimer()
	for a := range apps {
		wg.Add(1)
		go func(a int) {
			defer wg.Done()
			buf := append([]byte(nil), tmpl...)
			acked := make(chan error, 1)
			done := func(err error) { acked <- err }
			id := a % segs
			for i := a; i < b.N; i += apps {
				mu.Lock()
				rebase(buf, next[id])
				next[id] += uint64(recs)
				err := s.AppendAsync(context.Background(), SegmentID(id), buf, done)
				mu.Unlock()
				if err == nil {
					err = <-acked
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		}(a)
	}
	wg.Wait()
	b.StopTimer()
	st := s.Stats()
	if st.Rounds > 0 {
		b.ReportMetric(float64(st.Bytes)/float64(st.Rounds), "B/round")
		b.ReportMetric(float64(st.Batches)/float64(st.Rounds), "batches/round")
	}
}

// BenchmarkRead measures sequential reads of a 64 MiB sealed segment in
// 1 MiB steps (CRC verification included). The file is in the page cache,
// so this is the read path's CPU cost, not the disk's.
func BenchmarkRead(b *testing.B) {
	s, err := Open(Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	_ = s.Create(1, 0)
	tmpl := benchBatch(b, 100, 1024)
	var total int64
	for base := uint64(0); total < 64<<20; base += 100 {
		buf := append([]byte(nil), tmpl...)
		rebase(buf, base)
		if err := s.AppendAsync(context.Background(), 1, buf, nil); err != nil {
			b.Fatal(err)
		}
		total += int64(len(buf))
	}
	if _, err := s.Seal(context.Background(), 1); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var got int64
		for from := uint64(0); ; {
			buf, next, err := s.Read(1, from, 1<<20, math.MaxUint64)
			if err != nil {
				b.Fatal(err)
			}
			if len(buf) == 0 {
				break
			}
			got += int64(len(buf))
			from = next
		}
		if got != total {
			b.Fatalf("read %d of %d bytes", got, total)
		}
	}
}
