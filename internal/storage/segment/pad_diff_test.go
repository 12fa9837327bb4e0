package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// padDiffSeeds is how many seeds TestPaddingMatchesUnpadded runs: each
// costs under a second, and ten times that under the race detector.
func padDiffSeeds() uint64 {
	if raceEnabled {
		return 2
	}
	return 8
}

// exactBatch is one batch at offset off of exactly n bytes (n >= ~80).
func exactBatch(t *testing.T, rng *rand.Rand, off uint64, n int) []byte {
	t.Helper()
	mk := func(v int) []byte {
		val := make([]byte, v+8)
		for i := 0; i < v; i += 8 {
			binary.LittleEndian.PutUint64(val[i:], rng.Uint64()) // zeros allowed: data may hold zeros
		}
		val = val[:v]
		b, err := EncodeBatchAt(nil, []Record{{Offset: off, Timestamp: int64(off), Value: val}}, CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	v := max(n-100, 0)
	for range 8 {
		b := mk(v)
		if len(b) == n {
			return b
		}
		v += n - len(b)
		if v < 0 {
			return mk(0)
		}
	}
	return mk(v)
}

func diffBatchSize(rng *rand.Rand) int {
	switch rng.IntN(10) {
	case 0:
		return 64 << 10
	case 1:
		return 64<<10 + 1 - rng.IntN(3)
	case 2:
		return 128<<10 + rng.IntN(40<<10)
	case 3:
		return 4096 + rng.IntN(3) - 1
	case 4:
		return 20<<10 + rng.IntN(50<<10)
	default:
		return 90 + rng.IntN(2000)
	}
}

type diffRun struct {
	fs   *vfs.MemFS
	log  *writeLog
	s    *Segment
	pad  int
	want []byte
}

// TestPaddingMatchesUnpadded: the same appends (random sizes, gathered
// runs, cuts, disk-full failures on any write) with PadBytes 0 and N give
// the same data prefix and read results; seal trims to the data exactly.
func TestPaddingMatchesUnpadded(t *testing.T) {
	nErr, nOK := map[int]int{}, map[int]int{}
	defer func() { t.Logf("faulted appends refused %v, taken %v", nErr, nOK) }()
	for seed := uint64(1); seed <= padDiffSeeds(); seed++ {
		pads := []int{0, 4096, 65536, 37, 512, 100000}
		runs := make([]*diffRun, len(pads))
		for i, p := range pads {
			mem := vfs.NewMem()
			log := &writeLog{}
			fs := recFS{FS: mem, log: log}
			s, err := Create(fs, "/seg.log", 1, 0, Options{IndexIntervalBytes: 4096, PadBytes: p})
			if err != nil {
				t.Fatal(err)
			}
			if err := mem.SyncDir("/"); err != nil {
				t.Fatal(err)
			}
			runs[i] = &diffRun{fs: mem, log: log, s: s, pad: p}
		}
		rng := rand.New(rand.NewPCG(seed, 99))
		at := uint64(0)
		for step := 0; step < 40; step++ {
			var bs [][]byte
			k := 1 + rng.IntN(4)
			if rng.IntN(4) == 0 {
				k = 5 + rng.IntN(30) // a gathered run of small batches
			}
			next := at
			for range k {
				n := diffBatchSize(rng)
				if k > 4 && rng.IntN(5) != 0 {
					n = 90 + rng.IntN(600)
				}
				b := exactBatch(t, rng, next, n)
				bs = append(bs, b)
				h, _ := ParseHeader(b)
				next = h.LastOffset() + 1 + uint64(rng.IntN(2))
			}
			op := rng.IntN(12)
			failAt := rng.IntN(4)     // which write fails (ENOSPC)
			keepFrac := rng.Float64() // how much of it lands
			var errs []error
			for _, r := range runs {
				truncFailed := false // op 3: the truncate before an unpadded retry failed
				switch op {
				case 0:
					// Every write after the failAt-th fails with ENOSPC.
					cnt := 0
					r.log.mu.Lock()
					r.log.fail = func(off, n int64) (int64, error) {
						cnt++
						if cnt > failAt {
							return int64(float64(n) * keepFrac), syscall.ENOSPC
						}
						return 0, nil
					}
					r.log.mu.Unlock()
				case 3:
					// A copy-on-write disk near full: the failAt-th write
					// fails, part of it written, and when it was a padded
					// write (reaching past the data) so does the truncate
					// before the unpadded retry, which then writes over
					// the torn bytes. (A torn write of data alone is cut
					// off by a truncate that works: one that failed would
					// fail the segment, padded or not.)
					dataEnd := int64(FileHeaderSize + len(r.want))
					for _, b := range bs {
						dataEnd += int64(len(b))
					}
					cnt, padFailed := 0, false
					truncFailed = false
					r.log.mu.Lock()
					r.log.fail = func(off, n int64) (int64, error) {
						if cnt++; cnt == failAt+1 {
							padFailed = off+n > dataEnd
							return int64(float64(n) * keepFrac), syscall.ENOSPC
						}
						return 0, nil
					}
					r.log.failTruncate = func() error {
						if padFailed {
							padFailed, truncFailed = false, true
							return syscall.ENOSPC
						}
						return nil
					}
					r.log.mu.Unlock()
				}
				err := r.s.Append(bs...)
				r.log.mu.Lock()
				r.log.fail, r.log.failTruncate = nil, nil
				r.log.mu.Unlock()
				if truncFailed && err != nil {
					t.Fatalf("seed %d pad %d: a padded write and the truncate after it failed, and the unpadded retry was not made: %v", seed, r.pad, err)
				}
				if err == nil {
					if err := r.s.Sync(); err != nil {
						t.Fatal(err)
					}
					for _, b := range bs {
						r.want = append(r.want, b...)
					}
				} else if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("seed %d pad %d: append: %v", seed, r.pad, err)
				} else if r.s.Err() != nil {
					t.Fatalf("seed %d pad %d: ENOSPC wedged the segment: %v", seed, r.pad, r.s.Err())
				}
				errs = append(errs, err)
				if op == 0 || op == 3 {
					if err != nil {
						nErr[r.pad]++
					} else {
						nOK[r.pad]++
					}
				}
			}
			// Whether an append succeeded may legitimately differ (pad
			// or not, the write count differs); keep runs in lockstep by
			// retrying failed appends without a fault.
			for i, r := range runs {
				if errs[i] != nil {
					if err := r.s.Append(bs...); err != nil {
						t.Fatalf("seed %d pad %d: retry: %v", seed, r.pad, err)
					}
					if err := r.s.Sync(); err != nil {
						t.Fatal(err)
					}
					for _, b := range bs {
						r.want = append(r.want, b...)
					}
				}
			}
			at = next
			if op == 1 && len(runs[0].want) > 0 {
				// Cut back to a random batch boundary.
				parts, err := SplitBatches(runs[0].want)
				if err != nil {
					t.Fatal(err)
				}
				keep := rng.IntN(len(parts) + 1)
				end := uint64(0)
				if keep > 0 {
					h, _ := ParseHeader(parts[keep-1])
					end = h.LastOffset() + 1
				}
				for _, r := range runs {
					c, err := r.s.PlanCut(end)
					if err != nil {
						t.Fatalf("plan cut: %v", err)
					}
					if err := r.s.ApplyCut(c); err != nil {
						t.Fatal(err)
					}
					r.want = r.want[:c.Pos-FileHeaderSize]
				}
				at = end
			}
			ref := runs[0]
			refFile, _ := vfs.ReadFile(ref.fs, "/seg.log")
			for _, r := range runs {
				b, err := vfs.ReadFile(r.fs, "/seg.log")
				if err != nil {
					t.Fatal(err)
				}
				end := FileHeaderSize + len(r.want)
				if !bytes.Equal(r.want, ref.want) {
					t.Fatalf("seed %d step %d pad %d: model diverged", seed, step, r.pad)
				}
				if len(b) < end || !bytes.Equal(b[:end], refFile[:end]) {
					t.Fatalf("seed %d step %d pad %d: data prefix differs from unpadded (file %d, data end %d)", seed, step, r.pad, len(b), end)
				}
				if r.pad > 0 && int64(len(b)-end) >= int64(r.pad) {
					t.Fatalf("seed %d step %d pad %d: %d bytes past the data", seed, step, r.pad, len(b)-end)
				}
				if r.pad == 0 && len(b) != end {
					t.Fatalf("unpadded file %d != %d", len(b), end)
				}
				for i := end; i < len(b); i++ {
					if b[i] != 0 {
						t.Fatalf("seed %d pad %d: nonzero at %d past data", seed, r.pad, i)
					}
				}
				got, _, err := r.s.Read(0, math.MaxInt, math.MaxUint64)
				if err != nil || !bytes.Equal(got, r.want) {
					t.Fatalf("seed %d pad %d: read %d bytes (%v), want %d", seed, r.pad, len(got), err, len(r.want))
				}
				// Random reads from random offsets agree with the reference.
				from := uint64(rng.IntN(int(at) + 1))
				mb := 1 + rng.IntN(300<<10)
				g1, n1, e1 := r.s.Read(from, mb, math.MaxUint64)
				g0, n0, e0 := ref.s.Read(from, mb, math.MaxUint64)
				if !bytes.Equal(g1, g0) || n1 != n0 || (e1 == nil) != (e0 == nil) {
					t.Fatalf("seed %d pad %d: Read(%d,%d) differs", seed, r.pad, from, mb)
				}
			}
			// Crash recovery: process crash (Clone) and power loss.
			if op == 2 {
				for _, r := range runs {
					for _, fsc := range []*vfs.MemFS{r.fs.Clone(), r.fs.CrashClone(), r.fs.PowerLoss(rand.New(rand.NewPCG(seed, uint64(step))))} {
						for _, cut := range []int64{-1, int64(FileHeaderSize + len(r.want))} {
							var rs *Segment
							var rec Recovery
							var err error
							if cut < 0 {
								rs, rec, err = Recover(fsc.Clone(), "/seg.log", Options{PadBytes: r.pad})
							} else {
								rs, rec, err = RecoverCut(fsc.Clone(), "/seg.log", Options{PadBytes: r.pad}, cut)
							}
							if err != nil || rec.Damage != nil {
								t.Fatalf("seed %d pad %d cut %d: recover: %v %v", seed, r.pad, cut, err, rec.Damage)
							}
							got, _, _ := rs.Read(0, math.MaxInt, math.MaxUint64)
							if !bytes.Equal(got, r.want) {
								t.Fatalf("seed %d pad %d cut %d: recovered %d bytes, want %d", seed, r.pad, cut, len(got), len(r.want))
							}
						}
					}
				}
			}
		}
		for _, r := range runs {
			if err := r.s.TrimPadding(); err != nil {
				t.Fatal(err)
			}
			if err := r.s.SyncFile(); err != nil {
				t.Fatal(err)
			}
			st, _ := r.fs.Stat("/seg.log")
			if st.Size != int64(FileHeaderSize+len(r.want)) {
				t.Fatalf("seed %d pad %d: sealed size %d want %d", seed, r.pad, st.Size, FileHeaderSize+len(r.want))
			}
			ft, err := r.s.Footer(at, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.s.Verify(&ft); err != nil {
				t.Fatalf("seed %d pad %d: verify: %v", seed, r.pad, err)
			}
			sealed, err := OpenSealed(r.fs, "/seg.log", "", ft, Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, _, _ := sealed.Read(0, math.MaxInt, math.MaxUint64)
			if !bytes.Equal(got, r.want) {
				t.Fatalf("sealed read differs")
			}
			// And after a power loss, the sealed (fsynced) file is exact.
			pl := r.fs.PowerLoss(rand.New(rand.NewPCG(seed, 5)))
			st, _ = pl.Stat("/seg.log")
			if st.Size != int64(FileHeaderSize+len(r.want)) {
				t.Fatalf("seed %d pad %d: sealed size after power loss %d", seed, r.pad, st.Size)
			}
		}
	}
}

// TestPaddedRegionsWholeRandom: with no faults and no cuts, every region
// past the first is first written by one write covering it, for mixed
// batch sizes (exactly 64 KiB, >128 KiB, gathered runs) and odd units.
func TestPaddedRegionsWholeRandom(t *testing.T) {
	for _, unit := range []int64{37, 512, 4096, 65536, 100000, 256 << 10} {
		for seed := uint64(1); seed <= padDiffSeeds()/2; seed++ {
			log := &writeLog{}
			fs := recFS{FS: vfs.NewMem(), log: log}
			s := newSeg(t, fs, 0, Options{IndexIntervalBytes: 4096, PadBytes: int(unit)})
			rng := rand.New(rand.NewPCG(seed, uint64(unit)))
			at := uint64(0)
			var want []byte
			for range 40 {
				var bs [][]byte
				k := 1 + rng.IntN(4)
				if rng.IntN(3) == 0 {
					k = 5 + rng.IntN(20)
				}
				for range k {
					n := diffBatchSize(rng)
					if k > 4 && rng.IntN(4) != 0 {
						n = 90 + rng.IntN(600)
					}
					b := exactBatch(t, rng, at, n)
					h, _ := ParseHeader(b)
					at = h.LastOffset() + 1
					bs = append(bs, b)
					want = append(want, b...)
				}
				appendSync(t, s, bs...)
			}
			checkRegionsWhole(t, log, unit)
			checkPadded(t, fs, s, want, unit, true)
		}
	}
}
