package storage

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/vfs"
)

// sealedThenDamaged seals a copy of three batches, lets damage do its work
// on the closed store's files, and opens the store again: the copy must
// come back sealed and damaged.
func sealedThenDamaged(t *testing.T, damage func(mem *vfs.MemFS)) *Store {
	t.Helper()
	mem := vfs.NewMem()
	s := openMode(t, mem, false)
	mustCreate(t, s, 1, 0)
	appendAll(t, s, 1, chain(t, 0, 3, 2, "s"))
	sealAt(t, s, 1, 6)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	damage(mem)
	r := openMode(t, mem, false)
	if in, err := r.Info(1); err != nil || !in.Sealed || !IsCorrupt(in.Damage) {
		t.Fatalf("a damaged sealed copy: %+v, %v", in, err)
	}
	return r
}

// A sealed copy is damaged however Open found it so: a .seal failing its
// CRC (no footer), a .log longer than its footer says, or a damage marker
// (both with a footer). Every operation that would answer the footer's
// end, or change the copy, answers the damage instead (S1, S4), and a
// sealed copy is never cut (S2).
func TestDamagedSealedCopyAnswersItsDamage(t *testing.T) {
	cases := map[string]func(mem *vfs.MemFS){
		"bad seal file": func(mem *vfs.MemFS) {
			path := "/data/00000000000000000001.seal"
			b := memRead(t, mem, path)
			b[20] ^= 0xff
			if err := vfs.WriteFileAtomic(mem, path, b); err != nil {
				t.Fatal(err)
			}
		},
		"log longer than its footer": func(mem *vfs.MemFS) {
			path := "/data/00000000000000000001.log"
			b := append(memRead(t, mem, path), tagged(t, 6, 2, "x")...)
			if err := vfs.WriteFileAtomic(mem, path, b); err != nil {
				t.Fatal(err)
			}
		},
		"damage marker": func(mem *vfs.MemFS) {
			if err := writeDamageMarker(mem, "/data/00000000000000000001.damage", 6, "test damage"); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := sealedThenDamaged(t, damage)
			if end, err := r.Fence(ctx, 1); !IsCorrupt(err) {
				t.Errorf("Fence: %d, %v; want the damage", end, err)
			}
			if q, d, err := r.Ends(1); !IsCorrupt(err) {
				t.Errorf("Ends: %d, %d, %v; want the damage", q, d, err)
			}
			if ft, err := r.Seal(ctx, 1); !IsCorrupt(err) {
				t.Errorf("Seal: %+v, %v; want the damage", ft, err)
			}
			if ft, err := r.SealWith(ctx, 1, SealOptions{Exact: true, End: 6}); !IsCorrupt(err) {
				t.Errorf("exact seal: %+v, %v; want the damage", ft, err)
			}
			err := r.Truncate(ctx, 1, 2)
			if !IsCorrupt(err) || !errors.Is(err, ErrSealed) {
				t.Errorf("Truncate: %v; want both the seal and the damage", err)
			}
			if in, err := r.Info(1); err != nil || !in.Sealed || !IsCorrupt(in.Damage) {
				t.Errorf("afterwards: %+v, %v", in, err)
			}
		})
	}
}

// Truncate and Seal, like Fence, wait for a cut of the same copy that is
// still running (held here in its file fsync) only as long as their ctx
// lasts; the cut then finishes, and the copy serves both calls again.
func TestCutAndSealHonourContextDuringCut(t *testing.T) {
	mem := vfs.NewMem()
	fs := vfs.NewFaulty(mem, nil)
	s := openMemCfg(t, Config{Dir: "/data", FS: fs, NoJournal: true})
	mustCreate(t, s, 1, 0)
	bs := chain(t, 0, 4, 2, "f")
	appendAll(t, s, 1, bs)
	entered, release := holdSync(fs, ".log")
	defer release()
	cut := make(chan error, 1)
	go func() { cut <- s.Truncate(context.Background(), 1, 6) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the cut never reached its fsync")
	}
	calls := map[string]func(ctx context.Context) error{
		"Truncate": func(ctx context.Context) error { return s.Truncate(ctx, 1, 4) },
		"Seal":     func(ctx context.Context) error { _, err := s.Seal(ctx, 1); return err },
	}
	for name, call := range calls {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- call(ctx) }()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("%s with an ended ctx during a cut: %v", name, err)
			}
		case <-time.After(5 * time.Second):
			release()
			<-done
			t.Fatalf("%s with an ended ctx blocked until the cut finished", name)
		}
	}
	release()
	if err := <-cut; err != nil {
		t.Fatal(err)
	}
	if !sameBatches(batchesOf(t, s, 1), bs[:3]) {
		t.Fatal("the copy does not hold what the cut kept")
	}
	if err := s.Truncate(context.Background(), 1, 4); err != nil {
		t.Fatalf("a cut after the waits gave up: %v", err)
	}
	if ft, err := s.Seal(context.Background(), 1); err != nil || ft.End != 4 {
		t.Fatalf("a seal after the waits gave up: %+v, %v", ft, err)
	}
}
