package vfs

import (
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkSyncFiles makes 1,024 files durable after each was written
// 16 KiB more, as a checkpoint at 1,024 ranges does: an fdatasync per
// file (16 at a time) against one filesystem sync. Run on the disk that
// matters (TMPDIR), with -benchtime=Nx.
func BenchmarkSyncFiles(b *testing.B) {
	for _, tc := range []struct {
		name     string
		minFiles int
	}{{"per-file", -1}, {"syncfs", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			dir := b.TempDir()
			files := make([]File, 1024)
			for i := range files {
				f, err := OS().OpenFile(fmt.Sprintf("%s/f%d", dir, i), os.O_CREATE|os.O_RDWR, FileMode)
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				files[i] = f
			}
			syncer, err := NewFilesSyncer(OS(), dir, tc.minFiles)
			if err != nil {
				b.Fatal(err)
			}
			defer syncer.Close()
			chunk := make([]byte, 16<<10)
			var cpu time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				for _, f := range files {
					if _, err := f.WriteAt(chunk, int64(i*len(chunk))); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				before := processCPU(b)
				if _, err := syncer.SyncFiles(files); err != nil {
					b.Fatal(err)
				}
				cpu += processCPU(b) - before
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the user and system CPU time of the whole process so far.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
