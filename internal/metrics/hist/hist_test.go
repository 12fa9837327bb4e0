package hist

import (
	"slices"
	"sync"
	"testing"
)

func TestObserveFillsTheBucketAtOrAboveTheValue(t *testing.T) {
	h := New([]int64{10, 1, 100, 10}) // unsorted and repeated: New cleans it
	for _, v := range []int64{0, 1, 2, 10, 11, 100, 101, 5000} {
		h.Observe(v)
	}
	s := h.Snapshot()
	if want := []int64{1, 10, 100}; !slices.Equal(s.Bounds, want) {
		t.Fatalf("bounds %v, want %v", s.Bounds, want)
	}
	// <=1: 0,1; <=10: 2,10; <=100: 11,100; above: 101,5000.
	if want := []uint64{2, 2, 2, 2}; !slices.Equal(s.Counts, want) {
		t.Fatalf("counts %v, want %v", s.Counts, want)
	}
	if want := []uint64{2, 4, 6}; !slices.Equal(s.Cumulative(), want) {
		t.Fatalf("cumulative %v, want %v", s.Cumulative(), want)
	}
	if s.Count != 8 || s.Sum != 0+1+2+10+11+100+101+5000 {
		t.Fatalf("count %d sum %d", s.Count, s.Sum)
	}
}

func TestConcurrentObservationsAreAllCounted(t *testing.T) {
	h := New(LatencyBounds)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				h.Observe(int64(g*1000 + i))
			}
		}()
	}
	wg.Wait()
	s := h.Snapshot()
	if s.Count != 8000 {
		t.Fatalf("count %d, want 8000", s.Count)
	}
	if want := int64(8000 * 7999 / 2); s.Sum != want {
		t.Fatalf("sum %d, want %d", s.Sum, want)
	}
}

func BenchmarkObserve(b *testing.B) {
	h := New(LatencyBounds)
	b.RunParallel(func(pb *testing.PB) {
		v := int64(0)
		for pb.Next() {
			v += 7919
			h.Observe(v % int64(20e6))
		}
	})
}
