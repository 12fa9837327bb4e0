package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// fataler is what the helpers below need of a test: *testing.T and
// *rapid.T both have it.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// tagged is a batch of n consecutive offsets from base whose values carry
// tag, so that two batches at the same offsets written at different times
// differ, and a cut batch that came back would be seen.
func tagged(t fataler, base uint64, n int, tag string) []byte {
	t.Helper()
	recs := make([]segment.Record, n)
	for i := range recs {
		o := base + uint64(i)
		recs[i] = segment.Record{Offset: o, Timestamp: int64(1000 + o), Key: []byte{byte(o)},
			Value: []byte(fmt.Sprintf("%s-%d", tag, o))}
	}
	b, err := segment.EncodeBatchAt(nil, recs, segment.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// chain is n batches of width records each from base, tagged.
func chain(t fataler, base uint64, n, width int, tag string) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = tagged(t, base+uint64(i*width), width, tag)
	}
	return out
}

// batchesOf reads segment id whole and splits it into batches.
func batchesOf(t fataler, s *Store, id SegmentID) [][]byte {
	t.Helper()
	buf, _, err := s.Read(id, 0, math.MaxInt, math.MaxUint64)
	if err != nil {
		t.Fatalf("read %d: %v", id, err)
	}
	parts, err := segment.SplitBatches(buf)
	if err != nil {
		t.Fatal(err)
	}
	return parts
}

// sameBatches reports whether got is exactly want, batch for batch.
func sameBatches(got, want [][]byte) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			return false
		}
	}
	return true
}

// endOf is the end a copy holding bs has, given its base.
func endOf(t fataler, base uint64, bs [][]byte) uint64 {
	if len(bs) == 0 {
		return base
	}
	h, err := segment.ParseHeader(bs[len(bs)-1])
	if err != nil {
		t.Fatal(err)
	}
	return h.LastOffset() + 1
}

func appendAll(t testing.TB, s *Store, id SegmentID, bs [][]byte) {
	t.Helper()
	for _, b := range bs {
		if err := s.AppendAt(context.Background(), id, b); err != nil {
			t.Fatalf("append at to %d: %v", id, err)
		}
	}
}

// bothModes runs f with the node journal on and off.
func bothModes(t *testing.T, f func(t *testing.T, noJournal bool)) {
	for _, noJournal := range []bool{false, true} {
		t.Run(fmt.Sprintf("journal=%v", !noJournal), func(t *testing.T) { f(t, noJournal) })
	}
}

func openMode(t *testing.T, fs vfs.FS, noJournal bool) *Store {
	t.Helper()
	return openMemCfg(t, Config{Dir: "/data", FS: fs, NoJournal: noJournal})
}

// A follower's copy takes a batch only at exactly its end, counting
// queued appends, and a refusal says where it ends; the primary's path
// keeps taking any base at or above the end.
func TestAppendAtRefusesGapAndRepeat(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		ctx := context.Background()
		s := openMode(t, vfs.NewMem(), noJournal)
		if err := s.Create(1, 100); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendAt(ctx, 1, span(t, 100, 3)); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name  string
			batch []byte
		}{
			{"gap", span(t, 104, 1)},
			{"repeat", span(t, 100, 3)},
			{"overlap", span(t, 102, 2)},
		} {
			err := s.AppendAt(ctx, 1, tc.batch)
			if end, ok := CopyEnd(err); !errors.Is(err, ErrOffsetGap) || !ok || end != 103 {
				t.Fatalf("%s: err %v (end %d, %v), want ErrOffsetGap with end 103", tc.name, err, end, ok)
			}
		}
		// Queued appends count: the second is taken at the first's end
		// before the first is durable.
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, b := range [][]byte{span(t, 103, 2), span(t, 105, 1)} {
			wg.Add(1)
			if err := s.AppendAtAsync(ctx, 1, b, func(err error) { errs[i] = err; wg.Done() }); err != nil {
				t.Fatalf("queued append %d: %v", i, err)
			}
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("queued appends: %v", errs)
		}
		// The primary's path is unchanged: a hole between batches is fine.
		if err := s.Append(ctx, 1, span(t, 110, 1)); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(readOffsets(t, s, 1)); got != "[100 101 102 103 104 105 110]" {
			t.Fatalf("read %s", got)
		}
		if err := s.AppendAt(ctx, 1, span(t, 111, 1)); err != nil {
			t.Fatalf("append at the end after a hole: %v", err)
		}
		if _, err := s.Seal(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendAt(ctx, 1, span(t, 112, 1)); !errors.Is(err, ErrSealed) {
			t.Fatalf("append at a sealed copy: %v", err)
		}
	})
}

