package control

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/metadata"
)

// BenchmarkCreateTopicTCP measures a create_topic through the vnode's
// leader and through a follower (one forward hop), on three nodes with the
// durable log on disk over loopback TCP. Each iteration is one create,
// answered once the leader has applied it (a quorum fsynced it).
func BenchmarkCreateTopicTCP(b *testing.B) {
	addrs := freeAddrs(b, 3)
	root := b.TempDir()
	nodes := map[uint64]tcpNode{1: openTCPNode(b, 1, addrs, root, true)}
	defer func() {
		for _, tn := range nodes {
			tn.close(b)
		}
	}()
	for _, id := range []uint64{2, 3} {
		nodes[id] = openTCPNode(b, id, addrs, root, false)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := nodes[id].n.Join(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
	waitReal(b, "placement", 60*time.Second, func() bool { return allPlaced(nodes) })
	// Topics of vnode 0 only, so "leader" and "follower" are fixed.
	var names []string
	for i := 0; len(names) < 100000; i++ {
		name := fmt.Sprintf("bench-%d", i)
		if g, _ := nodes[1].n.GroupOfTopic(name); g == VnodeGroup(0) {
			names = append(names, name)
		}
	}
	var leader, follower uint64
	for _, g := range nodes[1].n.Status().Groups {
		if g.Group == VnodeGroup(0) {
			leader = g.Leader
			follower = slices.DeleteFunc(slices.Clone(g.Voters), func(id uint64) bool { return id == leader })[0]
		}
	}
	next := 0
	for _, tc := range []struct {
		name string
		via  uint64
	}{{"leader", leader}, {"follower", follower}} {
		b.Run(tc.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for range b.N {
				name := names[next%len(names)]
				next++
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				res, err := nodes[tc.via].n.Apply(ctx, metadata.Command{V: metadata.Version, Kind: metadata.KindCreateTopic, Topic: name})
				cancel()
				if err != nil || res.Err != nil {
					b.Fatalf("%v %v", err, res.Err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkIdleCluster64Vnodes measures the CPU the control planes of
// three idle nodes (64 vnodes, default 100 ms ticks, durable logs, TCP)
// use together, per second of wall time, and the raft frames they send.
// Each iteration idles one second.
func BenchmarkIdleCluster64Vnodes(b *testing.B) {
	addrs := freeAddrs(b, 3)
	root := b.TempDir()
	open := func(id uint64, bootstrap bool) tcpNode {
		tn := openTCPNodeWith(b, id, addrs, root, bootstrap, 64, 100*time.Millisecond)
		return tn
	}
	nodes := map[uint64]tcpNode{1: open(1, true)}
	defer func() {
		for _, tn := range nodes {
			tn.close(b)
		}
	}()
	for _, id := range []uint64{2, 3} {
		nodes[id] = open(id, false)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := nodes[id].n.Join(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
	waitReal(b, "placement", 120*time.Second, func() bool { return allPlaced(nodes) })
	frames := func() (n uint64) {
		for _, tn := range nodes {
			n += tn.n.host.Stats().FramesSent
		}
		return n
	}
	b.ResetTimer()
	cpu0, wall0, f0 := processCPU(), time.Now(), frames()
	for range b.N {
		tk := time.NewTimer(time.Second)
		<-tk.C
	}
	wall := time.Since(wall0).Seconds()
	b.ReportMetric((processCPU()-cpu0).Seconds()/wall/3*100, "%core/node")
	b.ReportMetric(float64(frames()-f0)/wall, "frames/s")
}
