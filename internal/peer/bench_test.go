package peer

// Throughput of one-way frames over loopback TCP between two transports,
// for the record (go test -run x -bench Send); no threshold.

import (
	"sync/atomic"
	"testing"
)

func benchmarkSend(b *testing.B, size int) {
	var got atomic.Int64
	cfg := testConfig(2)
	recv, err := NewTCP(cfg)
	if err != nil {
		b.Fatal(err)
	}
	recv.Handle(ChannelRaft, func(uint64, []byte) { got.Add(1) })
	if err := recv.Start(); err != nil {
		b.Fatal(err)
	}
	defer recv.Close()
	send, err := NewTCP(testConfig(1))
	if err != nil {
		b.Fatal(err)
	}
	defer send.Close()
	send.SetAddr(2, recv.Addr())
	payload := make([]byte, size)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		sendRetrying(b, send, 2, ChannelRaft, payload)
	}
	waitFor(b, "every frame", func() bool { return got.Load() == int64(b.N) })
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	st := send.Stats().Nodes[2]
	if st.Writes > 0 {
		b.ReportMetric(float64(st.FramesSent)/float64(st.Writes), "frames/write")
	}
}

func BenchmarkSend128B(b *testing.B) { benchmarkSend(b, 128) }
func BenchmarkSend4KiB(b *testing.B) { benchmarkSend(b, 4<<10) }