// holdSync makes the next fsync of a file whose name ends in suffix wait
// until the returned release is called; entered closes when it is held.
func holdSync(fs *vfs.FaultyFS, suffix string) (entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fs.SetRule(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasSuffix(name, suffix) {
			once.Do(func() {
				close(in)
				<-out
			})
		}
		return nil
	})
	var rel sync.Once
	return in, func() { rel.Do(func() { fs.SetRule(nil); close(out) }) }
}

// Ends answers where the next append goes and what is fsynced: while a
// batch waits for its fsync, the two differ, and a fence answers the
// fsynced end after waiting for it.
func TestEndsAndFenceAnswerDurableEnd(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		ctx := context.Background()
		fs := vfs.NewFaulty(vfs.NewMem(), nil)
		s := openMode(t, fs, noJournal)
		if err := s.Create(1, 0); err != nil {
			t.Fatal(err)
		}
		appendAll(t, s, 1, chain(t, 0, 2, 2, "a"))
		suffix := journalExt
		if noJournal {
			suffix = logExt
		}
		entered, release := holdSync(fs, suffix)
		defer release()
		acked := make(chan error, 1)
		if err := s.AppendAtAsync(ctx, 1, span(t, 4, 3), func(err error) { acked <- err }); err != nil {
			t.Fatal(err)
		}
		<-entered
		if q, d, err := s.Ends(1); err != nil || q != 7 || d != 4 {
			t.Fatalf("ends while the fsync is held: queued %d durable %d (%v), want 7 and 4", q, d, err)
		}
		if in, _ := s.Info(1); in.End != 7 || in.DurableEnd != 4 {
			t.Fatalf("info while the fsync is held: end %d durable %d", in.End, in.DurableEnd)
		}
		fenced := make(chan uint64, 1)
		go func() {
			end, err := s.Fence(ctx, 1)
			if err != nil {
				t.Error(err)
			}
			fenced <- end
		}()
		waitFor(t, "the fence to latch", func() bool {
			in, _ := s.Info(1)
			return in.Fenced
		})
		if err := s.AppendAt(ctx, 1, span(t, 7, 1)); !errors.Is(err, ErrSealed) {
			t.Fatalf("append after the fence: %v", err)
		}
		release()
		if err := <-acked; err != nil {
			t.Fatal(err)
		}
		if end := <-fenced; end != 7 {
			t.Fatalf("fence answered %d, want 7", end)
		}
		if q, d, _ := s.Ends(1); q != 7 || d != 7 {
			t.Fatalf("ends after the fsync: %d %d", q, d)
		}
	})
}

// Truncate cuts back to a batch boundary, durably, and the copy then
// takes appends at the new end; what it refuses, it says why.
func TestTruncateRules(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		ctx := context.Background()
		mem := vfs.NewMem()
		s := openMode(t, mem, noJournal)
		if err := s.Create(1, 10); err != nil {
			t.Fatal(err)
		}
		old := chain(t, 10, 4, 3, "old") // 10..12, 13..15, 16..18, 19..21
		appendAll(t, s, 1, old)

		err := s.Truncate(ctx, 1, 23)
		if end, ok := CopyEnd(err); !errors.Is(err, ErrBehind) || !ok || end != 22 {
			t.Fatalf("cut above the end: %v", err)
		}
		if err := s.Truncate(ctx, 1, 14); !errors.Is(err, ErrNotBoundary) {
			t.Fatalf("cut inside a batch: %v", err)
		}
		if err := s.Truncate(ctx, 1, 9); !errors.Is(err, ErrOffsetRegression) {
			t.Fatalf("cut below the base: %v", err)
		}
		if err := s.Truncate(ctx, 1, 22); err != nil {
			t.Fatalf("cut at the end: %v", err)
		}
		if err := s.Truncate(ctx, 1, 16); err != nil {
			t.Fatal(err)
		}
		if got := batchesOf(t, s, 1); !sameBatches(got, old[:2]) {
			t.Fatalf("after the cut: %d batches, want the first 2", len(got))
		}
		if q, d, _ := s.Ends(1); q != 16 || d != 16 {
			t.Fatalf("ends after the cut: %d %d", q, d)
		}
		// Durable when it returns: a power loss right now keeps the cut.
		lost := openMode(t, mem.CrashClone(), noJournal)
		if got := batchesOf(t, lost, 1); !sameBatches(got, old[:2]) {
			t.Fatalf("after a power loss: %d batches, want the cut copy", len(got))
		}
		_ = lost.Close()

		if err := s.AppendAt(ctx, 1, span(t, 19, 1)); !errors.Is(err, ErrOffsetGap) {
			t.Fatalf("append at the old end: %v", err)
		}
		fresh := chain(t, 16, 2, 3, "new")
		appendAll(t, s, 1, fresh)
		want := append(append([][]byte{}, old[:2]...), fresh...)
		if got := batchesOf(t, s, 1); !sameBatches(got, want) {
			t.Fatal("after appending at the cut: wrong batches")
		}
		// A fenced copy may still be cut; to its base, even.
		if _, err := s.Fence(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := s.Truncate(ctx, 1, 10); err != nil {
			t.Fatalf("cut a fenced copy to its base: %v", err)
		}
		if got := batchesOf(t, s, 1); len(got) != 0 {
			t.Fatalf("cut to the base left %d batches", len(got))
		}
		if _, err := s.SealWith(ctx, 1, SealOptions{Exact: true, End: 10}); err != nil {
			t.Fatal(err)
		}
		if err := s.Truncate(ctx, 1, 10); !errors.Is(err, ErrSealed) || !strings.Contains(err.Error(), "never cut") {
			t.Fatalf("cut a sealed copy: %v", err)
		}
		r := reopenMode(t, s, mem, noJournal)
		if in, err := r.Info(1); err != nil || !in.Sealed || in.Footer.End != 10 || in.Footer.Records != 0 {
			t.Fatalf("after reopening: %+v, %v", in, err)
		}
	})
}

