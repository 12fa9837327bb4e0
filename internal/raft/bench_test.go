package raft

// Idle cost of the host: three hosts on the deterministic network, every
// group elected and idle; one benchmark iteration is one tick of all three
// (ticks, frame delivery, Process). At the default 100 ms tick, a host's
// CPU per wall second is ns/tick × 10 / 3.
//
//	go test -run '^$' -bench IdleTick -benchtime 200x ./internal/raft

import (
	"fmt"
	"testing"
)

func BenchmarkIdleTick(b *testing.B) {
	for _, count := range []int{8, 64, 256} {
		b.Run(fmt.Sprintf("groups=%d", count), func(b *testing.B) {
			n := newSim(b, 11, 3, nil)
			groups := groupIDs(count)
			for _, g := range groups {
				n.createGroup(g, n.ids)
			}
			n.runUntil("leaders", 400, func() bool { return n.allHaveLeaders(groups) })
			for range 20 {
				n.tick()
			}
			frames0, bytes0 := n.totals()
			b.ResetTimer()
			for b.Loop() {
				n.tick()
			}
			b.StopTimer()
			frames, bytes := n.totals()
			perTick := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(perTick*10/3/1e6, "cpu-ms/s/host")
			b.ReportMetric(float64(frames-frames0)/float64(b.N)*10, "frames/s")
			b.ReportMetric(float64(bytes-bytes0)/float64(b.N)*10, "bytes/s")
		})
	}
}
