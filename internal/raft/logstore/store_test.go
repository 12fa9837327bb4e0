package logstore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/malachi-log/malachi/internal/vfs"
)

// manyGroups runs Saves over 64 groups, each update with entries and a
// hard state, and returns the model.
func manyGroups(t *testing.T, s *Store, cycles int) model {
	m := model{}
	for c := range cycles {
		var ups []Update
		for g := uint64(1); g <= 64; g++ {
			i := uint64(c + 1)
			ups = append(ups, Update{Group: g, Entries: []*pb.Entry{ent(i, 1, fmt.Sprintf("g%d-%d", g, i))},
				HardState: hardState(1, g%3, i)})
		}
		runOps(t, s, m, []op{{kind: opSave, updates: ups}})
	}
	return m
}

func TestRoundTripManyGroups(t *testing.T) {
	for _, disk := range []string{"mem", "os"} {
		t.Run(disk, func(t *testing.T) {
			var fs vfs.FS = vfs.NewMem()
			d := dir
			if disk == "os" {
				fs, d = vfs.OS(), t.TempDir()+"/raft"
			}
			s, err := Open(fs, d, Options{})
			if err != nil {
				t.Fatal(err)
			}
			m := manyGroups(t, s, 20)
			checkAgainst(t, s, m)
			if got := len(s.Groups()); got != 64 {
				t.Fatalf("Groups: %d, want 64", got)
			}
			mustClose(t, s)
			s, err = Open(fs, d, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer mustClose(t, s)
			checkAgainst(t, s, m)
		})
	}
}

func TestAcknowledgedSavesSurvivePowerLoss(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, mem, Options{})
	m := manyGroups(t, s, 5)
	// No Close: the power goes while the store runs.
	lost := mem.CrashClone()
	s2 := mustOpen(t, lost, Options{})
	defer mustClose(t, s2)
	checkAgainst(t, s2, m)
	mustClose(t, s)
}

func TestSaveOverwritesConflictingSuffix(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, mem, Options{})
	m := model{}
	runOps(t, s, m, []op{
		{kind: opSave, updates: []Update{{Group: 7, Entries: ents(1, 5, 1), HardState: hardState(1, 1, 2)}}},
		// A new leader in term 2 replaces entries 3 to 5 with 3 and 4.
		{kind: opSave, updates: []Update{{Group: 7, Entries: ents(3, 4, 2), HardState: hardState(2, 2, 2)}}},
	})
	st := s.Storage(7)
	if last, _ := st.LastIndex(); last != 4 {
		t.Fatalf("last index %d, want 4", last)
	}
	for i, want := range map[uint64]uint64{2: 1, 3: 2, 4: 2} {
		if term, err := st.Term(i); err != nil || term != want {
			t.Fatalf("Term(%d) = %d, %v; want %d", i, term, err, want)
		}
	}
	checkAgainst(t, s, m)
	mustClose(t, s)
	s = mustOpen(t, mem, Options{})
	defer mustClose(t, s)
	checkAgainst(t, s, m)
}

func TestSaveRefusesAndWritesNothing(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, mem, Options{MaxSaveBytes: 1000, MaxSnapshotBytes: 100})
	defer mustClose(t, s)
	mustSave(t, s, Update{Group: 1, Entries: ents(1, 3, 1)})
	before, size := renderStore(s), s.size
	gapped := []*pb.Entry{ent(4, 1, ""), ent(6, 1, "")}
	cases := map[string]struct {
		ups  []Update
		want error
	}{
		"gap after last":       {[]Update{{Group: 1, Entries: ents(5, 6, 1)}}, ErrInvalid},
		"gap inside":           {[]Update{{Group: 1, Entries: gapped}}, ErrInvalid},
		"second update bad":    {[]Update{{Group: 2, Entries: ents(1, 1, 1)}, {Group: 1, Entries: ents(9, 9, 1)}}, ErrInvalid},
		"entries too large":    {[]Update{{Group: 1, Entries: []*pb.Entry{ent(4, 1, strings.Repeat("x", 1000))}}}, ErrTooLarge},
		"snapshot too large":   {[]Update{{Group: 1, Snapshot: snapshot(9, 1, strings.Repeat("x", 101))}}, ErrTooLarge},
		"commit past the log":  {[]Update{{Group: 1, Entries: ents(4, 4, 1), HardState: hardState(1, 0, 5)}}, ErrInvalid},
		"snapshot out of date": {[]Update{{Group: 3, Snapshot: snapshot(5, 1, "")}, {Group: 3, Snapshot: snapshot(4, 1, "")}}, raft.ErrSnapOutOfDate},
	}
	for name, c := range cases {
		if err := s.Save(c.ups); !errors.Is(err, c.want) {
			t.Errorf("%s: Save = %v, want %v", name, err, c.want)
		}
	}
	if renderStore(s) != before || s.size != size {
		t.Fatalf("a refused Save changed the store")
	}
	mustSave(t, s, Update{Group: 1, Entries: ents(4, 4, 1)})
}

