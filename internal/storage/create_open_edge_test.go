package storage

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// Breaks: a create of an id whose Delete or Quarantine moved every file
// away but failed to make that durable (its last directory fsync failed;
// the broker then creates the id again: reconcile.go adoptable, after a
// quarantine, creates the metadata's active segment once the store no
// longer has it). The create finds nothing left to remove, so
// clearLeftovers (store.go) syncs nothing, and with the journal on the
// new copy is durable through its journal record alone. A power loss then
// brings the old copy's .log and .seal back beside that record: Open
// takes the old sealed copy (recoverSealed), the replay skips the create
// and the new copy's acknowledged batches ("a segment it already holds",
// "a seal fsyncs the file first"), and the id serves the old copy's
// records. The same holds at HEAD before the create changes: the skip
// above the id ceiling does not apply here (the id is below it).
func TestCreateAfterUnsyncedRemovalSurvivesPowerLoss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(*Store) error
		nth    int32 // which fsync of the store's directory fails
	}{
		{"delete", func(s *Store) error { return s.Delete(7) }, 1},
		{"quarantine", func(s *Store) error { _, err := s.Quarantine(7); return err }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			faulty := vfs.NewFaulty(mem, nil)
			s := openMode(t, faulty, false)
			mustCreate(t, s, 7, 0)
			appendAll(t, s, 7, chain(t, 0, 2, 2, "old"))
			if _, err := s.Seal(ctx, 7); err != nil {
				t.Fatal(err)
			}
			var syncs atomic.Int32
			faulty.SetRule(func(op vfs.Op, name string) error {
				if op == vfs.OpSyncDir && name == "/data" && syncs.Add(1) == tc.nth {
					return vfs.ErrInjected
				}
				return nil
			})
			if err := tc.remove(s); err == nil {
				t.Fatal("the removal succeeded with a failing directory fsync: the test sets nothing up")
			}
			faulty.SetRule(nil)
			for _, ext := range []string{logExt, sealExt, idxExt} {
				if _, err := mem.Stat(s.path(7, ext)); !vfs.IsNotExist(err) {
					t.Fatalf("the removal left %s (%v): the test expects every file moved away", ext, err)
				}
			}
			mustCreate(t, s, 7, 100)
			appendAll(t, s, 7, chain(t, 100, 2, 2, "new"))
			if in, err := s.Info(7); err != nil || in.Sealed || in.Base != 100 || in.End != 104 {
				t.Fatalf("the new copy before the power loss: %+v, %v", in, err)
			}
			lost := openMode(t, mem.CrashClone(), false)
			in, err := lost.Info(7)
			if err != nil || in.Sealed || in.Base != 100 || in.End != 104 {
				t.Fatalf("after a power loss segment 7 is %+v, %v; want the new active copy at base 100 ending at 104 (its batches were acknowledged)", in, err)
			}
		})
	}
}
