package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// spanAcks is what a test sent, per segment, in contiguous spans from
// offset 0: kept are the offsets the store must hold, sent those it may
// not go past.
type spanAcks struct{ kept, sent ackLog }

// answered accounts the answer to a span of n records sent to id: nil
// (acknowledged) and ErrOutcomeUnknown (kept in the journal) must come
// back, ErrNoSpace (refused) never.
func (a spanAcks) answered(t *testing.T, id SegmentID, n uint64, err error) {
	t.Helper()
	switch {
	case err == nil, errors.Is(err, ErrOutcomeUnknown) && errors.Is(err, ErrFailed) && !errors.Is(err, ErrNoSpace):
		a.kept[id] += n // a span kept after a refused one shows as a hole in check
	case errors.Is(err, ErrNoSpace) && !errors.Is(err, ErrFailed) && !errors.Is(err, ErrOutcomeUnknown):
		a.sent[id] = a.kept[id] // refused: the same offsets are sent again
	default:
		t.Fatalf("segment %d: answer %v", id, err)
	}
}

// A node whose journal holds batches not yet in their segment files
// (closed while they waited for space) is opened on a disk that is still
// full: it comes up full, serves what the files hold, refuses every
// write with ErrNoSpace, and writes the journal's batches once space
// returns, in steps as space trickles in. Nothing acknowledged or kept
// is lost and nothing refused comes back, after a kill -9 or a power
// loss at each step.
func TestOpenOnFullDiskWaitsForSpace(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	q := newQuotaFS(mem)
	fs := vfs.NewFaulty(q, nil)
	cfg := Config{Dir: "/data", FS: fs, JournalPrealloc: true, JournalFileBytes: 1 << 20}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := spanAcks{kept: ackLog{}, sent: ackLog{}}
	send := func(s *Store, id SegmentID, n uint64, res chan<- error) {
		t.Helper()
		b := span(t, a.sent[id], int(n))
		a.sent[id] += n
		if err := s.AppendAsync(ctx, id, b, func(err error) { res <- err }); err != nil {
			res <- err // refused at once: answered as if by done
		}
	}
	for _, id := range []SegmentID{1, 2} {
		if err := s.Create(id, 0); err != nil {
			t.Fatal(err)
		}
		res := make(chan error, 1)
		send(s, id, 3, res)
		a.answered(t, id, 3, <-res)
	}

	// The journal's file is preallocated, so its rounds take no space;
	// the segment files' writes of about two blocks each find none.
	// Both batches go in one round: the commit goroutine is held in the
	// journal's fsync of a round before them while they are queued.
	waitSpare(t, mem)
	gate, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fs.SetRule(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasSuffix(name, journalExt) {
			once.Do(func() { close(entered); <-gate })
		}
		return nil
	})
	first := make(chan error, 1)
	send(s, 1, 3, first)
	<-entered
	q.fill(0)
	res := map[SegmentID]chan error{1: make(chan error, 1), 2: make(chan error, 1)}
	for _, id := range []SegmentID{1, 2} {
		send(s, id, 700, res[id])
	}
	close(gate)
	a.answered(t, 1, 3, <-first)
	before := ackLog{1: a.kept[1], 2: a.kept[2]} // acknowledged before the disk filled
	waitDisk(t, s, DiskFull)
	_ = s.Close()
	for _, id := range []SegmentID{1, 2} {
		a.answered(t, id, 700, <-res[id])
	}
	if a.kept[1] != 706 || a.kept[2] != 703 {
		t.Fatalf("kept %v: want both batches waiting in the journal", a.kept)
	}

	r, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open on a full disk with the journal holding unwritten batches: %v", err)
	}
	defer r.Close()
	if st := r.DiskState(); st != DiskFull {
		t.Fatalf("disk state %v after opening on a full disk", st)
	}
	for _, id := range []SegmentID{1, 2} {
		// The journal also holds each segment's creation, so the replay
		// cut each file back to its header: the blocks that freed take
		// the small batches again, not the large one.
		if got, want := readOffsets(t, r, id), before.want(id); !slices.Equal(got, want) {
			t.Fatalf("segment %d serves %v while its tail waits, want %v", id, got, want)
		}
		if info, err := r.Info(id); err != nil || info.End != a.kept[id] {
			t.Fatalf("segment %d end while its tail waits: %+v %v, want %d", id, info, err, a.kept[id])
		}
	}
	refused := map[string]error{
		"append": r.Append(ctx, 1, span(t, a.kept[1], 3)),
		"create": r.Create(3, 0),
		"delete": r.Delete(2),
	}
	_, refused["seal"] = r.Seal(ctx, 1)
	_, refused["quarantine"] = r.Quarantine(2)
	for op, err := range refused {
		if !errors.Is(err, ErrNoSpace) {
			t.Fatalf("%s while the replay waits for space: %v", op, err)
		}
	}
	if st := r.CheckSpace(); st != DiskFull {
		t.Fatalf("state after a check on a disk still full: %v", st)
	}

	// Every step: the node killed or its power lost there comes back
	// with everything kept.
	survives := func(when string) {
		t.Helper()
		for name, fs := range map[string]*vfs.MemFS{"kill -9": mem.Clone(), "power loss": mem.CrashClone(),
			"torn power loss": mem.PowerLoss(rand.New(rand.NewPCG(uint64(len(when)), 7)))} {
			k, err := Open(Config{Dir: "/data", FS: fs})
			if err != nil {
				t.Fatalf("%s, %s: %v", when, name, err)
			}
			a.kept.check(t, k, when+", "+name)
			_ = k.Close()
		}
	}
	survives("while the replay waits")

	// Room for one segment's batch, not both: the replay goes on and
	// stops again.
	q.fill(3)
	if st := r.CheckSpace(); st != DiskFull {
		t.Fatalf("state with room for part of the replay: %v", st)
	}
	if got := readOffsets(t, r, 1); !slices.Equal(got, a.kept.want(1)) {
		t.Fatalf("segment 1 after part of the replay: %v, want %v", got, a.kept.want(1))
	}
	for _, id := range []SegmentID{1, 2} {
		if queued, _, err := r.Ends(id); err != nil || queued != a.kept[id] {
			t.Fatalf("segment %d end after part of the replay: %d %v, want %d", id, queued, err, a.kept[id])
		}
	}
	survives("after part of the replay")

	// Reads go on while the replay resumes; each sees a prefix of what
	// was kept.
	stop, readErr := make(chan struct{}), make(chan error, 1)
	go func() {
		kept := a.kept[2]
		for {
			select {
			case <-stop:
				readErr <- nil
				return
			default:
			}
			buf, _, err := r.Read(2, 0, all, math.MaxUint64)
			if err != nil {
				readErr <- err
				return
			}
			if err := prefixOf(buf, kept); err != nil {
				readErr <- err
				return
			}
		}
	}()
	// A kill -9 and a power loss before each step of the resumed replay.
	var snapMu sync.Mutex
	var snaps []*vfs.MemFS
	fs.SetRule(func(op vfs.Op, name string) error {
		switch op {
		case vfs.OpWrite, vfs.OpSync, vfs.OpTruncate, vfs.OpRename, vfs.OpRemove, vfs.OpSyncDir:
			snapMu.Lock()
			snaps = append(snaps, mem.Clone(), mem.PowerLoss(rand.New(rand.NewPCG(uint64(len(snaps)), 3))))
			snapMu.Unlock()
		}
		return nil
	})
	q.fill(-1)
	st := r.CheckSpace()
	fs.SetRule(nil)
	close(stop)
	if err := <-readErr; err != nil {
		t.Fatal(err)
	}
	if st != DiskOK {
		t.Fatalf("state once space returned: %v (%v)", st, r.Err())
	}
	if len(snaps)/2 < 5 {
		t.Fatalf("only %d steps in the resumed replay", len(snaps)/2)
	}
	t.Logf("%d steps of the resumed replay, each killed and powered off", len(snaps)/2)
	for i, m := range snaps {
		k, err := Open(Config{Dir: "/data", FS: m})
		if err != nil {
			t.Fatalf("step %d of the resumed replay: %v", i/2, err)
		}
		a.kept.check(t, k, fmt.Sprintf("step %d of the resumed replay (power loss %v)", i/2, i%2 == 1))
		_ = k.Close()
	}
	a.kept.check(t, r, "once space returned")
	survives("once the replay is done")
	for _, id := range []SegmentID{1, 2} {
		res := make(chan error, 1)
		send(r, id, 3, res)
		a.answered(t, id, 3, <-res)
	}
	if _, err := r.Seal(ctx, 2); err != nil {
		t.Fatalf("seal once space returned: %v", err)
	}
	a.kept.check(t, r, "after new appends")
	survives("after new appends")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	a.kept.check(t, openMemCfg(t, cfg), "reopened")
}

