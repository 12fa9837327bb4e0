package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// consumedJSON runs consume --format json with args and returns its
// records.
func consumedJSON(t *testing.T, c *cli, args ...string) []jsonRecord {
	t.Helper()
	out := c.ok(append([]string{"consume"}, args...)...)
	var recs []jsonRecord
	for _, l := range lines(out) {
		var j jsonRecord
		if err := json.Unmarshal([]byte(l), &j); err != nil {
			t.Fatalf("consume %v: line %q: %v", args, l, err)
		}
		recs = append(recs, j)
	}
	return recs
}

// TestWireVersionsRoundTrip: records produced with --wire v1 and --wire
// v2 (plain and compressed) read back alike with either version; only v2
// reads say which range each record came from.
func TestWireVersionsRoundTrip(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	c.ok("topic", "create", "w", "--ranges", "2")

	var want []string
	batch := func(tag string) string {
		var b strings.Builder
		for i := range 20 {
			v := fmt.Sprintf("%s-%02d", tag, i)
			fmt.Fprintf(&b, "k%d\t%s\n", i%5, v)
			want = append(want, v)
		}
		return b.String()
	}
	c.okIn(batch("v1"), "--wire", "v1", "produce", "w", "--kv")
	c.okIn(batch("v2"), "--wire", "v2", "produce", "w", "--kv")
	c.okIn(batch("v2-default"), "produce", "w", "--kv")
	c.okIn(batch("zstd"), "produce", "w", "--kv", "--compression", "zstd")
	c.okIn(batch("s2"), "--wire", "v2", "produce", "w", "--kv", "--compression", "s2")
	c.okIn(batch("none"), "--wire", "v1", "produce", "w", "--kv", "--compression", "none")
	slices.Sort(want)

	for _, wire := range []string{"v1", "v2"} {
		recs := consumedJSON(t, c, "--wire", wire, "w", "--format", "json")
		var got []string
		perKey := map[string][]string{}
		for _, r := range recs {
			got = append(got, r.Value)
			if r.Key == nil {
				t.Fatalf("--wire %s: record %q lost its key", wire, r.Value)
			}
			perKey[*r.Key] = append(perKey[*r.Key], r.Value)
			switch {
			case wire == "v1" && r.Range != 0:
				t.Errorf("--wire v1: record %q has range %d; v1 does not tell", r.Value, r.Range)
			case wire == "v2" && r.Range == 0:
				t.Errorf("--wire v2: record %q has no range", r.Value)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("--wire %s read %d records, want %d:\n got %q\nwant %q", wire, len(got), len(want), got, want)
		}
		// Each key's records in the order produced: the tags in the order
		// of the produce commands, then the index.
		order := []string{"v1", "v2", "v2-default", "zstd", "s2", "none"}
		for k, vs := range perKey {
			if !slices.IsSortedFunc(vs, func(a, b string) int {
				ta, tb := a[:strings.LastIndex(a, "-")], b[:strings.LastIndex(b, "-")]
				if ta != tb {
					return slices.Index(order, ta) - slices.Index(order, tb)
				}
				return strings.Compare(a, b)
			}) {
				t.Errorf("--wire %s: key %s out of order: %q", wire, k, vs)
			}
		}
	}

	// --max reads record by record, exactly, whatever the version.
	if recs := consumedJSON(t, c, "w", "--format", "json", "--max", "7"); len(recs) != 7 {
		t.Errorf("--max 7 read %d records", len(recs))
	}
	// The lines consume prints go back through produce on either version.
	dump := c.ok("--wire", "v2", "consume", "w", "--format", "json")
	c.ok("topic", "create", "w-copy")
	c.okIn(dump, "--wire", "v1", "produce", "w-copy", "--format", "json")
	if n := len(consumedJSON(t, c, "w-copy", "--format", "json")); n != len(want) {
		t.Errorf("copy holds %d records, want %d", n, len(want))
	}
}

// TestWireFlagIsStrict: --wire takes v1 or v2 and nothing else, for every
// command, as a usage error; --compression likewise, and needs v2.
func TestWireFlagIsStrict(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	c.ok("topic", "create", "s")
	for _, bad := range []string{"v3", "2", "V2", "v0", "", "v1 "} {
		for _, args := range [][]string{
			{"--wire", bad, "topic", "list"},
			{"consume", "s", "--wire=" + bad},
			{"bench", "produce", "--records", "1", "--wire", bad},
		} {
			errOut := c.fails(2, args...)
			if !strings.Contains(errOut, "v1 or v2") {
				t.Errorf("%q: stderr %q does not say what --wire takes", args, errOut)
			}
		}
	}
	for _, args := range [][]string{
		{"produce", "s", "--compression", "gzip"},
		{"produce", "s", "--compression", "ZSTD"},
		{"--wire", "v1", "produce", "s", "--compression", "zstd"},
		{"bench", "produce", "--topic", "s", "--records", "10", "--compression", "lz4"},
		{"--wire", "v1", "bench", "produce", "--topic", "s", "--records", "10", "--compression", "s2"},
		{"bench", "produce", "--topic", "s", "--records", "10", "--sync", "--compression", "zstd"},
	} {
		if errOut := c.fails(2, args...); !strings.Contains(errOut, "compression") {
			t.Errorf("%q: stderr %q does not name compression", args, errOut)
		}
	}
	if out := c.ok("consume", "s", "--format", "json"); out != "" {
		t.Errorf("refused produces wrote records: %q", out)
	}
	help := c.ok("--help")
	if !strings.Contains(help, "--wire") || !strings.Contains(help, "v1|v2") {
		t.Errorf("malachi --help does not show --wire v1|v2:\n%s", help)
	}
	if help := c.ok("produce", "--help"); !strings.Contains(help, "--compression") {
		t.Errorf("produce --help lacks --compression:\n%s", help)
	}
}
