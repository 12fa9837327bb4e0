package storage

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// cutChildEnv, when set, makes the test binary run cutChild on the
// directory it names instead of the tests; cutSegmentEnv names the
// segment and cutNoJournalEnv turns the journal off.
const (
	cutChildEnv     = "MALACHI_STORAGE_CUT_CHILD"
	cutSegmentEnv   = "MALACHI_STORAGE_CUT_SEGMENT"
	cutNoJournalEnv = "MALACHI_STORAGE_CUT_NO_JOURNAL"
	cutActions      = 20000
)

// cutAction is the i-th step of the cut child's fixed script, applied to
// a copy holding bs: every seventh step cuts the last two batches, the
// others append one batch at the end, tagged with the step.
func cutAction(i int, bs [][]byte) (next [][]byte, batch []byte) {
	if i%7 == 6 && len(bs) >= 2 {
		return bs[:len(bs)-2], nil
	}
	b := tagged(nilTB{}, endOf(nilTB{}, 0, bs), 1+i%3, fmt.Sprintf("a%d", i))
	return append(bs[:len(bs):len(bs)], b), b
}

// cutChild runs the script on a real directory, each step waiting for
// its append to be acknowledged or its cut to return, and prints "done i"
// after step i, until killed.
func cutChild(dir string) {
	id, err := strconv.ParseUint(os.Getenv(cutSegmentEnv), 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	s, err := Open(Config{Dir: dir, NoJournal: os.Getenv(cutNoJournalEnv) != ""})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	if err := s.Create(SegmentID(id), 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	ctx := context.Background()
	w := bufio.NewWriter(os.Stdout)
	var bs [][]byte
	for i := range cutActions {
		next, b := cutAction(i, bs)
		if b != nil {
			err = s.AppendAt(ctx, SegmentID(id), b)
		} else {
			err = s.Truncate(ctx, SegmentID(id), endOf(nilTB{}, 0, next))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return
		}
		bs = next
		fmt.Fprintf(w, "done %d\n", i)
		_ = w.Flush()
	}
	select {} // wait to be killed
}

// A real process killed with SIGKILL while it appends to a copy and cuts
// it leaves the copy exactly as some step of its script at or after the
// last one it reported left it: nothing acknowledged lost, no cut batch
// back, nothing torn. Each round uses a new segment in the same
// directory, and the earlier rounds' copies must stay as they were.
func TestSIGKILLDuringCuts(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	bothModes(t, func(t *testing.T, noJournal bool) {
		dir := t.TempDir()
		kept := map[SegmentID][][]byte{}
		for round := range 2 {
			id := SegmentID(round + 1)
			last := runCutChild(t, dir, id, noJournal, 150)
			s, err := Open(Config{Dir: dir, NoJournal: noJournal})
			if err != nil {
				t.Fatal(err)
			}
			got := batchesOf(t, s, id)
			if !reachedAfter(got, last) {
				t.Fatalf("round %d: %d batches match no step of the script from step %d on", round, len(got), last)
			}
			if !noJournal && s.Stats().ReplayedBatches == 0 {
				t.Fatalf("round %d: nothing was replayed from the journal", round)
			}
			kept[id] = got
			for prev, want := range kept {
				if in, _ := s.Info(prev); in.Damage != nil || !sameBatches(batchesOf(t, s, prev), want) {
					t.Fatalf("round %d: segment %d changed since its round (%+v)", round, prev, in)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// reachedAfter reports whether got is what the script leaves after some
// step at or after last.
func reachedAfter(got [][]byte, last int) bool {
	var bs [][]byte
	for i := range cutActions {
		bs, _ = cutAction(i, bs)
		if i >= last && sameBatches(got, bs) {
			return true
		}
	}
	return false
}

// runCutChild starts the cut child on segment id, waits until it has
// reported want steps, kills it with SIGKILL and returns the last step it
// reported.
func runCutChild(t *testing.T, dir string, id SegmentID, noJournal bool, want int) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cutChildEnv+"="+dir, fmt.Sprintf("%s=%d", cutSegmentEnv, id))
	if noJournal {
		cmd.Env = append(cmd.Env, cutNoJournalEnv+"=1")
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	last := -1
	sc := bufio.NewScanner(out)
	for last+1 < want && sc.Scan() {
		n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "done "))
		if err != nil || n != last+1 {
			t.Fatalf("child said %q after step %d", sc.Text(), last)
		}
		last = n
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v (last step %d)", err, last)
	}
	if last+1 < want {
		t.Fatalf("child reported only %d steps", last+1)
	}
	return last
}

// Truncate and an exact seal that cuts, on a real directory: what they
// leave is what a reopened store reads, and the sealed copy verifies.
func TestCutOnDisk(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		ctx := context.Background()
		cfg := Config{Dir: t.TempDir(), NoJournal: noJournal}
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		bs := chain(t, 0, 6, 4, "d")
		for _, id := range []SegmentID{1, 2} {
			if err := s.Create(id, 0); err != nil {
				t.Fatal(err)
			}
			appendAll(t, s, id, bs)
		}
		if err := s.Truncate(ctx, 1, 12); err != nil {
			t.Fatal(err)
		}
		appendAll(t, s, 1, chain(t, 12, 2, 1, "again"))
		if _, err := s.SealWith(ctx, 2, SealOptions{Exact: true, End: 16, TruncateAbove: true}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		want1 := append(append([][]byte{}, bs[:3]...), chain(t, 12, 2, 1, "again")...)
		if got := batchesOf(t, r, 1); !sameBatches(got, want1) {
			t.Fatalf("segment 1 after reopening: %d batches", len(got))
		}
		if got := batchesOf(t, r, 2); !sameBatches(got, bs[:4]) {
			t.Fatalf("segment 2 after reopening: %d batches", len(got))
		}
		if err := r.Verify(2); err != nil {
			t.Fatal(err)
		}
	})
}
