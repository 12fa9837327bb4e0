//go:build linux

package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// smallDisk mounts a tmpfs of size bytes on a temporary directory, or
// skips: mounting needs root.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a small real filesystem needs a tmpfs mount, which needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, 0) })
	return dir
}

// fillDisk writes path until the filesystem is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	chunk = chunk[:512]
	for len(chunk) > 0 {
		if _, err := f.Write(chunk); err != nil {
			chunk = chunk[:len(chunk)/2]
		}
	}
}

// A real filesystem running out of space under a store: appends are
// refused or wait, the store does not fail, and once a file is removed
// and the probe finds room, the store writes again and keeps everything
// it acknowledged across a reopen.
func TestNoSpaceOnRealSmallDisk(t *testing.T) {
	for _, noJournal := range []bool{false, true} {
		ctx := context.Background()
		mount := smallDisk(t, "4m")
		cfg := Config{Dir: filepath.Join(mount, "data"), NoJournal: noJournal, MinFreeBytes: -1,
			JournalFileBytes: 1 << 20}
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Create(1, 0); err != nil {
			t.Fatal(err)
		}
		filler := filepath.Join(mount, "filler")
		fillDisk(t, filler)

		acked := ackLog{}
		var waiting chan error
		for waiting == nil {
			done := make(chan error, 1)
			err := s.AppendAsync(ctx, 1, span(t, acked[1], 50), func(err error) { done <- err })
			if errors.Is(err, ErrNoSpace) {
				break
			}
			if err != nil {
				t.Fatalf("journal off %v: append: %v", noJournal, err)
			}
			waiting = awaitOrFull(t, s, done)
			if waiting == nil {
				err := <-done
				if errors.Is(err, ErrNoSpace) {
					break
				}
				if err != nil {
					t.Fatalf("journal off %v: append on a filling disk: %v", noJournal, err)
				}
				acked[1] += 50
			}
		}
		if st := s.DiskState(); st != DiskFull || s.Err() != nil {
			t.Fatalf("journal off %v: state %v, err %v", noJournal, st, s.Err())
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		if st := s.CheckSpace(); st != DiskOK {
			t.Fatalf("journal off %v: state once space returned: %v", noJournal, st)
		}
		if waiting != nil {
			if err := <-waiting; err != nil {
				t.Fatalf("journal off %v: the round that waited: %v", noJournal, err)
			}
			acked[1] += 50
		}
		for range 5 {
			if err := s.Append(ctx, 1, span(t, acked[1], 50)); err != nil {
				t.Fatalf("journal off %v: append once space returned: %v", noJournal, err)
			}
			acked[1] += 50
		}
		acked.check(t, s, "live")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		acked.check(t, r, "reopened")
		_ = r.Close()
	}
}

// awaitOrFull waits for done to have an answer (returning nil, the
// answer left in done) or for the store to say full with the append
// still waiting (returning done).
func awaitOrFull(t *testing.T, s *Store, done chan error) chan error {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		if len(done) > 0 {
			return nil
		}
		if s.DiskState() == DiskFull {
			select {
			case err := <-done:
				done <- err
				return nil
			default:
				return done
			}
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("append neither answered nor found the disk full")
		}
	}
}
