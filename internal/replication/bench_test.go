package replication

// Benchmarks of the per-batch cost of the state machines, without I/O:
// one produce through a primary of three replicas (append, local fsync,
// one follower's ack, commit), the follower's side of it, and the codec.

import (
	"testing"

	"github.com/malachi-log/malachi/internal/batch"
)

func benchBatch(b *testing.B, size int) []byte {
	b.Helper()
	buf, err := batch.EncodeBatch(nil, 0, []batch.Record{{Value: make([]byte, size)}}, batch.CodecNone)
	if err != nil {
		b.Fatal(err)
	}
	return buf
}

func BenchmarkPrimaryCommit1KiB(b *testing.B) {
	p, err := NewPrimary(Config{Replicas: []uint64{1, 2, 3}})
	if err != nil {
		b.Fatal(err)
	}
	src := benchBatch(b, 1024)
	bufs := make([][]byte, 1024)
	for i := range bufs {
		bufs[i] = append([]byte(nil), src...)
	}
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_, _, err := p.Append(bufs[i%len(bufs)], int64(i))
		if err != nil {
			b.Fatal(err)
		}
		p.LocalSynced(p.End(), int64(i))
		if out := p.Acked(2, p.End(), int64(i)); len(out.Committed) != 1 {
			b.Fatalf("committed %v", out.Committed)
		}
		p.Acked(3, p.End(), int64(i))
	}
}

func BenchmarkFollowerAccept1KiB(b *testing.B) {
	f := NewFollower(1, 0, 0)
	src := benchBatch(b, 1024)
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		base := uint64(i)
		if err := batch.Restamp(src, base); err != nil {
			b.Fatal(err)
		}
		acc, err := f.Append(Append{Segment: 1, Base: base, End: base + 1, Watermark: base, Batches: src})
		if err != nil || len(acc.Write) != 1 {
			b.Fatalf("%+v %v", acc, err)
		}
		f.Synced(base + 1)
	}
}

func BenchmarkAppendCodec1KiB(b *testing.B) {
	m := Append{Segment: 1, Base: 1 << 30, End: 1<<30 + 1, Watermark: 1 << 30, Batches: benchBatch(b, 1024)}
	if err := batch.Restamp(m.Batches, m.Base); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 2048)
	b.SetBytes(int64(len(m.Batches)))
	b.ReportAllocs()
	for b.Loop() {
		buf = m.AppendTo(buf[:0])
		if _, err := Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}
