package metastore

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// writtenLog applies the script and returns the log bytes and the end of
// each record: ends[k] is the size after k records.
func writtenLog(t *testing.T) (data []byte, ends []int) {
	t.Helper()
	dir := t.TempDir()
	s := mustOpen(t, vfs.OS(), dir, Options{})
	ends = []int{0}
	for _, c := range script() {
		mustApply(t, s, c)
		rec, err := encodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, ends[len(ends)-1]+len(rec))
	}
	mustClose(t, s)
	data = readAll(t, logPath(dir, 0))
	if len(data) != ends[len(ends)-1] {
		t.Fatalf("log has %d bytes, records %d", len(data), ends[len(ends)-1])
	}
	return data, ends
}

// TestTornTailEveryCut simulates a crash that keeps any prefix of the log:
// every cut recovers exactly the records that are whole, truncates the
// rest, and accepts new commands after it.
func TestTornTailEveryCut(t *testing.T) {
	data, ends := writtenLog(t)
	want := states(t, script())
	root := t.TempDir()
	k := 0
	for cut := 0; cut <= len(data); cut++ {
		for k+1 < len(ends) && ends[k+1] <= cut {
			k++
		}
		dir := filepath.Join(root, itoa(cut))
		if err := vfs.OS().MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeAll(t, logPath(dir, 0), data[:cut])
		s, err := Open(vfs.OS(), dir, Options{})
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		wantState(t, s, want[k])
		if cut%37 == 0 || cut == len(data) {
			checkAppendAfterCut(t, s, dir, ends[k]) // closes s
			continue
		}
		mustClose(t, s)
	}
}

// checkAppendAfterCut: the torn bytes are gone and a new command lands
// right after the last whole record and survives a reopen. It closes s.
func checkAppendAfterCut(t *testing.T, s *Store, dir string, valid int) {
	t.Helper()
	if got := len(readAll(t, logPath(dir, 0))); got != valid {
		t.Fatalf("log is %d bytes after recovery, want %d", got, valid)
	}
	mustApply(t, s, topicCmd(1000))
	before := viewBytes(t, s)
	mustClose(t, s)
	reopened := mustOpen(t, vfs.OS(), dir, Options{})
	wantState(t, reopened, before)
	mustClose(t, reopened)
}

func itoa(n int) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

// TestFlippedByteIsCorruption: damage to any record but the last is
// followed by valid records, so Open refuses instead of truncating
// acknowledged commands. Damage inside the last record cannot be told from a
// torn write; it is cut and the others survive.
func TestFlippedByteIsCorruption(t *testing.T) {
	data, ends := writtenLog(t)
	want := states(t, script())
	last := ends[len(ends)-2]
	root := t.TempDir()
	for pos := range data {
		dir := filepath.Join(root, itoa(pos))
		if err := vfs.OS().MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		damaged := append([]byte(nil), data...)
		damaged[pos] ^= 0xff
		writeAll(t, logPath(dir, 0), damaged)
		s, err := Open(vfs.OS(), dir, Options{})
		if pos < last {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("byte %d flipped: Open = %v, want ErrCorrupt", pos, err)
			}
			if got := readAll(t, logPath(dir, 0)); string(got) != string(damaged) {
				t.Fatalf("byte %d flipped: Open modified a corrupt log", pos)
			}
			continue
		}
		if err != nil {
			t.Fatalf("byte %d flipped in the last record: %v", pos, err)
		}
		wantState(t, s, want[len(ends)-2])
		mustClose(t, s)
	}
}

// TestZeroTail: a crash can leave the file longer than what was written,
// filled with zeros; that is a torn tail, not a record.
func TestZeroTail(t *testing.T) {
	data, ends := writtenLog(t)
	want := states(t, script())
	dir := t.TempDir()
	writeAll(t, logPath(dir, 0), append(append([]byte(nil), data...), make([]byte, 4096)...))
	s := mustOpen(t, vfs.OS(), dir, Options{})
	defer mustClose(t, s)
	wantState(t, s, want[len(ends)-1])
}
