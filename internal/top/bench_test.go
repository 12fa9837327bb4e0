package top

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkParse parses a page of a node with 50 topics of 4 ranges and
// 5 groups each, about the size docs/operations.md gives for one.
func BenchmarkParse(b *testing.B) {
	p := page{uptime: 1, produced: 1e6, produceBuckets: [4]float64{1, 2, 3, 4}, raft: true, disk: "ok",
		topics: map[string][3]float64{}, lags: map[[2]string][2]float64{}}
	for i := range 50 {
		name := fmt.Sprintf("topic-%02d", i)
		p.topics[name] = [3]float64{4, 1e6, 1e4}
		for g := range 5 {
			p.lags[[2]string{name, fmt.Sprintf("group-%d", g)}] = [2]float64{100, 2}
		}
	}
	text := p.text()
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(strings.NewReader(text), time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}
