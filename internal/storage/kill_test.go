package storage

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// killChildEnv, when set, makes the test binary run killChild on the
// directory it names instead of the tests.
const killChildEnv = "MALACHI_STORAGE_KILL_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		killChild(dir)
		os.Exit(2) // killChild only returns on error
	}
	if dir := os.Getenv(cutChildEnv); dir != "" {
		cutChild(dir)
		os.Exit(2) // cutChild only returns on error
	}
	os.Exit(m.Run())
}

// killChild appends to two segments on a real directory until killed,
// with up to 64 appends in flight, and prints "ack <segment> <last
// offset>" for each acknowledged batch. Acks are printed by a separate
// goroutine: callbacks must not block.
func killChild(dir string) {
	s, err := Open(Config{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	next := map[SegmentID]uint64{}
	for _, id := range []SegmentID{1, 2} {
		if err := s.Create(id, 0); err != nil && !errors.Is(err, ErrExists) {
			fmt.Fprintln(os.Stderr, err)
			return
		}
		in, _ := s.Info(id)
		next[id] = in.End
	}
	type ack struct {
		id   SegmentID
		last uint64
	}
	tokens := make(chan struct{}, 64)
	acks := make(chan ack, cap(tokens)) // never full: one slot per token
	go func() {
		w := bufio.NewWriter(os.Stdout)
		for a := range acks {
			fmt.Fprintf(w, "ack %d %d\n", a.id, a.last)
			if len(acks) == 0 {
				_ = w.Flush()
			}
			<-tokens
		}
	}()
	for i := 0; ; i++ {
		id := SegmentID(1 + i%2)
		n := 1 + i%3
		b := span(nilTB{}, next[id], n)
		last := next[id] + uint64(n) - 1
		next[id] = last + 1
		tokens <- struct{}{}
		err := s.AppendAsync(context.Background(), id, b, func(err error) {
			if err != nil {
				fmt.Fprintln(os.Stderr, "append failed:", err)
				os.Exit(3)
			}
			acks <- ack{id, last}
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return
		}
	}
}

// nilTB lets the test helpers encode batches outside a test.
type nilTB struct{ testing.TB }

func (nilTB) Helper()                   {}
func (nilTB) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (nilTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

// A real process killed with SIGKILL in the middle of appending loses
// nothing it acknowledged: after reopening, each segment holds consecutive
// offsets from 0, in order and intact, through at least the last
// acknowledged one. Two rounds, the second continuing on what the first
// left.
func TestSIGKILLKeepsAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	for round := 0; round < 2; round++ {
		acked := runAndKill(t, dir, 300)
		s, err := Open(Config{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		for id, last := range acked {
			buf, _, err := s.Read(id, 0, math.MaxInt, math.MaxUint64)
			if err != nil {
				t.Fatal(err)
			}
			offs := decodeOffsets(t, buf)
			for i, o := range offs {
				if o != uint64(i) {
					t.Fatalf("round %d segment %d: offset %d at position %d", round, id, o, i)
				}
			}
			if uint64(len(offs)) <= last {
				t.Fatalf("round %d segment %d: acknowledged through %d, recovered %d records", round, id, last, len(offs))
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// runAndKill starts the child, waits until it has acknowledged want
// batches, kills it with SIGKILL and returns the last acknowledged offset
// per segment.
func runAndKill(t *testing.T, dir string, want int) map[SegmentID]uint64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[SegmentID]uint64{}
	sc := bufio.NewScanner(out)
	for n := 0; n < want && sc.Scan(); n++ {
		var id SegmentID
		var last uint64
		if _, err := fmt.Sscanf(strings.TrimSpace(sc.Text()), "ack %d %d", &id, &last); err != nil {
			t.Fatalf("child said %q", sc.Text())
		}
		if prev, ok := acked[id]; ok && last <= prev {
			t.Fatalf("segment %d acknowledged %d after %d", id, last, prev)
		}
		acked[id] = last
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v (acked %v)", err, acked)
	}
	if len(acked) < 2 {
		t.Fatalf("child acknowledged too little: %v", acked)
	}
	return acked
}
