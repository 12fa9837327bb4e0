package metastore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/vfs"
)

// script is a sequence of commands that are all accepted, in order.
func script() []metadata.Command {
	v := metadata.Version
	return []metadata.Command{
		{V: v, Kind: metadata.KindCreateTopic, Topic: "orders", Bits: 4, Ranges: 2, Now: 1},
		{V: v, Kind: metadata.KindOpenSegment, Range: 1, Replicas: []string{"n1"}, Now: 2},
		{V: v, Kind: metadata.KindSealSegment, Segment: 1, End: 10, Records: 10, Bytes: 100, Now: 3},
		{V: v, Kind: metadata.KindSplitRange, Range: 1, Now: 4},
		{V: v, Kind: metadata.KindOpenSegment, Range: 3, Now: 5},
		{V: v, Kind: metadata.KindCommitOffsets, Group: "g", Topic: "orders", Now: 6,
			Entries: []metadata.GroupEntry{{Source: 1, SliceStart: 0, SliceBits: 3, Offset: 10}}},
		{V: v, Kind: metadata.KindCreateUser, User: "alice", PasswordHash: "h", Perms: []string{"produce"}, Now: 7},
		{V: v, Kind: metadata.KindGrantACL, User: "alice", Operation: "produce", Pattern: "orders", Now: 8},
		{V: v, Kind: metadata.KindInitCluster, ClusterSecret: []byte("0123456789abcdef"), Now: 9},
		{V: v, Kind: metadata.KindCreateTopic, Topic: "events", Bits: 8, Now: 10},
		{V: v, Kind: metadata.KindDeleteTopic, Topic: "events", Now: 11},
		{V: v, Kind: metadata.KindSealSegment, Segment: 2, End: 5, Records: 5, Now: 12},
	}
}

// topicCmd returns an accepted command that differs for every i.
func topicCmd(i int) metadata.Command {
	return metadata.Command{V: metadata.Version, Kind: metadata.KindCreateTopic,
		Topic: fmt.Sprintf("t%d", i), Bits: 2, Now: int64(i)}
}

// states returns the snapshot after each prefix of cmds: states[k] is the
// state after the first k.
func states(t *testing.T, cmds []metadata.Command) [][]byte {
	t.Helper()
	st := metadata.New()
	out := [][]byte{snapshotOf(t, st)}
	for _, c := range cmds {
		if res := st.Apply(c); res.Err != nil {
			t.Fatalf("%s: %v", c.Kind, res.Err)
		}
		out = append(out, snapshotOf(t, st))
	}
	return out
}

func snapshotOf(t *testing.T, st *metadata.State) []byte {
	t.Helper()
	b, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func viewBytes(t *testing.T, s *Store) []byte {
	t.Helper()
	var b []byte
	s.View(func(st *metadata.State) { b = snapshotOf(t, st) })
	return b
}

func mustOpen(t *testing.T, fs vfs.FS, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(fs, dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func mustApply(t *testing.T, s *Store, cmds ...metadata.Command) {
	t.Helper()
	for _, c := range cmds {
		res, err := s.Apply(context.Background(), c)
		if err != nil || res.Err != nil {
			t.Fatalf("%s: %v / %v", c.Kind, err, res.Err)
		}
	}
}

func mustClose(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func wantState(t *testing.T, s *Store, want []byte) {
	t.Helper()
	if got := viewBytes(t, s); !bytes.Equal(got, want) {
		t.Fatalf("state differs:\n got %s\nwant %s", got, want)
	}
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	names, err := vfs.OS().ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func readAll(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeAll(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func logPath(dir string, index uint64) string  { return filepath.Join(dir, logName(index)) }
func snapPath(dir string, index uint64) string { return filepath.Join(dir, snapName(index)) }

// hookFS runs hooks before writes and syncs of log files, so tests can fail
// them or hold them.
type hookFS struct {
	vfs.FS
	mu        sync.Mutex
	writeHook func() error
	syncHook  func() error
	syncs     int
}

func (h *hookFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := h.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasPrefix(filepath.Base(name), logPrefix) {
		return f, err
	}
	return &hookFile{File: f, fs: h}, nil
}

func (h *hookFS) hooks() (write, sync func() error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.writeHook, h.syncHook
}

func (h *hookFS) set(write, sync func() error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.writeHook, h.syncHook = write, sync
}

func (h *hookFS) syncCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.syncs
}

type hookFile struct {
	vfs.File
	fs *hookFS
}

func (f *hookFile) WriteAt(b []byte, off int64) (int, error) {
	if hook, _ := f.fs.hooks(); hook != nil {
		if err := hook(); err != nil {
			return 0, err
		}
	}
	return f.File.WriteAt(b, off)
}

func (f *hookFile) Sync() error {
	_, hook := f.fs.hooks()
	if hook != nil {
		if err := hook(); err != nil {
			return err
		}
	}
	f.fs.mu.Lock()
	f.fs.syncs++
	f.fs.mu.Unlock()
	return f.File.Sync()
}
