package logstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// osStore fills a store on the real disk with a few Saves and returns its
// directory, the model and the active file's path.
func osStore(t *testing.T) (string, model, string) {
	d := filepath.Join(t.TempDir(), "raft")
	s, err := Open(vfs.OS(), d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := model{}
	for i := uint64(1); i <= 10; i++ {
		runOps(t, s, m, []op{{kind: opSave, updates: []Update{
			{Group: 1, Entries: ents(i, i, 1), HardState: hardState(1, 1, i)},
			{Group: 2, Entries: ents(i, i, 2)},
		}}})
	}
	mustClose(t, s)
	return d, m, filepath.Join(d, fileName(1))
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptMiddleRecordIsRefusedAndKept(t *testing.T) {
	d, _, name := osStore(t)
	data := readFile(t, name)
	// Flip one byte in the middle of the file: records follow it.
	data[len(data)/2] ^= 0x40
	writeFile(t, name, data)
	_, err := Open(vfs.OS(), d, Options{})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	if !bytes.Equal(readFile(t, name), data) {
		t.Fatal("Open changed a corrupt file")
	}
	if names, _ := vfs.OS().ReadDir(d); len(names) != 1 {
		t.Fatalf("files after a refused Open: %v", names)
	}
}

func TestTornTailIsCut(t *testing.T) {
	for name, tear := range map[string]func([]byte) []byte{
		"half a record": func(b []byte) []byte { return b[:len(b)-7] },
		"zeros":         func(b []byte) []byte { return append(b, make([]byte, 100)...) },
		// The last batch's records are whole but its commit is missing.
		"no commit": func(b []byte) []byte { return b[:len(b)-headerLen-payloadMin] },
	} {
		t.Run(name, func(t *testing.T) {
			d, m, file := osStore(t)
			data := readFile(t, file)
			writeFile(t, file, tear(data))
			s, err := Open(vfs.OS(), d, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer mustClose(t, s)
			want := m
			if name != "zeros" {
				// The torn batch was the last Save: one entry for each group.
				want = model{}
				for i := uint64(1); i <= 9; i++ {
					_ = want.apply(op{kind: opSave, updates: []Update{
						{Group: 1, Entries: ents(i, i, 1), HardState: hardState(1, 1, i)},
						{Group: 2, Entries: ents(i, i, 2)},
					}})
				}
			}
			checkAgainst(t, s, want)
			if got := readFile(t, file); int64(len(got)) != s.size {
				t.Fatalf("file holds %d bytes, the store counts %d", len(got), s.size)
			}
		})
	}
}

func TestDamagedOlderFileIsRefused(t *testing.T) {
	mem := vfs.NewMem()
	// Removals fail: rotation leaves the older files in place, as a crash
	// between a rotation's rename and its removals does.
	ffs := vfs.NewFaulty(mem, vfs.FailOn(vfs.OpRemove, filePrefix, nil))
	opts := Options{FileBytes: 256}
	s := mustOpen(t, ffs, opts)
	m := model{}
	for i := uint64(1); i <= 40; i++ {
		runOps(t, s, m, []op{{kind: opSave, updates: []Update{{Group: 1, Entries: ents(i, i, 1)}}}})
	}
	mustClose(t, s)
	names, _ := mem.ReadDir(dir)
	if len(names) < 2 {
		t.Fatalf("files %v: the test needs an older file", names)
	}
	// Whole older files are superseded and cleaned up by Open.
	s = mustOpen(t, mem.Clone(), opts)
	checkAgainst(t, s, m)
	mustClose(t, s)

	older := filepath.Join(dir, names[0])
	data, err := vfs.ReadFile(mem, older)
	if err != nil {
		t.Fatal(err)
	}
	f, err := mem.OpenFile(older, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(len(data) - 3)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := Open(mem, dir, opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a damaged older file = %v, want ErrCorrupt", err)
	}
	if after, _ := mem.ReadDir(dir); len(after) != len(names) {
		t.Fatalf("files %v after a refused Open, want %v kept", after, names)
	}
}

func TestNamedFileWithoutItsDumpIsRefused(t *testing.T) {
	d, _, file := osStore(t)
	writeFile(t, file, readFile(t, file)[:headerRecordLen+5])
	if _, err := Open(vfs.OS(), d, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	writeFile(t, file, nil)
	if _, err := Open(vfs.OS(), d, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of an empty file = %v, want ErrCorrupt", err)
	}
}