// waitSpare waits, with a deadline, for the checkpoint goroutine to have
// preallocated the journal's next file.
func waitSpare(t *testing.T, mem *vfs.MemFS) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		names, _ := mem.ReadDir("/data/journal")
		if slices.ContainsFunc(names, func(n string) bool {
			return strings.HasPrefix(n, spareName) && strings.HasSuffix(n, journalExt)
		}) {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no spare journal file: %v", names)
		}
	}
}

// A new node on a disk too full for its first, preallocated, journal
// file opens full and starts the journal once space returns.
func TestOpenNewNodeOnFullDisk(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	q := newQuotaFS(mem)
	q.fill(0)
	cfg := Config{Dir: "/data", FS: q, JournalPrealloc: true, JournalFileBytes: 1 << 20}
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open of a new node on a full disk: %v", err)
	}
	defer s.Close()
	if st := s.CheckSpace(); st != DiskFull {
		t.Fatalf("state on a full disk: %v", st)
	}
	if err := s.Create(1, 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("create before the journal started: %v", err)
	}
	q.fill(-1)
	if st := s.CheckSpace(); st != DiskOK {
		t.Fatalf("state once space returned: %v (%v)", st, s.Err())
	}
	if err := s.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, 1, span(t, 0, 3)); err != nil {
		t.Fatal(err)
	}
	ackLog{1: 3}.check(t, openMem(t, mem.Clone()), "after kill -9")
}

// prefixOf checks that buf, read from offset 0, holds whole batches
// ending at or below end, one after the other.
func prefixOf(buf []byte, end uint64) error {
	parts, err := segment.SplitBatches(buf)
	if err != nil {
		return err
	}
	next := uint64(0)
	for _, p := range parts {
		h, err := segment.ParseHeader(p)
		if err != nil {
			return err
		}
		if h.BaseOffset != next {
			return fmt.Errorf("batch at %d, %d expected", h.BaseOffset, next)
		}
		next = h.LastOffset() + 1
	}
	if next > end {
		return fmt.Errorf("read up to %d, only %d kept", next, end)
	}
	return nil
}
