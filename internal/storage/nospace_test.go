package storage

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/vfs"
)

// waitDisk waits, with a deadline, for the store to report state want.
func waitDisk(t *testing.T, s *Store, want DiskState) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for s.DiskState() != want {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("disk state %v, want %v", s.DiskState(), want)
		}
	}
}

// fullDisk fails, while full is set, op on every file for which on says
// so, and every write of the space probe, with ENOSPC after keep bytes.
func fullDisk(full *atomic.Bool, op vfs.Op, on func(name string) bool, keep int) vfs.Rule {
	return func(o vfs.Op, name string) error {
		if !full.Load() {
			return nil
		}
		if (o == op && on(name)) || (o == vfs.OpWrite && strings.Contains(name, "probe")) {
			if o == vfs.OpWrite {
				return vfs.Torn(keep, syscall.ENOSPC)
			}
			return syscall.ENOSPC
		}
		return nil
	}
}

func segmentFiles(name string) bool { return strings.HasSuffix(name, logExt) }

// ackLog is what a test acknowledged, per segment: spans of three
// records from offset 0 on, without gaps.
type ackLog map[SegmentID]uint64

func (a ackLog) want(id SegmentID) []uint64 {
	out := make([]uint64, a[id])
	for i := range out {
		out[i] = uint64(i)
	}
	return out
}

// check asserts that s holds exactly the acknowledged records of each
// segment: none lost, duplicated or reordered, and nothing refused.
func (a ackLog) check(t *testing.T, s *Store, when string) {
	t.Helper()
	for id := range a {
		if got := readOffsets(t, s, id); !slices.Equal(got, a.want(id)) {
			t.Fatalf("%s: segment %d holds %v, acknowledged %v", when, id, got, a.want(id))
		}
	}
}

// ENOSPC on a segment file write, at each place one happens: the store
// says full and refuses appends with ErrNoSpace but does not fail; once
// the probe finds room it writes again; nothing acknowledged is lost,
// duplicated or reordered, live, after a kill -9, and after a power loss
// of the restarted node.
func TestNoSpaceOnSegmentWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		// exact appends the blocked batch as a replica copy (the path a
		// heal's copy takes) and seals the copy exactly at the end.
		exact bool
		// waits: with the journal on, the batch is durable in the journal
		// and waits to be written; without it, it is refused.
		waits bool
		// blocks: the disk runs out of blocks (quotaFS; the journal's file
		// preallocated), so the write stops at a block boundary, after
		// whole batches of the round; else a rule tears 7 bytes off.
		blocks bool
	}{
		{name: "journal write-behind", waits: true},
		{name: "copy write-behind", exact: true, waits: true},
		{name: "direct write", cfg: Config{NoJournal: true}},
		{name: "direct copy write", cfg: Config{NoJournal: true}, exact: true},
		{name: "journal write-behind, out of blocks", waits: true, blocks: true,
			cfg: Config{JournalPrealloc: true, JournalFileBytes: 1 << 20}},
		{name: "direct write, out of blocks", cfg: Config{NoJournal: true}, blocks: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var full atomic.Bool
			mem := vfs.NewMem()
			var fs vfs.FS = vfs.NewFaulty(mem, fullDisk(&full, vfs.OpWrite, segmentFiles, 7))
			setFull := full.Store
			blocked := uint64(3) // records in the batch the full disk stops
			if tc.blocks {
				q := newQuotaFS(mem)
				fs, blocked = q, 700
				setFull = func(full bool) {
					if full {
						q.fill(0)
					} else {
						q.fill(-1)
					}
				}
			}
			cfg := tc.cfg
			cfg.Dir, cfg.FS = "/data", fs
			s, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			acked := ackLog{}
			appendTo := func(id SegmentID) error {
				b := span(t, acked[id], 3)
				if tc.exact && id == 2 {
					return s.AppendAt(ctx, id, b)
				}
				return s.Append(ctx, id, b)
			}
			for _, id := range []SegmentID{1, 2} {
				if err := s.Create(id, 0); err != nil {
					t.Fatal(err)
				}
				for range 2 {
					if err := appendTo(id); err != nil {
						t.Fatal(err)
					}
					acked[id] += 3
				}
			}

			if tc.cfg.JournalPrealloc {
				waitSpare(t, mem)
			}
			setFull(true)
			waiting := make(chan error, 1)
			start := s.AppendAsync
			if tc.exact {
				start = s.AppendAtAsync
			}
			if err := start(ctx, 2, span(t, acked[2], int(blocked)), func(err error) { waiting <- err }); err != nil {
				t.Fatal(err)
			}
			waitDisk(t, s, DiskFull)
			if err := s.Err(); err != nil {
				t.Fatalf("store failed on a full disk: %v", err)
			}
			if err := s.Append(ctx, 1, span(t, acked[1], 3)); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("append while full: %v", err)
			}
			if !tc.waits {
				if err := <-waiting; !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrFailed) {
					t.Fatalf("direct write on a full disk: %v", err)
				}
			}
			acked.check(t, s, "while full")
			if st := s.CheckSpace(); st != DiskFull {
				t.Fatalf("state after a check on a disk still full: %v", st)
			}

			setFull(false)
			if st := s.CheckSpace(); st != DiskOK {
				t.Fatalf("state after space returned: %v", st)
			}
			if tc.waits {
				if err := <-waiting; err != nil {
					t.Fatalf("batch kept in the journal while full: %v", err)
				}
				acked[2] += blocked
			}
			for range 2 {
				for _, id := range []SegmentID{1, 2} {
					if err := appendTo(id); err != nil {
						t.Fatalf("append once space returned: %v", err)
					}
					acked[id] += 3
				}
			}
			if tc.exact {
				if _, err := s.SealWith(ctx, 2, SealOptions{End: acked[2], Exact: true}); err != nil {
					t.Fatalf("exact seal of the copy: %v", err)
				}
			}
			if err := s.Err(); err != nil {
				t.Fatalf("store failed: %v", err)
			}
			acked.check(t, s, "once space returned")

			killed := mem.Clone() // kill -9: what the kernel holds survives
			k := openMem(t, killed)
			acked.check(t, k, "after kill -9")
			acked.check(t, openMem(t, killed.CrashClone()), "after kill -9 and a power loss")
			acked.check(t, openMem(t, mem.CrashClone()), "after a power loss")
		})
	}
}

