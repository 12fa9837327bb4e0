package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/vfs"
)

func readLines(t *testing.T, fs vfs.FS, path string) []Event {
	t.Helper()
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	buf := make([]byte, size)
	f.ReadAt(buf, 0)
	var out []Event
	sc := bufio.NewScanner(bytes.NewReader(buf))
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
		}
		out = append(out, ev)
	}
	return out
}

func TestRotationKeepsBoundedFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l, err := Open(Config{Path: path, MaxFileBytes: 1000, MaxFiles: 3, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := range n {
		l.Record(Event{Time: time.Unix(int64(i), 0), Type: AuthSuccess, Result: ResultOK, User: fmt.Sprint("user", i)})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := os.ReadDir(dir)
	if len(names) != 4 {
		t.Fatalf("%d files, want the live one and 3 rotated", len(names))
	}
	var seqs []uint64
	for _, name := range []string{"audit.log.3", "audit.log.2", "audit.log.1", "audit.log"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 1000 {
			t.Errorf("%s holds %d bytes, over the 1000 limit", name, st.Size())
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, st.Mode().Perm())
		}
		for _, ev := range readLines(t, vfs.OS(), filepath.Join(dir, name)) {
			if ev.Node != "n1" || ev.Type != AuthSuccess {
				t.Fatalf("event %+v", ev)
			}
			seqs = append(seqs, ev.Seq)
		}
	}
	// The newest events survive, in order, without gaps.
	if len(seqs) == 0 || seqs[len(seqs)-1] != n {
		t.Fatalf("last event %v, want seq %d", seqs[len(seqs)-1:], n)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("events out of order or lost: %d then %d", seqs[i-1], seqs[i])
		}
	}
}

func TestReopenAppends(t *testing.T) {
	fs := vfs.NewMem()
	for i := range 2 {
		l, err := Open(Config{Path: "audit.log", FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		l.Record(Event{Type: UserCreated, Result: ResultOK, Target: fmt.Sprint("u", i)})
		l.Close()
	}
	if evs := readLines(t, fs, "audit.log"); len(evs) != 2 || evs[1].Target != "u1" {
		t.Fatalf("events %+v", evs)
	}
}

// blockingFS holds every write until release is closed.
type blockingFS struct {
	vfs.FS
	release chan struct{}
}

type blockingFile struct {
	vfs.File
	release chan struct{}
}

func (b blockingFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := b.FS.OpenFile(name, flag, perm)
	return blockingFile{f, b.release}, err
}

func (b blockingFile) Write(p []byte) (int, error) {
	<-b.release
	return b.File.Write(p)
}

func TestFullQueueDropsAndReports(t *testing.T) {
	fs := blockingFS{vfs.NewMem(), make(chan struct{})}
	l, err := Open(Config{Path: "audit.log", FS: fs, QueueLen: 4})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range 100 {
		l.Record(Event{Type: AuthFailure, Result: ResultRefused})
	}
	if time.Since(start) > time.Second {
		t.Fatal("Record blocked on a stalled writer")
	}
	// At most the queue and the event the writer holds get through.
	if d := l.Dropped(); d < 100-5 {
		t.Fatalf("dropped %d of 100 with a queue of 4", d)
	}
	close(fs.release)
	l.Record(Event{Type: AuthSuccess, Result: ResultOK}) // may be dropped too
	l.Close()
	evs := readLines(t, fs.FS, "audit.log")
	var reported bool
	for _, ev := range evs {
		if ev.Type == EventsDropped && ev.Detail["total"] != "" {
			reported = true
		}
	}
	if !reported {
		t.Fatalf("drops not reported in %d events", len(evs))
	}
	l.Record(Event{Type: AuthSuccess}) // after Close: dropped, never blocks
}

func TestDisabledLog(t *testing.T) {
	l, err := Open(Config{})
	if l != nil || err != nil {
		t.Fatalf("Open without a path = %v, %v", l, err)
	}
	l.Record(Event{Type: AuthSuccess})
	if l.Dropped() != 0 || l.Close() != nil {
		t.Fatal("nil log")
	}
}

func TestEventHasNoSecretFields(t *testing.T) {
	b, _ := json.Marshal(Event{Detail: map[string]string{}})
	for _, word := range []string{"password", "token", "secret", "key"} {
		if strings.Contains(strings.ToLower(string(b)), word) {
			t.Fatalf("event JSON has a %q field: %s", word, b)
		}
	}
}
