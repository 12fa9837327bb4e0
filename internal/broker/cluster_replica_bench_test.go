package broker_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/broker"
)

// BenchmarkClusterReplicatedProduce measures produces through the primary of a
// three-node in-process cluster (loopback TCP, disk), one record of 100
// bytes each, 64 or 1 in flight (a sync produce's latency), with one
// replica per segment and with three (every ack behind a quorum fsync).
func BenchmarkClusterReplicatedProduce(b *testing.B) {
	for _, c := range []struct{ replicas, inflight int }{{1, 64}, {3, 64}, {1, 1}, {3, 1}} {
		replicas := c.replicas
		b.Run(fmt.Sprintf("replicas=%d/inflight=%d", replicas, c.inflight), func(b *testing.B) {
			tc := startClusterWith(b, 3, func(nd *clusterNode) { nd.replicas = replicas })
			n1 := tc.nodes[0].b
			tc.createEverywhere(tc.nodes[0], "bench", 1)
			value := make([]byte, 100)
			if _, err := n1.Produce(b.Context(), "bench", []broker.Record{{Key: []byte("k"), Value: value}}); err != nil {
				b.Fatal(err)
			}
			slots := make(chan struct{}, c.inflight)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failed error
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				slots <- struct{}{}
				wg.Add(1)
				r := broker.Record{Key: []byte("k" + strconv.Itoa(i%16)), Value: value}
				err := n1.ProduceAsync(b.Context(), "bench", []broker.Record{r}, func(_ int, err error) {
					if err != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
					}
					<-slots
					wg.Done()
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
			b.StopTimer()
			if failed != nil {
				b.Fatal(failed)
			}
		})
	}
}