func reopenMode(t *testing.T, s *Store, mem *vfs.MemFS, noJournal bool) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return openMode(t, mem, noJournal)
}

// A copy is sealed at exactly the end the control plane recorded: one
// that is behind is refused with its end and left open to catch up, one
// that is ahead is refused unless the seal says to cut, and then it is
// cut and sealed with the footer of a copy that never held the rest.
func TestSealExact(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		ctx := context.Background()
		mem := vfs.NewMem()
		s := openMode(t, mem, noJournal)
		bs := chain(t, 0, 5, 2, "b") // ends at 10
		for _, id := range []SegmentID{1, 2, 3} {
			if err := s.Create(id, 0); err != nil {
				t.Fatal(err)
			}
		}
		appendAll(t, s, 1, bs[:2]) // behind
		appendAll(t, s, 2, bs)     // ahead
		appendAll(t, s, 3, bs[:3]) // exactly there
		seal := SealOptions{Exact: true, End: 6, Generation: 1}

		_, err := s.SealWith(ctx, 1, seal)
		if end, ok := CopyEnd(err); !errors.Is(err, ErrBehind) || !ok || end != 4 {
			t.Fatalf("seal a copy that is behind: %v", err)
		}
		if in, _ := s.Info(1); in.Fenced || in.Sealed {
			t.Fatalf("a refused seal fenced the copy: %+v", in)
		}
		appendAll(t, s, 1, bs[2:3]) // catches up
		_, err = s.SealWith(ctx, 2, seal)
		if end, ok := CopyEnd(err); !errors.Is(err, ErrAhead) || !ok || end != 10 {
			t.Fatalf("seal a copy that is ahead, without cutting: %v", err)
		}
		if _, err := s.SealWith(ctx, 2, SealOptions{Exact: true, End: 5, TruncateAbove: true}); !errors.Is(err, ErrNotBoundary) {
			t.Fatalf("seal inside a batch: %v", err)
		}
		cut := seal
		cut.TruncateAbove = true
		var fts []Footer
		for _, id := range []SegmentID{1, 2, 3} {
			o := seal
			if id == 2 {
				o = cut
			}
			ft, err := s.SealWith(ctx, id, o)
			if err != nil {
				t.Fatalf("seal %d: %v", id, err)
			}
			fts = append(fts, ft)
			if got := batchesOf(t, s, id); !sameBatches(got, bs[:3]) {
				t.Fatalf("segment %d sealed with %d batches", id, len(got))
			}
		}
		if fts[0] != fts[1] || fts[1] != fts[2] || fts[0].End != 6 || fts[0].Records != 6 {
			t.Fatalf("footers differ: %+v", fts)
		}
		if ft, err := s.SealWith(ctx, 2, cut); err != nil || ft != fts[1] {
			t.Fatalf("sealing again at the same end: %+v, %v", ft, err)
		}
		if _, err := s.SealWith(ctx, 2, SealOptions{Exact: true, End: 8}); !errors.Is(err, ErrSealed) {
			t.Fatalf("sealing again at another end: %v", err)
		}
		r := reopenMode(t, s, mem, noJournal)
		for _, id := range []SegmentID{1, 2, 3} {
			if err := r.Verify(id); err != nil {
				t.Fatalf("verify %d after reopening: %v", id, err)
			}
		}
	})
}

