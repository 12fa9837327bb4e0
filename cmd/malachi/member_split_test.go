package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/groups"
	"github.com/malachi-log/malachi/pkg/client"
)

// TestSplitDuringHandoffPrintsOnce: member a has fetched a page of the
// topic's only range and is still printing it (its stdout is a pipe
// nobody reads yet, as with `| slow-consumer`), so nothing is committed.
// The range splits, and member b joins. The handoff rule says b must not
// read what a holds until a has fetched again, and a split does not end
// a's hold: it passes to the children. Were b handed a child at once, it
// would read the parent's records of its slice from the group's (empty)
// committed position and print records a prints too.
func TestSplitDuringHandoffPrintsOnce(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	admin := adminClient(t, n)
	c.ok("topic", "create", "t", "--ranges", "1")
	const total = 300
	recs := make([]client.Record, total)
	for i := range recs {
		recs[i] = client.Record{Key: []byte(fmt.Sprintf("k%04d", i)), Value: []byte(strings.Repeat("v", 2048))}
	}
	if _, err := admin.Produce(t.Context(), "t", recs...); err != nil {
		t.Fatal(err)
	}

	// Member a, its stdout a pipe read one line at a time on demand: its
	// first page (~600 KiB) does not fit, so it blocks printing it.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	acmd := exec.Command(c.bin, "consume", "t", "--group", "g", "--member", "a", "--follow", "--print-keys")
	acmd.Env = c.env
	acmd.Stdout = pw
	aerr := newLockedBuffer()
	acmd.Stderr = aerr
	if err := acmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Cleanup(func() { acmd.Process.Kill(); acmd.Wait(); pr.Close() })
	// Unbuffered: the reader holds at most one scanner buffer of a's
	// output until the test takes a line, so a stays blocked.
	alines := make(chan string)
	go func() {
		defer close(alines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			alines <- sc.Text()
		}
	}()
	byA := map[string]bool{}
	// a's first line means it has its page and is printing it; the rest
	// of the page does not fit the pipe, so it has not committed.
	select {
	case l, ok := <-alines:
		if !ok {
			t.Fatalf("member a printed nothing; stderr: %s", aerr.String())
		}
		k, _, _ := strings.Cut(l, "\t")
		byA[k] = true
	case <-time.After(waitFor):
		t.Fatalf("member a printed nothing; stderr: %s", aerr.String())
	}

	d, err := admin.DescribeTopic(t.Context(), "t")
	if err != nil {
		t.Fatal(err)
	}
	children, err := admin.SplitRange(t.Context(), "t", d.Ranges[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	// A name for the second member that the assignment gives a child.
	name := ""
	for i := 0; i < 100 && name == ""; i++ {
		cand := fmt.Sprintf("b%d", i)
		if len(groups.Assign(children, []string{"a", cand})[cand]) > 0 {
			name = cand
		}
	}
	if name == "" {
		t.Fatal("no member name gets a child")
	}
	b := c.start("consume", "t", "--group", "g", "--member", name, "--follow", "--print-keys")
	// Once b is listed it has polled under the split: from here on,
	// printing a's page lets a commit and fetch again, which is what
	// hands b its child.
	waitMember(t, c, "t", "g", name)

	byB := map[string]bool{}
	deadline := time.After(waitFor)
	for !covered(byA, byB, total) {
		select {
		case l := <-alines:
			k, _, _ := strings.Cut(l, "\t")
			byA[k] = true
		case l := <-b.lines:
			k, _, _ := strings.Cut(l, "\t")
			byB[k] = true
		case <-deadline:
			t.Fatalf("a printed %d, b printed %d of %d; stderr: %s %s", len(byA), len(byB), total, aerr.String(), b.stderr.String())
		}
	}
	var both []string
	for k := range byB {
		if byA[k] {
			both = append(both, k)
		}
	}
	slices.Sort(both)
	if len(both) > 0 {
		t.Fatalf("%d records printed by both a and %s after a split during a handoff, e.g. %v", len(both), name, both[:min(5, len(both))])
	}
}

// TestIdleMemberSaysWhy: a member without --follow that prints nothing
// while another member is live says on stderr why (drained, or still held
// by the other member) and how to wait (--follow), and exits 0; a lone
// member on a drained topic says nothing.
func TestIdleMemberSaysWhy(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	c.ok("topic", "create", "t", "--ranges", "1")
	c.okIn("x\ny\n", "produce", "t")
	a := c.start("consume", "t", "--group", "g", "--member", "a", "--follow")
	deadline := time.After(waitFor)
	for got := 0; got < 2; got++ {
		select {
		case <-a.lines:
		case <-deadline:
			t.Fatalf("member a printed %d of 2; stderr: %s", got, a.stderr.String())
		}
	}
	r := c.run(strings.NewReader(""), "consume", "t", "--group", "g", "--member", "b")
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("member b: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"member b read nothing", "another member (a)", "--follow"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("member b's stderr lacks %q: %q", want, r.stderr)
		}
	}

	c.ok("topic", "create", "u")
	r = c.run(strings.NewReader(""), "consume", "u", "--group", "g", "--member", "solo")
	if r.code != 0 || r.stdout != "" || strings.Contains(r.stderr, "read nothing") {
		t.Errorf("lone member on an empty topic: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// covered reports whether a or b printed each of the keys k0000 up to
// total.
func covered(a, b map[string]bool, total int) bool {
	for i := range total {
		k := fmt.Sprintf("k%04d", i)
		if !a[k] && !b[k] {
			return false
		}
	}
	return true
}

// waitMember waits until describe lists member in group on topic, with
// or without ranges.
func waitMember(t *testing.T, c *cli, topic, group, member string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var d groupJSON
		r := c.run(strings.NewReader(""), "group", "describe", topic, group, "-o", "json")
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &d) == nil {
			for _, m := range d.Members {
				if m.Name == member {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("member %s never joined: %s %s", member, r.stdout, r.stderr)
		}
		<-tick.C
	}
}