func TestCompactAndSnapshots(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, mem, Options{})
	m := model{}
	runOps(t, s, m, []op{
		{kind: opSave, updates: []Update{{Group: 1, Entries: ents(1, 10, 1), HardState: hardState(1, 1, 8)}}},
		{kind: opSnapshot, group: 1, index: 6, snap: snapshot(6, 1, "state@6", 1, 2, 3)},
		{kind: opCompact, group: 1, index: 4},
		{kind: opCompact, group: 1, index: 4},                               // already compacted
		{kind: opSnapshot, group: 1, index: 5, snap: snapshot(5, 1, "old")}, // out of date
	})
	if err := s.Compact(1, 7); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Compact past the snapshot = %v, want ErrInvalid", err)
	}
	if err := s.SetSnapshot(1, snapshot(8, 2, "bad term")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetSnapshot with a wrong term = %v, want ErrInvalid", err)
	}
	st := s.Storage(1)
	if _, err := st.Entries(4, 6, 1<<20); err != raft.ErrCompacted {
		t.Fatalf("Entries(4) = %v, want ErrCompacted", err)
	}
	if term, err := st.Term(4); err != nil || term != 1 {
		t.Fatalf("Term(4) = %d, %v; want the compaction point's term", term, err)
	}
	checkAgainst(t, s, m)
	// A snapshot from the leader replaces the log.
	runOps(t, s, m, []op{
		{kind: opSave, updates: []Update{{Group: 1, Snapshot: snapshot(20, 3, "state@20", 1, 2), HardState: hardState(3, 2, 20)}}},
		{kind: opSave, updates: []Update{{Group: 1, Entries: ents(21, 22, 3)}}},
	})
	if first, _ := st.FirstIndex(); first != 21 {
		t.Fatalf("first index %d after the leader's snapshot, want 21", first)
	}
	checkAgainst(t, s, m)
	mustClose(t, s)
	s = mustOpen(t, mem, Options{})
	defer mustClose(t, s)
	checkAgainst(t, s, m)
}

func TestEntriesHonoursMaxSize(t *testing.T) {
	s := mustOpen(t, vfs.NewMem(), Options{})
	defer mustClose(t, s)
	mustSave(t, s, Update{Group: 1, Entries: ents(1, 10, 1)})
	st := s.Storage(1)
	if got := mustEntries(t, st, 1, 11, 0); len(got) != 1 {
		t.Fatalf("maxSize 0 gave %d entries, want at least one", len(got))
	}
	size := uint64(entriesSize(ents(1, 3, 1)))
	if got := mustEntries(t, st, 1, 11, size); len(got) != 3 {
		t.Fatalf("maxSize of three entries gave %d", len(got))
	}
	got := mustEntries(t, st, 2, 5, 1<<20)
	got = append(got, ent(99, 9, "appended by the caller"))
	if again := mustEntries(t, st, 2, 6, 1<<20); again[3].GetIndex() != 5 {
		t.Fatalf("an append to a returned slice changed the log")
	}
	// raft compares these errors with ==.
	if _, err := st.Entries(5, 12, 1<<20); err != raft.ErrUnavailable {
		t.Fatalf("Entries past the last index = %v, want ErrUnavailable", err)
	}
}