// A node killed (or closed) while a round waits for space keeps the
// round in its journal: the next Open writes it into the segment file.
func TestNoSpaceWaitingRoundSurvivesCloseAndKill(t *testing.T) {
	ctx := context.Background()
	var full atomic.Bool
	mem := vfs.NewMem()
	fs := vfs.NewFaulty(mem, fullDisk(&full, vfs.OpWrite, segmentFiles, 0))
	s, err := Open(Config{Dir: "/data", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, 1, span(t, 0, 3)); err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	blocked := make(chan error, 1)
	if err := s.AppendAsync(ctx, 1, span(t, 3, 3), func(err error) { blocked <- err }); err != nil {
		t.Fatal(err)
	}
	waitDisk(t, s, DiskFull)
	// Refused while the round waits: it must not come back (checked below).
	if err := s.Append(ctx, 1, span(t, 6, 3)); !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("append behind a round waiting for space: %v", err)
	}
	killed := mem.Clone()

	// The round is in the journal and comes back: not refused (a client
	// told ErrNoSpace retries, and would store it twice), its outcome
	// unknown to the caller.
	if err := s.Close(); !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrNoSpace) {
		t.Fatalf("close with a round waiting for space: %v", err)
	}
	if st := s.DiskState(); st != DiskFull {
		t.Fatalf("disk state of a store closed while full: %v", st)
	}
	if err := <-blocked; !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, ErrFailed) || errors.Is(err, ErrNoSpace) {
		t.Fatalf("round waiting at close: %v", err)
	}
	whole := []uint64{0, 1, 2, 3, 4, 5}
	for name, fs := range map[string]*vfs.MemFS{"closed": mem, "killed": killed,
		"closed, power loss": mem.CrashClone(), "killed, power loss": killed.CrashClone()} {
		r := openMem(t, fs)
		if got := readOffsets(t, r, 1); !slices.Equal(got, whole) {
			t.Fatalf("%s: %v, want the journal's round written too: %v", name, got, whole)
		}
	}
}

// ENOSPC writing a new segment's file: the create is refused with
// ErrNoSpace and leaves nothing; the same id is created once space
// returns.
func TestNoSpaceOnSegmentCreate(t *testing.T) {
	for _, noJournal := range []bool{false, true} {
		ctx := context.Background()
		var full atomic.Bool
		mem := vfs.NewMem()
		fs := vfs.NewFaulty(mem, fullDisk(&full, vfs.OpWrite, segmentFiles, 5))
		s := openMemCfg(t, Config{Dir: "/data", FS: fs, NoJournal: noJournal})
		full.Store(true)
		if err := s.Create(1, 0); !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrFailed) {
			t.Fatalf("journal off %v: create on a full disk: %v", noJournal, err)
		}
		if st := s.DiskState(); st != DiskFull || s.Err() != nil {
			t.Fatalf("journal off %v: state %v, err %v", noJournal, st, s.Err())
		}
		full.Store(false)
		if st := s.CheckSpace(); st != DiskOK {
			t.Fatalf("journal off %v: state after space returned: %v", noJournal, st)
		}
		if err := s.Create(1, 0); err != nil {
			t.Fatalf("journal off %v: create once space returned: %v", noJournal, err)
		}
		if err := s.Append(ctx, 1, span(t, 0, 3)); err != nil {
			t.Fatal(err)
		}
		ackLog{1: 3}.check(t, openMem(t, mem.CrashClone()), "after a power loss")
	}
}

