package logstore

import (
	"path/filepath"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/malachi-log/malachi/internal/vfs"
)

// BenchmarkSave64Groups is one processing cycle of a node with 64 groups,
// each appending one 128-byte entry and a new hard state: one write and
// one fsync on the real disk. It reports cycles/s; the number depends on
// the disk's fsync latency.
//
//	go test -run '^$' -bench Save64Groups -benchtime 3s ./internal/raft/logstore
func BenchmarkSave64Groups(b *testing.B) {
	b.Run("disk", func(b *testing.B) { benchCycles(b, vfs.OS(), filepath.Join(b.TempDir(), "raft")) })
	// The same in memory: the store's own cost, without the fsync.
	b.Run("mem", func(b *testing.B) { benchCycles(b, vfs.NewMem(), dir) })
}

func benchCycles(b *testing.B, fs vfs.FS, d string) {
	s, err := Open(fs, d, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := make([]byte, 128)
	ups := make([]Update, 64)
	b.ResetTimer()
	for i := range b.N {
		index := uint64(i + 1)
		for g := range ups {
			ups[g] = Update{Group: uint64(g + 1), Entries: []*pb.Entry{ent(index, 1, string(data))},
				HardState: hardState(1, 1, index)}
		}
		if err := s.Save(ups); err != nil {
			b.Fatal(err)
		}
		if index%1000 == 0 {
			// Keep the live log bounded as a node would: snapshot, then
			// compact. Not part of the cycle being measured.
			b.StopTimer()
			for g := range ups {
				id := uint64(g + 1)
				if err := s.SetSnapshot(id, snapshot(index, 1, "state")); err != nil {
					b.Fatal(err)
				}
				if err := s.Compact(id, index); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}
