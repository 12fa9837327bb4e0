package storage

import (
	"errors"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// A copy marked damaged from above (a failed read or scrub) answers its
// damage at once and after every restart, until it is deleted; a new
// copy of the same id starts clean.
func TestMarkDamagedIsDurableUntilDelete(t *testing.T) {
	for _, noJournal := range []bool{false, true} {
		mem := vfs.NewMem()
		s := openMode(t, mem, noJournal)
		mustCreate(t, s, 1, 0)
		appendAll(t, s, 1, chain(t, 0, 3, 2, "m"))
		sealAt(t, s, 1, 6)
		if err := s.MarkDamaged(1, "a batch failed its CRC on a read"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Ends(1); !IsCorrupt(err) {
			t.Fatalf("journal off %v: Ends after the mark: %v, want corrupt", noJournal, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		r := openMode(t, mem, noJournal)
		in, err := r.Info(1)
		if err != nil || !in.Sealed || !IsCorrupt(in.Damage) || !strings.Contains(in.Damage.Error(), "failed its CRC") {
			t.Fatalf("journal off %v: after a restart: %+v, %v; want sealed and damaged with the reason", noJournal, in, err)
		}
		if err := r.Delete(1); err != nil {
			t.Fatal(err)
		}
		if err := r.MarkDamaged(1, "late"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("marking a deleted copy: %v, want not found", err)
		}
		mustCreate(t, r, 1, 0)
		if in, err := r.Info(1); err != nil || in.Damage != nil {
			t.Fatalf("a new copy of the id: %+v, %v; want it clean", in, err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
