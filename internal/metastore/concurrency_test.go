package metastore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/vfs"
)

// TestConcurrentApply: many goroutines apply at once (run with -race);
// every command is acknowledged, the state holds them all, and a reopen
// (through automatic snapshots) agrees.
func TestConcurrentApply(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, vfs.OS(), dir, Options{SnapshotEvery: 50})
	mustApply(t, s, script()[0])
	const workers, each = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				c := metadata.Command{V: 1, Kind: metadata.KindCommitOffsets, Topic: "orders",
					Group: fmt.Sprintf("g%d", w), Now: int64(i),
					Entries: []metadata.GroupEntry{{Source: 1, SliceBits: 3, Offset: uint64(i)}}}
				res, err := s.Apply(context.Background(), c)
				if err == nil {
					err = res.Err
				}
				errs <- err
				s.View(func(st *metadata.State) { _ = st.Groups(1) })
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s.View(func(st *metadata.State) {
		for w := range workers {
			es := st.GroupEntries(fmt.Sprintf("g%d", w), 1)
			if len(es) != 1 || es[0].Offset != each-1 {
				t.Fatalf("group g%d: %v", w, es)
			}
		}
	})
	before := viewBytes(t, s)
	mustClose(t, s)
	s = mustOpen(t, vfs.OS(), dir, Options{})
	defer mustClose(t, s)
	wantState(t, s, before)
}

// holdSyncs makes the next log fsync wait: it reports on entered when it
// starts and proceeds when release is closed.
func holdSyncs(fs *hookFS) (entered chan struct{}, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	fs.set(nil, func() error {
		once.Do(func() {
			close(entered)
			<-release
		})
		return nil
	})
	return entered, release
}

// applyOK is for goroutines other than the test's: it reports with Error.
func applyOK(t *testing.T, s *Store, c metadata.Command) {
	res, err := s.Apply(context.Background(), c)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		t.Errorf("%s: %v", c.Kind, err)
	}
}

func waitPending(s *Store, n int) {
	for {
		s.mu.Lock()
		got := len(s.pending)
		s.mu.Unlock()
		if got >= n {
			return
		}
		runtime.Gosched()
	}
}

// TestGroupCommit: while one fsync is in flight, later commands queue and
// then share a single write and fsync.
func TestGroupCommit(t *testing.T) {
	fs := &hookFS{FS: vfs.OS()}
	s := mustOpen(t, fs, t.TempDir(), Options{})
	defer mustClose(t, s)
	entered, release := holdSyncs(fs)
	base := fs.syncCount()
	var wg sync.WaitGroup
	wg.Go(func() { applyOK(t, s, topicCmd(0)) })
	<-entered
	const n = 10
	for i := 1; i <= n; i++ {
		wg.Go(func() { applyOK(t, s, topicCmd(i)) })
	}
	waitPending(s, n)
	close(release)
	wg.Wait()
	if got := fs.syncCount() - base; got != 2 {
		t.Fatalf("%d fsyncs for %d commands, want 2", got, n+1)
	}
	s.View(func(st *metadata.State) {
		if got := len(st.Topics()); got != n+1 {
			t.Fatalf("%d topics", got)
		}
	})
}

// TestViewShowsOnlyDurable: a command whose fsync is in flight is not
// visible; it is once Apply returns.
func TestViewShowsOnlyDurable(t *testing.T) {
	fs := &hookFS{FS: vfs.OS()}
	s := mustOpen(t, fs, t.TempDir(), Options{})
	defer mustClose(t, s)
	entered, release := holdSyncs(fs)
	applied := make(chan struct{})
	go func() {
		applyOK(t, s, script()[0])
		close(applied)
	}()
	<-entered
	s.View(func(st *metadata.State) {
		if _, ok := st.Topic("orders"); ok {
			t.Error("View shows a command before its fsync")
		}
	})
	close(release)
	<-applied
	s.View(func(st *metadata.State) {
		if _, ok := st.Topic("orders"); !ok {
			t.Error("View misses an acknowledged command")
		}
	})
}

// TestFailStop: after a failed write or fsync the store refuses every
// Apply, even once the disk recovers; View keeps the durable state; a reopen
// serves what the disk holds.
func TestFailStop(t *testing.T) {
	for _, which := range []string{"write", "sync"} {
		t.Run(which, func(t *testing.T) {
			dir := t.TempDir()
			fs := &hookFS{FS: vfs.OS()}
			s := mustOpen(t, fs, dir, Options{})
			cmds := script()
			want := states(t, cmds)
			mustApply(t, s, cmds[:2]...)
			boom := errors.New("disk on fire")
			fail := func() error { return boom }
			if which == "write" {
				fs.set(fail, nil)
			} else {
				fs.set(nil, fail)
			}
			if _, err := s.Apply(context.Background(), cmds[2]); !errors.Is(err, ErrFailed) || !errors.Is(err, boom) {
				t.Fatalf("failing Apply: %v", err)
			}
			fs.set(nil, nil)
			if _, err := s.Apply(context.Background(), cmds[3]); !errors.Is(err, ErrFailed) {
				t.Fatalf("Apply after a failure: %v", err)
			}
			if err := s.Snapshot(); !errors.Is(err, ErrFailed) {
				t.Fatalf("Snapshot after a failure: %v", err)
			}
			if !errors.Is(s.Err(), ErrFailed) {
				t.Fatalf("Err: %v", s.Err())
			}
			wantState(t, s, want[2])
			mustClose(t, s)
			s = mustOpen(t, vfs.OS(), dir, Options{})
			defer mustClose(t, s)
			// A failed write wrote nothing; a failed fsync after a good
			// write may leave the command on disk: its outcome is unknown.
			got := viewBytes(t, s)
			if string(got) != string(want[2]) && (which == "write" || string(got) != string(want[3])) {
				t.Fatalf("after reopen: %s", got)
			}
		})
	}
}
