package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

const all = math.MaxInt

// mkBatch encodes one batch at the given offsets; each value names its offset.
func mkBatch(t testing.TB, offs ...uint64) []byte {
	t.Helper()
	recs := make([]segment.Record, len(offs))
	for i, o := range offs {
		recs[i] = segment.Record{Offset: o, Timestamp: int64(1000 + o), Value: []byte(fmt.Sprintf("v%d", o))}
	}
	b, err := segment.EncodeBatchAt(nil, recs, segment.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// span is a batch of n consecutive offsets from base.
func span(t testing.TB, base uint64, n int) []byte {
	offs := make([]uint64, n)
	for i := range offs {
		offs[i] = base + uint64(i)
	}
	return mkBatch(t, offs...)
}

func openMem(t *testing.T, fs vfs.FS) *Store {
	t.Helper()
	s, err := Open(Config{Dir: "/data", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// readOffsets reads a whole segment and returns its record offsets,
// checking every value.
func readOffsets(t *testing.T, s *Store, id SegmentID) []uint64 {
	t.Helper()
	buf, _, err := s.Read(id, 0, all, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	return decodeOffsets(t, buf)
}

func decodeOffsets(t testing.TB, buf []byte) []uint64 {
	t.Helper()
	parts, err := segment.SplitBatches(buf)
	if err != nil {
		t.Fatal(err)
	}
	var offs []uint64
	for _, p := range parts {
		recs, err := segment.DecodeRecords(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if string(r.Value) != fmt.Sprintf("v%d", r.Offset) {
				t.Fatalf("offset %d holds %q", r.Offset, r.Value)
			}
			offs = append(offs, r.Offset)
		}
	}
	return offs
}

func TestAppendRules(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		batches [][]uint64
		wantErr error
		want    string
	}{
		{"consecutive", [][]uint64{{100, 101}, {102}}, nil, "[100 101 102]"},
		{"holes", [][]uint64{{100, 105}, {200}}, nil, "[100 105 200]"},
		{"below base", [][]uint64{{99}}, ErrOffsetRegression, "[]"},
		{"overlap", [][]uint64{{100, 101}, {101, 102}}, ErrOffsetRegression, "[100 101]"},
		{"regression", [][]uint64{{100, 110}, {105}}, ErrOffsetRegression, "[100 110]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := openMem(t, vfs.NewMem())
			if err := s.Create(1, 100); err != nil {
				t.Fatal(err)
			}
			var err error
			for _, offs := range tc.batches {
				if err = s.Append(ctx, 1, mkBatch(t, offs...)); err != nil {
					break
				}
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if got := fmt.Sprint(readOffsets(t, s, 1)); got != tc.want {
				t.Fatalf("read %s, want %s", got, tc.want)
			}
		})
	}
}

func TestSynchronousErrors(t *testing.T) {
	ctx := context.Background()
	s := openMem(t, vfs.NewMem())
	_ = s.Create(1, 0)
	good := mkBatch(t, 0)
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-1] ^= 1
	called := false
	done := func(error) { called = true }
	tests := []struct {
		name  string
		id    SegmentID
		batch []byte
		want  error
	}{
		{"unknown segment", 9, good, ErrNotFound},
		{"crc", 1, corrupt, ErrBadBatch},
		{"two batches", 1, append(append([]byte(nil), good...), good...), ErrBadBatch},
		{"garbage", 1, []byte("nope"), ErrBadBatch},
	}
	for _, tc := range tests {
		if err := s.AppendAsync(ctx, tc.id, tc.batch, done); !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := s.Create(1, 5); !errors.Is(err, ErrExists) {
		t.Errorf("create twice: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.AppendAsync(cctx, 1, good, done); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: %v", err)
	}
	if called {
		t.Fatal("done called for a refused append")
	}
}

func TestReadThroughStore(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	_ = s.Create(7, 0)
	ctx := context.Background()
	b0, b1, b2 := mkBatch(t, 0, 1, 2), mkBatch(t, 10, 12), mkBatch(t, 13)
	for _, b := range [][]byte{b0, b1, b2} {
		if err := s.Append(ctx, 7, b); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name           string
		from           uint64
		maxBytes       int
		upTo           uint64
		want           string
		next           uint64
		wantErrNotFond bool
	}{
		{"from a hole", 5, all, math.MaxUint64, "[10 12 13]", 14, false},
		{"upTo", 0, all, 13, "[0 1 2 10 12]", 13, false},
		{"maxBytes", 0, len(b0) + len(b1) - 1, math.MaxUint64, "[0 1 2]", 3, false},
		{"past end", 14, all, math.MaxUint64, "[]", 14, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			buf, next, err := s.Read(7, tc.from, tc.maxBytes, tc.upTo)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(decodeOffsets(t, buf)); got != tc.want || next != tc.next {
				t.Fatalf("got %s next %d, want %s next %d", got, next, tc.want, tc.next)
			}
		})
	}
	if _, _, err := s.Read(8, 0, all, math.MaxUint64); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read unknown: %v", err)
	}
}

func TestSealFencesAndReopens(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	s := openMem(t, mem)
	_ = s.Create(1, 0)
	_ = s.Create(2, 50)
	for i := uint64(0); i < 20; i += 2 {
		if err := s.Append(ctx, 1, mkBatch(t, i, i+1)); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Append(ctx, 2, mkBatch(t, 50))
	ft, err := s.SealWith(ctx, 1, SealOptions{End: 25, Generation: 2})
	if err != nil {
		t.Fatal(err)
	}
	if ft.End != 25 || ft.Records != 20 || ft.Base != 0 || ft.Generation != 2 || ft.Bytes == 0 {
		t.Fatalf("footer %+v", ft)
	}
	if err := s.Append(ctx, 1, mkBatch(t, 30)); !errors.Is(err, ErrSealed) {
		t.Fatalf("append after seal: %v", err)
	}
	if again, err := s.Seal(ctx, 1); err != nil || again != ft {
		t.Fatalf("seal again: %+v %v", again, err)
	}
	if _, err := s.SealWith(ctx, 1, SealOptions{End: 26}); !errors.Is(err, ErrSealed) {
		t.Fatalf("seal with another end: %v", err)
	}
	if _, err := s.SealWith(ctx, 2, SealOptions{End: 10}); !errors.Is(err, ErrOffsetRegression) {
		t.Fatalf("seal below end: %v", err)
	}
	_ = s.Close()

	// A power loss keeps everything acknowledged and the seal.
	r := openMem(t, mem.CrashClone())
	infos := r.List()
	if len(infos) != 2 {
		t.Fatalf("list %+v", infos)
	}
	in1, in2 := infos[0], infos[1]
	if !in1.Sealed || in1.Footer == nil || *in1.Footer != ft || in1.End != 25 || in1.DurableEnd != 25 {
		t.Fatalf("sealed info %+v", in1)
	}
	if in2.Sealed || in2.Base != 50 || in2.End != 51 || in2.Records != 1 || in2.MaxTimestamp != 1050 {
		t.Fatalf("active info %+v", in2)
	}
	if got := readOffsets(t, r, 1); len(got) != 20 || got[19] != 19 {
		t.Fatalf("sealed read %v", got)
	}
	if err := r.Verify(1); err != nil {
		t.Fatal(err)
	}
	if err := r.Append(ctx, 2, mkBatch(t, 51)); err != nil {
		t.Fatal(err)
	}
	if err := r.Append(ctx, 1, mkBatch(t, 40)); !errors.Is(err, ErrSealed) {
		t.Fatalf("append to reopened sealed: %v", err)
	}
}

func TestDelete(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	s := openMem(t, mem)
	_ = s.Create(1, 0)
	_ = s.Create(2, 0)
	_ = s.Append(ctx, 1, mkBatch(t, 0))
	_, _ = s.Seal(ctx, 1)
	if err := s.Delete(1); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(2); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if len(s.List()) != 0 {
		t.Fatal("list not empty")
	}
	if names, _ := mem.CrashClone().ReadDir("/data"); fmt.Sprint(names) != "[journal]" {
		t.Fatalf("files left after delete: %v", names)
	}
	// The id can be used again.
	if err := s.Create(1, 100); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRemovesLeftovers(t *testing.T) {
	mem := vfs.NewMem()
	s := openMem(t, mem)
	_ = s.Create(3, 0)
	_ = s.Close()
	for _, name := range []string{"/data/00000000000000000009.seal", "/data/00000000000000000003.seal.tmp", "/data/notes.txt"} {
		f, _ := mem.OpenFile(name, 0x42, 0o644) // O_CREATE|O_RDWR
		_ = f.Close()
	}
	_ = mem.SyncDir("/data")
	r := openMem(t, mem)
	names, _ := mem.ReadDir("/data")
	if fmt.Sprint(names) != "[00000000000000000003.log journal notes.txt]" {
		t.Fatalf("files after open: %v", names)
	}
	if len(r.List()) != 1 {
		t.Fatal(r.List())
	}
}

func TestBackpressure(t *testing.T) {
	mem := vfs.NewMem()
	gate := make(chan struct{})
	fs := vfs.NewFaulty(mem, nil)
	s, err := Open(Config{Dir: "/data", FS: fs, MaxPendingBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.Create(1, 0)
	// Hold the commit goroutine inside fsync so nothing is released.
	entered := make(chan struct{}, 1)
	fs.SetRule(func(op vfs.Op, name string) error {
		if op == vfs.OpSync {
			entered <- struct{}{}
			<-gate
		}
		return nil
	})
	ctx := context.Background()
	if err := s.AppendAsync(ctx, 1, mkBatch(t, 0), nil); err != nil {
		t.Fatal(err)
	}
	<-entered
	// The queue is full and cannot drain: the append must wait until its
	// context ends, and report that, rather than queue.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.AppendAsync(cctx, 1, mkBatch(t, 1), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("append beyond MaxPendingBytes: %v", err)
	}
	fs.SetRule(nil)
	close(gate)
	if err := s.Append(ctx, 1, mkBatch(t, 1)); err != nil {
		t.Fatal(err)
	}
}

func TestHandleCache(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	s, err := Open(Config{Dir: "/data", FS: mem, MaxOpenFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for id := SegmentID(1); id <= 5; id++ {
		_ = s.Create(id, 0)
		_ = s.Append(ctx, id, mkBatch(t, 0, 1))
		if _, err := s.Seal(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				id := SegmentID(1 + (i+j)%5)
				buf, _, err := s.Read(id, 0, all, math.MaxUint64)
				if err != nil || len(decodeOffsets(t, buf)) != 2 {
					t.Errorf("read %d: %v", id, err)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	s.mu.Lock()
	n := s.lru.Len()
	s.mu.Unlock()
	if n > 2 {
		t.Fatalf("%d cached handles, limit 2", n)
	}
}

func TestClose(t *testing.T) {
	mem := vfs.NewMem()
	s, _ := Open(Config{Dir: "/data", FS: mem})
	_ = s.Create(1, 0)
	var mu sync.Mutex
	var results []error
	for i := uint64(0); i < 50; i++ {
		err := s.AppendAsync(context.Background(), 1, mkBatch(t, i), func(err error) {
			mu.Lock()
			results = append(results, err)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(results) != 50 {
		t.Fatalf("%d callbacks after Close", len(results))
	}
	for _, err := range results {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Append(context.Background(), 1, mkBatch(t, 50)); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if _, _, err := s.Read(1, 0, all, math.MaxUint64); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	r := openMem(t, mem.CrashClone())
	if got := readOffsets(t, r, 1); len(got) != 50 {
		t.Fatalf("after close and power loss: %d records", len(got))
	}
}