// Two copies holding the same batches have byte-identical footers and
// files whatever rounds the batches arrived in: one at a time, all in one
// round, split by a restart whose replay re-appended some, or with more
// that a cut then dropped. The content hash streams the batch bytes, so it
// does not depend on how they were grouped.
func TestFooterSameWhateverGrouping(t *testing.T) {
	ctx := context.Background()
	bs := chain(t, 50, 12, 3, "f")
	end := endOf(t, 50, bs)
	build := map[string]func(t *testing.T) *vfs.MemFS{
		"one at a time": func(t *testing.T) *vfs.MemFS {
			mem := vfs.NewMem()
			s := openMode(t, mem, false)
			mustCreate(t, s, 1, 50)
			appendAll(t, s, 1, bs)
			sealAt(t, s, 1, end)
			return mem
		},
		"one round, no journal": func(t *testing.T) *vfs.MemFS {
			mem := vfs.NewMem()
			s := openMode(t, mem, true)
			mustCreate(t, s, 1, 50)
			var wg sync.WaitGroup
			for _, b := range bs {
				wg.Add(1)
				if err := s.AppendAtAsync(ctx, 1, b, func(error) { wg.Done() }); err != nil {
					t.Fatal(err)
				}
			}
			wg.Wait()
			sealAt(t, s, 1, end)
			return mem
		},
		"split by a crash and a replay": func(t *testing.T) *vfs.MemFS {
			mem := vfs.NewMem()
			s := openMode(t, mem, false)
			mustCreate(t, s, 1, 50)
			appendAll(t, s, 1, bs[:7])
			crashed := mem.Clone()
			_ = s.Close()
			r := openMode(t, crashed, false)
			appendAll(t, r, 1, bs[7:])
			sealAt(t, r, 1, end)
			return crashed
		},
		"cut back from a longer copy": func(t *testing.T) *vfs.MemFS {
			mem := vfs.NewMem()
			s := openMode(t, mem, false)
			mustCreate(t, s, 1, 50)
			appendAll(t, s, 1, bs)
			appendAll(t, s, 1, chain(t, end, 3, 2, "unacked"))
			if _, err := s.SealWith(ctx, 1, SealOptions{Exact: true, End: end, TruncateAbove: true}); err != nil {
				t.Fatal(err)
			}
			return mem
		},
		"cut and appended again": func(t *testing.T) *vfs.MemFS {
			mem := vfs.NewMem()
			s := openMode(t, mem, true)
			mustCreate(t, s, 1, 50)
			appendAll(t, s, 1, bs[:5])
			appendAll(t, s, 1, chain(t, endOf(t, 50, bs[:5]), 4, 1, "other"))
			if err := s.Truncate(ctx, 1, endOf(t, 50, bs[:5])); err != nil {
				t.Fatal(err)
			}
			appendAll(t, s, 1, bs[5:])
			sealAt(t, s, 1, end)
			return mem
		},
	}
	files := map[string][3][]byte{}
	for name, f := range build {
		mem := f(t)
		var got [3][]byte
		for i, ext := range []string{logExt, sealExt, idxExt} {
			got[i] = memRead(t, mem, "/data/00000000000000000001"+ext)
		}
		files[name] = got
	}
	ref := files["one at a time"]
	for name, got := range files {
		for i, ext := range []string{logExt, sealExt, idxExt} {
			if !bytes.Equal(got[i], ref[i]) {
				t.Errorf("%s: %s differs from the copy appended one batch at a time", name, ext)
			}
		}
	}
}

func mustCreate(t *testing.T, s *Store, id SegmentID, base uint64) {
	t.Helper()
	if err := s.Create(id, base); err != nil {
		t.Fatal(err)
	}
}

func sealAt(t *testing.T, s *Store, id SegmentID, end uint64) Footer {
	t.Helper()
	ft, err := s.SealWith(context.Background(), id, SealOptions{Exact: true, End: end})
	if err != nil {
		t.Fatalf("seal %d at %d: %v", id, end, err)
	}
	return ft
}

// Readers running while copies are cut and appended again never see an
// error or a torn batch: each read is a prefix of some batches the copy
// held, whole and checked.
func TestReadsDuringCuts(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		ctx := context.Background()
		s := openMode(t, vfs.NewMem(), noJournal)
		mustCreate(t, s, 1, 0)
		stop := make(chan struct{})
		errs := make(chan error, 1)
		go func() {
			defer close(errs)
			for {
				select {
				case <-stop:
					return
				default:
				}
				buf, _, err := s.Read(1, 0, math.MaxInt, math.MaxUint64)
				if err == nil {
					_, err = segment.SplitBatches(buf)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
		for round := range 30 {
			appendAll(t, s, 1, chain(t, endOfCopy(t, s), 4, 2, fmt.Sprintf("r%d", round)))
			q, _, _ := s.Ends(1)
			if err := s.Truncate(ctx, 1, q-4); err != nil {
				t.Fatal(err)
			}
		}
		close(stop)
		if err := <-errs; err != nil {
			t.Fatalf("read during cuts: %v", err)
		}
	})
}

func endOfCopy(t *testing.T, s *Store) uint64 {
	t.Helper()
	q, _, err := s.Ends(1)
	if err != nil {
		t.Fatal(err)
	}
	return q
}
