package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// TestConsumeGroupMembersShare: two `consume --group G --member` processes
// on a 4-range topic print every record once between them; after one stops
// (Ctrl-C while records keep coming), the other takes its ranges and goes
// on from the group's committed position, with nothing printed twice.
func TestConsumeGroupMembersShare(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	admin := adminClient(t, n)
	c.ok("topic", "create", "t", "--ranges", "4")
	c.fails(2, "consume", "t", "--member", "a")
	c.fails(2, "consume", "t", "--group", "g", "--member", "a", "--from", "end")
	args := []string{"consume", "t", "--group", "g", "--follow", "--print-keys", "--member"}
	a := c.start(append(args, "a")...)
	waitMembers(t, c, "a")
	b := c.start(append(args, "b")...)
	waitMembers(t, c, "a", "b")

	seen := map[string]string{} // key -> the member that printed it
	next := 0
	produce := func(count int) {
		t.Helper()
		recs := make([]client.Record, count)
		for i := range recs {
			k := fmt.Sprintf("k%04d", next)
			recs[i] = client.Record{Key: []byte(k), Value: []byte("v")}
			next++
		}
		if _, err := admin.Produce(t.Context(), "t", recs...); err != nil {
			t.Fatal(err)
		}
	}
	// A member's poll that began before the other joined still reads every
	// range, so the share shows only once each has fetched again: produce
	// in rounds until both have printed something.
	deadline := time.Now().Add(waitFor)
	for countBy(seen, "a") == 0 || countBy(seen, "b") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the members never shared the work: %v", seen)
		}
		produce(40)
		collect(t, seen, next, a, b)
	}

	// Stop a while records are still arriving in its ranges.
	produce(200)
	code, rest := a.interrupt()
	if code != 0 || strings.Contains(a.stderr.String(), "could not leave") {
		t.Fatalf("member a exited %d; stderr: %s", code, a.stderr.String())
	}
	record(t, seen, "a", rest)
	produce(200)
	collect(t, seen, next, nil, b)
	if len(seen) != next {
		t.Fatalf("%d records printed, %d produced", len(seen), next)
	}
	var d groupJSON
	if err := json.Unmarshal([]byte(c.ok("group", "describe", "t", "g", "-o", "json")), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Members) != 1 || d.Members[0].Name != "b" || len(d.Members[0].Ranges) != 4 || d.Lag != 0 {
		t.Errorf("after a stopped: %+v", d)
	}
}

// waitMembers waits until describe lists exactly these members, each with
// a range.
func waitMembers(t *testing.T, c *cli, names ...string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var d groupJSON
		r := c.run(strings.NewReader(""), "group", "describe", "t", "g", "-o", "json")
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &d) == nil && len(d.Members) == len(names) {
			ok := true
			for i, m := range d.Members {
				ok = ok && m.Name == names[i] && len(m.Ranges) > 0
			}
			if ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("members never became %v: %s %s", names, r.stdout, r.stderr)
		}
		<-tick.C
	}
}

// collect reads the output of members a and b (nil: stopped) until want
// records are printed in all, failing on a record printed twice.
func collect(t *testing.T, seen map[string]string, want int, a, b *child) {
	t.Helper()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	var la, lb <-chan string
	if a != nil {
		la = a.lines
	}
	if b != nil {
		lb = b.lines
	}
	for len(seen) < want {
		var (
			l      string
			ok     bool
			member *child
			name   string
		)
		select {
		case l, ok = <-la:
			member, name = a, "a"
		case l, ok = <-lb:
			member, name = b, "b"
		case <-deadline.C:
			var missing []string
			for i := range want {
				if k := fmt.Sprintf("k%04d", i); seen[k] == "" {
					missing = append(missing, k)
				}
			}
			t.Fatalf("%d of %d records printed; a: %d, b: %d; missing %v; stderr: %s", len(seen), want, countBy(seen, "a"), countBy(seen, "b"), missing, stderrs(a, b))
		}
		if !ok {
			t.Fatalf("member %s stopped; stderr: %s", name, member.stderr.String())
		}
		record(t, seen, name, []string{l})
	}
}

func record(t *testing.T, seen map[string]string, member string, out []string) {
	t.Helper()
	for _, l := range out {
		k, _, _ := strings.Cut(l, "\t")
		if prev, dup := seen[k]; dup {
			t.Fatalf("record %s printed by %s and again by %s", k, prev, member)
		}
		seen[k] = member
	}
}

func countBy(seen map[string]string, member string) int {
	n := 0
	for _, m := range seen {
		if m == member {
			n++
		}
	}
	return n
}

// stderrs is what the running members printed on stderr.
func stderrs(members ...*child) string {
	var b strings.Builder
	for _, m := range members {
		if m != nil {
			b.WriteString(m.stderr.String())
		}
	}
	return b.String()
}
