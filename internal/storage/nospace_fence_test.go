package storage

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// crashFencedInJournal leaves, as a kill -9 would, a store whose journal
// still holds the creates of segments 1 and 2, with copy 2 fenced (its
// marker on disk), and reopens it on a disk with no free block: the
// replay stops before it recreates copy 2.
func crashFencedInJournal(t *testing.T) (*Store, *quotaFS, Config) {
	t.Helper()
	ctx := context.Background()
	mem := vfs.NewMem()
	cfg := Config{Dir: "/data", FS: mem, JournalPrealloc: true, JournalFileBytes: 1 << 20}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, 1, span(t, 0, 700)); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(2, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, 2, span(t, 0, 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fence(ctx, 2); err != nil {
		t.Fatal(err)
	}
	crashed := mem.Clone()
	_ = s.Close()
	if _, err := crashed.Stat("/data/00000000000000000002.fence"); err != nil {
		t.Fatalf("fence marker before the crash: %v", err)
	}

	q := newQuotaFS(crashed)
	q.fill(0)
	cfg.FS = q
	r, err := Open(cfg)
	if err != nil {
		t.Fatalf("open on a full disk: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if st := r.DiskState(); st != DiskFull {
		t.Fatalf("disk state after open on a full disk: %v", st)
	}
	return r, q, cfg
}

// A fenced copy whose create only the journal held stays fenced once the
// replay a full disk stopped resumes: taking appends again would let a
// stale primary reach the quorum its fence denied it (W4).
func TestFenceSurvivesResumedReplay(t *testing.T) {
	ctx := context.Background()
	r, q, cfg := crashFencedInJournal(t)
	if _, _, err := r.Ends(2); !errors.Is(err, ErrPending) {
		t.Fatalf("the replay was to stop before segment 2's create; Ends(2): %v", err)
	}

	q.fill(-1)
	if st := r.CheckSpace(); st != DiskOK {
		t.Fatalf("state once space returned: %v (%v)", st, r.Err())
	}
	in, err := r.Info(2)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Fenced || in.End != 3 {
		t.Fatalf("segment 2 after the resumed replay: %+v, want fenced at end 3", in)
	}
	if err := r.Append(ctx, 2, span(t, 3, 3)); !errors.Is(err, ErrSealed) {
		t.Fatalf("append to the fenced copy after the resumed replay: %v, want a refusal", err)
	}
	if err := r.Append(ctx, 1, span(t, 700, 1)); err != nil {
		t.Fatalf("append to the unfenced copy after the resumed replay: %v", err)
	}

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if in, err := again.Info(2); err != nil || !in.Fenced {
		t.Fatalf("segment 2 at the next open: %+v, %v; want fenced", in, err)
	}
}

// While the replay waits, a copy it has still to create answers that it
// waits, never that it is not found: the lost-segment probe reads "not
// found" (by its text, over the wire) as "this node holds no copy".
func TestPendingCopyIsNotNotFound(t *testing.T) {
	r, q, _ := crashFencedInJournal(t)
	_, _, endsErr := r.Ends(2)
	_, infoErr := r.Info(2)
	_, _, readErr := r.Read(2, 0, 1, 0)
	for what, err := range map[string]error{"Ends": endsErr, "Info": infoErr, "Read": readErr} {
		switch {
		case !errors.Is(err, ErrPending) || !errors.Is(err, ErrNoSpace):
			t.Errorf("%s(2) while the replay waits: %v, want ErrPending", what, err)
		case errors.Is(err, ErrNotFound), strings.Contains(err.Error(), ErrNotFound.Error()):
			t.Errorf("%s(2) while the replay waits reads as not found: %v", what, err)
		}
	}
	if _, _, err := r.Ends(9); !errors.Is(err, ErrNotFound) {
		t.Errorf("Ends of a segment neither on disk nor in the journal: %v, want ErrNotFound", err)
	}

	q.fill(-1)
	if st := r.CheckSpace(); st != DiskOK {
		t.Fatalf("state once space returned: %v (%v)", st, r.Err())
	}
	if _, _, err := r.Ends(2); err != nil {
		t.Fatalf("Ends(2) after the resumed replay: %v", err)
	}
	if _, _, err := r.Ends(9); !errors.Is(err, ErrNotFound) {
		t.Errorf("Ends of an unknown segment after the resumed replay: %v, want ErrNotFound", err)
	}
}
