package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/pkg/client"
)

// TestConsumeLastPerRange: --last N prints the last N records of each
// range, keys in order, and refuses a second start position.
func TestConsumeLastPerRange(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	admin := adminClient(t, n)
	c.ok("topic", "create", "t", "--ranges", "4")
	d := describe(t, c, "t")
	rangeOf := func(key string) uint64 {
		pos := keyspace.Position([]byte(key), d.KeyspaceBits)
		for _, r := range d.Ranges {
			if r.Active && pos >= r.Start && pos < r.End {
				return r.ID
			}
		}
		t.Fatalf("no range holds key %s (position %d)", key, pos)
		return 0
	}
	// Rounds over all keys, one record at a time, so that each range's
	// history interleaves its keys in a known order.
	var keys []string
	for i := range 16 {
		keys = append(keys, fmt.Sprintf("k%02d", i))
	}
	byRange := map[uint64][]string{}
	total := 0
	for round := range 3 {
		for _, k := range keys {
			v := fmt.Sprintf("%s/%d", k, round)
			if _, err := admin.Produce(t.Context(), "t", client.Record{Key: []byte(k), Value: []byte(v)}); err != nil {
				t.Fatal(err)
			}
			byRange[rangeOf(k)] = append(byRange[rangeOf(k)], v)
			total++
		}
	}
	if len(byRange) != 4 {
		t.Fatalf("the keys fill %d of 4 ranges", len(byRange))
	}
	var want []string
	for id, vs := range byRange {
		if len(vs) < 2 {
			t.Fatalf("range %d holds %d records, want at least 2", id, len(vs))
		}
		want = append(want, vs[len(vs)-2:]...)
	}

	got := lines(c.ok("consume", "t", "--last", "2"))
	if len(got) != 8 {
		t.Fatalf("--last 2 printed %d records %q, want 8", len(got), got)
	}
	if !sameMultiset(got, want) {
		t.Errorf("--last 2 printed %q, want the last 2 of each range %q", got, want)
	}
	// Each key's records come in the order they were produced.
	last := map[string]string{}
	for _, v := range got {
		k, round, _ := strings.Cut(v, "/")
		if prev, ok := last[k]; ok && prev >= round {
			t.Errorf("key %s: round %s printed after round %s: %q", k, round, prev, got)
		}
		last[k] = round
	}
	// A range holding fewer than N gives all it has.
	if got := lines(c.ok("consume", "t", "--last", "1000")); len(got) != total {
		t.Errorf("--last 1000 printed %d records, want all %d", len(got), total)
	}
	if help := c.ok("consume", "--help"); !strings.Contains(help, "--last") || !strings.Contains(help, "per range") {
		t.Errorf("consume --help does not say --last counts per range:\n%s", help)
	}
	for _, other := range [][]string{{"--from", "start"}, {"--from", "-1h"}, {"--cursor", "x"}, {"--group", "g"}} {
		args := append([]string{"consume", "t", "--last", "2"}, other...)
		if errOut := c.fails(2, args...); !strings.Contains(errOut, "--last") {
			t.Errorf("%s: %q", strings.Join(args, " "), errOut)
		}
	}
	c.fails(1, "consume", "nope", "--last", "2")
}

// TestDescribeWatch: --watch redraws topic and group describe until
// SIGINT, which is a normal end; without a terminal the snapshots are
// separated by a blank line.
func TestDescribeWatch(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("topic", "create", "t")
	produceDirect(t, adminClient(t, n), "t", "k", "a", "b")
	c.ok("consume", "t", "--group", "g", "--commit", "--max", "1")
	for _, tc := range []struct {
		args   []string
		marker string // the first line of every snapshot
	}{
		{[]string{"topic", "describe", "t"}, "Topic "},
		{[]string{"group", "describe", "t", "g"}, "Group "},
	} {
		name := strings.Join(tc.args[:2], " ")
		ch := c.start(append(tc.args, "--watch", "100ms")...)
		got := waitSnapshots(t, ch, tc.marker, 2)
		if rc, _ := ch.interrupt(); rc != 0 {
			t.Errorf("%s --watch: exit %d after SIGINT; stderr: %s", name, rc, ch.stderr.String())
		}
		if !strings.HasPrefix(got[0], tc.marker) {
			t.Errorf("%s --watch: first line %q", name, got[0])
		}
		if l := got[len(got)-2]; l != "" {
			t.Errorf("%s --watch: %q before the second snapshot, want a blank line", name, l)
		}
	}
	c.fails(1, "topic", "describe", "nope", "--watch", "100ms")
	c.fails(2, "topic", "describe", "t", "--watch", "0s")
	c.fails(2, "group", "describe", "t", "g", "--watch=soon")
}

// waitSnapshots reads ch's stdout until n lines start with marker and
// returns the lines read, the last one the n-th marker.
func waitSnapshots(t *testing.T, ch *child, marker string, n int) []string {
	t.Helper()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	var got []string
	for seen := 0; seen < n; {
		select {
		case l, ok := <-ch.lines:
			if !ok {
				t.Fatalf("stdout ended after %d snapshots: %q; stderr: %s", seen, got, ch.stderr.String())
			}
			got = append(got, l)
			if strings.HasPrefix(l, marker) {
				seen++
			}
		case <-deadline.C:
			t.Fatalf("no %d snapshots within %s: %q; stderr: %s", n, waitFor, got, ch.stderr.String())
		}
	}
	return got
}

// TestWatchIntervalArgs: only a duration right after --watch is its
// interval, and nothing after "--" is touched.
func TestWatchIntervalArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"topic describe t --watch 100ms", "topic describe t --watch=100ms"},
		{"topic describe --watch 1m t", "topic describe --watch=1m t"},
		{"topic describe --watch t", "topic describe --watch t"},
		{"topic describe t --watch", "topic describe t --watch"},
		{"topic describe t --watch 0s", "topic describe t --watch=0s"},
		{"consume t -- --watch 1s", "consume t -- --watch 1s"},
	} {
		if got := strings.Join(watchIntervalArgs(strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.in, got, tc.want)
		}
	}
}