// ENOSPC making the next journal file (a checkpoint's switch): the
// current file goes on, the store says full until the probe finds room,
// and the switch and its checkpoint happen then.
func TestNoSpaceOnJournalSwitch(t *testing.T) {
	ctx := context.Background()
	var full atomic.Bool
	mem := vfs.NewMem()
	fs := vfs.NewFaulty(mem, nil)
	s := openMemCfg(t, Config{Dir: "/data", FS: fs, JournalFileBytes: 4 << 10})
	if err := s.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	journalFiles := func(name string) bool { return strings.HasSuffix(name, journalExt) }
	fs.SetRule(func(op vfs.Op, name string) error {
		if full.Load() && (op == vfs.OpOpen || op == vfs.OpRename) && journalFiles(name) {
			return syscall.ENOSPC
		}
		return fullDisk(&full, vfs.OpWrite, func(string) bool { return false }, 0)(op, name)
	})
	full.Store(true)
	acked := ackLog{}
	for s.DiskState() == DiskOK {
		if err := s.Append(ctx, 1, span(t, acked[1], 40)); err != nil {
			t.Fatalf("append before the switch: %v", err)
		}
		acked[1] += 40
	}
	if err := s.Err(); err != nil {
		t.Fatalf("store failed: %v", err)
	}
	if err := s.Append(ctx, 1, span(t, acked[1], 40)); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append while full: %v", err)
	}
	before := s.Stats().Checkpoints
	full.Store(false)
	if st := s.CheckSpace(); st != DiskOK {
		t.Fatalf("state after space returned: %v", st)
	}
	for range 4 {
		if err := s.Append(ctx, 1, span(t, acked[1], 40)); err != nil {
			t.Fatal(err)
		}
		acked[1] += 40
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for s.Stats().Checkpoints == before {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("no checkpoint once space returned")
		}
	}
	acked.check(t, s, "live")
	acked.check(t, openMem(t, mem.CrashClone()), "after a power loss")
}

// ENOSPC writing a seal's files: the seal is refused with ErrNoSpace,
// the store says full without failing, and the seal succeeds once space
// returns.
func TestNoSpaceOnSeal(t *testing.T) {
	ctx := context.Background()
	var full atomic.Bool
	mem := vfs.NewMem()
	sealFiles := func(name string) bool {
		return !strings.HasSuffix(name, logExt) && !strings.HasSuffix(name, journalExt)
	}
	fs := vfs.NewFaulty(mem, fullDisk(&full, vfs.OpWrite, sealFiles, 3))
	s := openMemCfg(t, Config{Dir: "/data", FS: fs})
	if err := s.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, 1, span(t, 0, 3)); err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	if _, err := s.Seal(ctx, 1); !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrFailed) {
		t.Fatalf("seal on a full disk: %v", err)
	}
	if st := s.DiskState(); st != DiskFull || s.Err() != nil {
		t.Fatalf("state %v, err %v", st, s.Err())
	}
	full.Store(false)
	if st := s.CheckSpace(); st != DiskOK {
		t.Fatalf("state after space returned: %v", st)
	}
	if _, err := s.Seal(ctx, 1); err != nil {
		t.Fatalf("seal once space returned: %v", err)
	}
	ackLog{1: 3}.check(t, openMem(t, mem.CrashClone()), "after a power loss")
}

// Any other write error on a segment file stays fail-stop.
func TestEIOOnSegmentWriteFails(t *testing.T) {
	for _, noJournal := range []bool{false, true} {
		ctx := context.Background()
		fs := vfs.NewFaulty(vfs.NewMem(), nil)
		s := openMemCfg(t, Config{Dir: "/data", FS: fs, NoJournal: noJournal})
		if err := s.Create(1, 0); err != nil {
			t.Fatal(err)
		}
		fs.SetRule(vfs.FailOn(vfs.OpWrite, logExt, syscall.EIO))
		err := s.Append(ctx, 1, span(t, 0, 3))
		if noJournal && !errors.Is(err, ErrFailed) {
			t.Fatalf("direct write with EIO: %v", err)
		}
		if s.Err() == nil || s.DiskState() != DiskFailing {
			t.Fatalf("journal off %v: after EIO: err %v, state %v", noJournal, s.Err(), s.DiskState())
		}
	}
}