func mustEntries(t *testing.T, st raft.Storage, lo, hi, max uint64) []*pb.Entry {
	t.Helper()
	e, err := st.Entries(lo, hi, max)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestRemoveGroupIsDurable(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, mem, Options{})
	m := model{}
	runOps(t, s, m, []op{
		{kind: opSave, updates: []Update{{Group: 1, Entries: ents(1, 2, 1)}, {Group: 2, HardState: hardState(1, 0, 0)}}},
		{kind: opRemove, group: 1},
		{kind: opRemove, group: 5},
	})
	if g := s.Groups(); len(g) != 1 || g[0] != 2 {
		t.Fatalf("Groups = %v, want [2]", g)
	}
	if last, _ := s.Storage(1).LastIndex(); last != 0 {
		t.Fatalf("a removed group still has entries up to %d", last)
	}
	lost := mem.CrashClone()
	s2 := mustOpen(t, lost, Options{})
	defer mustClose(t, s2)
	checkAgainst(t, s2, m)
	mustClose(t, s)
}

func TestBoundsRefuseClearly(t *testing.T) {
	s := mustOpen(t, vfs.NewMem(), Options{MaxGroups: 2, MaxLiveBytes: 200})
	defer mustClose(t, s)
	mustSave(t, s, Update{Group: 1, HardState: hardState(1, 0, 0)}, Update{Group: 2, HardState: hardState(1, 0, 0)})
	if err := s.Save([]Update{{Group: 3, HardState: hardState(1, 0, 0)}}); !errors.Is(err, ErrFull) {
		t.Fatalf("a third group: %v, want ErrFull", err)
	}
	if err := s.Save(make([]Update, 3)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("three updates: %v, want ErrTooLarge", err)
	}
	big := []*pb.Entry{ent(1, 1, strings.Repeat("x", 150)), ent(2, 1, strings.Repeat("x", 150))}
	if err := s.Save([]Update{{Group: 1, Entries: big}}); !errors.Is(err, ErrFull) {
		t.Fatalf("over MaxLiveBytes: %v, want ErrFull", err)
	}
	// Compaction makes room again.
	mustSave(t, s, Update{Group: 1, Entries: big[:1]})
	if err := s.SetSnapshot(1, snapshot(1, 1, "")); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(1, 1); err != nil {
		t.Fatal(err)
	}
	mustSave(t, s, Update{Group: 1, Entries: big[1:]})
	for _, o := range []Options{{MaxSaveBytes: MaxRecordBytes + 1}, {MaxSnapshotBytes: MaxRecordBytes + 1}, {FileBytes: -1}} {
		if _, err := Open(vfs.NewMem(), dir, o); err == nil {
			t.Errorf("Open accepted %+v", o)
		}
	}
}

func TestRotationKeepsEverything(t *testing.T) {
	mem := vfs.NewMem()
	opts := Options{FileBytes: 4 << 10}
	s := mustOpen(t, mem, opts)
	m := model{}
	g := gen{intn: newRand(1).IntN, groups: 6, bigEvery: 8}
	var accepted []op
	for range 400 {
		accepted = append(accepted, runOps(t, s, m, []op{g.next(m)})...)
	}
	checkAgainst(t, s, m)
	if s.seq < 5 {
		t.Fatalf("only %d files were started; the test needs rotations", s.seq)
	}
	names, err := mem.ReadDir(dir)
	if err != nil || len(names) != 1 {
		t.Fatalf("files after rotations: %v, %v; want only the newest", names, err)
	}
	mustClose(t, s)
	s = mustOpen(t, mem, opts)
	defer mustClose(t, s)
	checkAgainst(t, s, replayModel(t, accepted))
}

