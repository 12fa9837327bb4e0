package storage

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/vfs"
)

// callNoPanic runs f and reports whether it panicked, failing the test if
// it did, so one broken call does not take the package's other tests down.
func callNoPanic(t *testing.T, what string, f func()) (panicked bool) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", what, r)
			panicked = true
		}
	}()
	f()
	return false
}

// openWithBadSeal leaves a sealed copy whose .seal file fails its CRC,
// as a bit flip on disk would, and opens the store on it. Open reports the
// copy damaged (sealed, without a footer). The caller closes the store
// only if nothing panicked: a panic leaves the store's lock held.
func openWithBadSeal(t *testing.T) *Store {
	t.Helper()
	mem := vfs.NewMem()
	s := openMode(t, mem, false)
	mustCreate(t, s, 1, 0)
	appendAll(t, s, 1, chain(t, 0, 3, 2, "s"))
	sealAt(t, s, 1, 6)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := "/data/00000000000000000001.seal"
	b := memRead(t, mem, path)
	b[20] ^= 0xff // inside the end field: the CRC no longer matches
	if err := vfs.WriteFileAtomic(mem, path, b); err != nil {
		t.Fatal(err)
	}
	r, err := Open(Config{Dir: "/data", FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	if in, err := r.Info(1); err != nil || !in.Sealed || !IsCorrupt(in.Damage) {
		t.Fatalf("a copy with a bad seal file: %+v, %v", in, err)
	}
	return r
}

// Fencing a sealed copy whose seal file is damaged must answer the damage
// (S1: a bad copy is never served as good; S4: damage is reported), not
// crash the node: Fence reads sg.footer.End for any sealed copy, and Open
// leaves the footer nil when the .seal file fails its CRC (copy.go Fence).
func TestEdgeFenceOnCopyWithBadSealFile(t *testing.T) {
	r := openWithBadSeal(t)
	var err error
	if callNoPanic(t, "Fence", func() { _, err = r.Fence(context.Background(), 1) }) {
		return
	}
	defer r.Close()
	if !IsCorrupt(err) {
		t.Fatalf("fence a copy with a bad seal file: %v, want its damage", err)
	}
}

// Cutting a sealed copy whose seal file is damaged must be refused, not
// crash the node: beginCutLocked checks sealed before damage and formats
// the refusal with sg.footer.End, nil for such a copy (copy.go
// beginCutLocked). A sealed copy is never cut (S2), and damage is
// reported (S4).
func TestEdgeTruncateOnCopyWithBadSealFile(t *testing.T) {
	r := openWithBadSeal(t)
	var err error
	if callNoPanic(t, "Truncate", func() { err = r.Truncate(context.Background(), 1, 0) }) {
		return
	}
	defer r.Close()
	if err == nil {
		t.Fatal("a damaged sealed copy was cut")
	}
}

// Ends is documented as what a fence may answer, but on a copy that Open
// found damaged (an invalid batch followed by valid ones) it answers an
// end below the batches the copy held, with no error, while Fence on the
// same copy refuses with the damage and Info reports offsets up to
// EndPastDamage may have been handed out. A follower answering with Ends
// would tell the primary and the control plane it holds less than it
// acknowledged and hide the damage (W6, S1). Ends already reports the
// damage when the damaged copy has no open file (copy.go Ends).
func TestEdgeEndsReportsDamage(t *testing.T) {
	mem := vfs.NewMem()
	s := openMode(t, mem, true)
	mustCreate(t, s, 1, 0)
	bs := chain(t, 0, 3, 2, "d") // 0..1, 2..3, 4..5
	appendAll(t, s, 1, bs)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := "/data/00000000000000000001.log"
	b := memRead(t, mem, path)
	b[32+len(bs[0])+len(bs[1])/2] ^= 0xff // inside the second batch
	if err := vfs.WriteFileAtomic(mem, path, b); err != nil {
		t.Fatal(err)
	}
	r := openMode(t, mem, true)
	in, err := r.Info(1)
	if err != nil || !IsCorrupt(in.Damage) || in.EndPastDamage != 6 {
		t.Fatalf("damaged copy: %+v, %v", in, err)
	}
	if _, err := r.Fence(context.Background(), 1); !IsCorrupt(err) {
		t.Fatalf("fence a damaged copy: %v", err)
	}
	q, d, err := r.Ends(1)
	if err == nil {
		t.Fatalf("Ends on a damaged copy answered queued %d, durable %d and no error; it held up to %d",
			q, d, in.EndPastDamage)
	}
}

// Fence takes a ctx, and a control plane fences followers with a deadline,
// but Fence waits for the segment's seal lock without looking at ctx, so
// while a Truncate of the copy runs (its file fsync held here) a Fence
// whose ctx has already ended blocks until the cut is done (copy.go Fence:
// sg.sealMu.Lock before any ctx check), against the project's rule that
// anything that blocks takes and honours a context.
func TestEdgeFenceHonoursContextDuringCut(t *testing.T) {
	mem := vfs.NewMem()
	fs := vfs.NewFaulty(mem, nil)
	s := openMemCfg(t, Config{Dir: "/data", FS: fs, NoJournal: true})
	mustCreate(t, s, 1, 0)
	appendAll(t, s, 1, chain(t, 0, 4, 2, "f"))
	entered, release := holdSync(fs, ".log")
	defer release()
	cut := make(chan error, 1)
	go func() { cut <- s.Truncate(context.Background(), 1, 4) }()
	select {
	case <-entered: // the cut holds the segment, waiting for its fsync
	case <-time.After(10 * time.Second):
		t.Fatal("the cut never reached its fsync")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fenced := make(chan error, 1)
	go func() {
		_, err := s.Fence(ctx, 1)
		fenced <- err
	}()
	select {
	case err := <-fenced:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("fence with an ended ctx during a cut: %v", err)
		}
	case <-time.After(5 * time.Second):
		release()
		<-fenced
		t.Fatal("Fence with an ended ctx blocked until the cut finished")
	}
	release()
	if err := <-cut; err != nil {
		t.Fatal(err)
	}
}