func TestFailedSyncFailsStop(t *testing.T) {
	mem := vfs.NewMem()
	ffs := vfs.NewFaulty(mem, nil)
	s := mustOpen(t, ffs, Options{})
	m := model{}
	runOps(t, s, m, []op{{kind: opSave, updates: []Update{{Group: 1, Entries: ents(1, 2, 1)}}}})
	ffs.SetRule(vfs.FailOn(vfs.OpSync, filePrefix, nil))
	if err := s.Save([]Update{{Group: 1, Entries: ents(3, 3, 1)}}); !errors.Is(err, ErrFailed) || !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("Save with a failing fsync = %v, want ErrFailed", err)
	}
	ffs.SetRule(nil)
	if err := s.Save([]Update{{Group: 1, Entries: ents(3, 3, 1)}}); !errors.Is(err, ErrFailed) {
		t.Fatalf("Save after a failure = %v, want ErrFailed", err)
	}
	checkAgainst(t, s, m) // readers keep the durable state
	mustClose(t, s)
	s = mustOpen(t, mem.CrashClone(), Options{})
	defer mustClose(t, s)
	checkAgainst(t, s, m)
}

func TestFailedRotationRefusesAndCarriesOn(t *testing.T) {
	mem := vfs.NewMem()
	ffs := vfs.NewFaulty(mem, nil)
	opts := Options{FileBytes: 256}
	s := mustOpen(t, ffs, opts)
	defer mustClose(t, s)
	m := model{}
	runOps(t, s, m, []op{{kind: opSave, updates: []Update{{Group: 1, Entries: ents(1, 40, 1)}}}})
	ffs.SetRule(vfs.FailOn(vfs.OpSync, tmpSuffix, nil))
	if err := s.Save([]Update{{Group: 1, Entries: ents(41, 41, 1)}}); !errors.Is(err, vfs.ErrInjected) || errors.Is(err, ErrFailed) {
		t.Fatalf("Save whose rotation fails before the rename = %v, want the error and no fail-stop", err)
	}
	ffs.SetRule(nil)
	runOps(t, s, m, []op{{kind: opSave, updates: []Update{{Group: 1, Entries: ents(41, 41, 1)}}}})
	if s.seq != 2 {
		t.Fatalf("file sequence %d, want the retried rotation to make 2", s.seq)
	}
	s2 := mustOpen(t, mem.CrashClone(), opts)
	defer mustClose(t, s2)
	checkAgainst(t, s2, m)
}

func TestClosedStoreRefusesWrites(t *testing.T) {
	s := mustOpen(t, vfs.NewMem(), Options{})
	mustSave(t, s, Update{Group: 1, Entries: ents(1, 1, 1)})
	mustClose(t, s)
	if err := s.Save([]Update{{Group: 1, Entries: ents(2, 2, 1)}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Save after Close = %v, want ErrClosed", err)
	}
	if last, _ := s.Storage(1).LastIndex(); last != 1 {
		t.Fatalf("reads after Close: last index %d, want 1", last)
	}
}

// Readers run while writers append, overwrite, snapshot and compact: each
// answer must be a consistent log (the race detector checks the rest).
func TestReadersSeeConsistentLogsDuringWrites(t *testing.T) {
	s := mustOpen(t, vfs.NewMem(), Options{FileBytes: 8 << 10})
	defer mustClose(t, s)
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() { errs <- readUntil(stop, s.Storage(uint64(1+r%2))) })
	}
	m := model{}
	g := gen{intn: newRand(3).IntN, groups: 2, bigEvery: 20}
	for range 600 {
		runOps(t, s, m, []op{g.next(m)})
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkAgainst(t, s, m)
}

func readUntil(stop <-chan struct{}, st *GroupStorage) error {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		first, _ := st.FirstIndex()
		last, _ := st.LastIndex()
		if last < first {
			continue
		}
		got, err := st.Entries(first, last+1, 1<<30)
		if err != nil {
			// The log moved on between the calls.
			if errors.Is(err, raft.ErrCompacted) || errors.Is(err, raft.ErrUnavailable) {
				continue
			}
			return err
		}
		for i, e := range got {
			if e.GetIndex() != first+uint64(i) {
				return fmt.Errorf("entry %d of [%d, %d] has index %d", i, first, last, e.GetIndex())
			}
		}
	}
}
