package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/pkg/client"
)

// roundTripInput is n lines that exercise what a line may hold: tabs,
// carriage returns, UTF-8, bytes that are not UTF-8, empty lines.
func roundTripInput(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		switch i % 5 {
		case 0:
			fmt.Fprintf(&b, "line %06d\twith a tab\n", i)
		case 1:
			fmt.Fprintf(&b, "line %06d ends in CR\r\n", i)
		case 2:
			fmt.Fprintf(&b, "ligne %06d été ✓\n", i)
		case 3:
			fmt.Fprintf(&b, "bytes %06d \xff\xfe\n", i)
		default:
			b.WriteString("\n")
		}
	}
	return b.Bytes()
}

func TestProduceConsumeRoundTrip100k(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	c.ok("topic", "create", "lines")
	in := roundTripInput(100_000)
	r := c.run(bytes.NewReader(in), "produce", "lines")
	if r.code != 0 || r.stderr != "produced 100000 records to lines\n" {
		t.Fatalf("produce: exit %d, stderr %q", r.code, r.stderr)
	}
	out := c.ok("consume", "lines", "--from", "start")
	if sha256.Sum256([]byte(out)) != sha256.Sum256(in) {
		t.Fatalf("consume returned %d bytes that differ from the %d produced", len(out), len(in))
	}
}

func TestProduceLargeLines(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	c.ok("topic", "create", "big")
	big := strings.Repeat("x", 1<<20)
	bigger := strings.Repeat("y", 3<<20)
	in := "small\n" + big + "\n" + bigger + "\nlast\n"
	// --file reads the same way as stdin.
	path := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(path, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	c.ok("produce", "big", "--file", path)
	if out := c.ok("consume", "big"); out != in {
		t.Fatalf("consume returned %d bytes, want %d", len(out), len(in))
	}
}

func TestProduceKeysAndHeaders(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("topic", "create", "k", "--ranges", "4")
	c.okIn("a\tone\nb\ttwo\n", "produce", "k", "--kv")
	c.okIn(`{"user":{"id":"c"},"n":1}`+"\n"+`{"user":{"id":42},"n":2}`+"\n", "produce", "k", "--key-from", ".user.id")
	c.okIn("three\n", "produce", "k", "--key", "d", "--header", "source=cli", "--header", "v=2")

	got := map[string][]string{}
	for _, l := range lines(c.ok("consume", "k", "--format", "json")) {
		var rec jsonRecord
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		got[*rec.Key] = append(got[*rec.Key], rec.Value)
		if *rec.Key == "d" && (len(rec.Headers) != 2 || rec.Headers[0].Key != "source" || *rec.Headers[1].Value != "2") {
			t.Errorf("headers of d: %+v", rec.Headers)
		}
	}
	want := map[string][]string{
		"a": {"one"}, "b": {"two"}, "c": {`{"user":{"id":"c"},"n":1}`},
		"42": {`{"user":{"id":42},"n":2}`}, "d": {"three"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records by key: %v, want %v", got, want)
	}

	// Keys route to ranges: the same key always lands in one range.
	d, err := adminClient(t, n).DescribeTopic(t.Context(), "k")
	if err != nil || len(d.Ranges) != 4 {
		t.Fatalf("describe: %v %+v", err, d)
	}
}

func TestProduceBadInput(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	c.ok("topic", "create", "bad")
	r := c.run(strings.NewReader("ok\tfine\nno tab here\n"), "produce", "bad", "--kv")
	if r.code != 1 || !strings.Contains(r.stderr, "line 2: no TAB") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	r = c.run(strings.NewReader(`{"id":"x"}`+"\n"+`{"other":1}`+"\n"), "produce", "bad", "--key-from", ".id")
	if r.code != 1 || !strings.Contains(r.stderr, "line 2: no key at .id") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	// The good lines before the bad one are produced, and said so.
	if !strings.Contains(r.stderr, "(read 2 lines, sent 1, skipped 0; 1 of 1 records produced)") {
		t.Fatalf("stderr %q", r.stderr)
	}
}

func TestProduceJSONOutput(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	c.ok("topic", "create", "j")
	var doc struct {
		Topic   string `json:"topic"`
		Records int    `json:"records"`
	}
	out := c.okIn("1\n2\n3\n", "produce", "j", "-o", "json")
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.Topic != "j" || doc.Records != 3 {
		t.Fatalf("%q: %v %+v", out, err, doc)
	}
}

func TestConsumeFormats(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("topic", "create", "f")
	ac := adminClient(t, n)
	_, err := ac.Produce(t.Context(), "f",
		client.Record{Key: []byte("k1"), Value: []byte("v1"), Headers: []client.Header{{Key: "h", Value: []byte("x")}}},
		client.Record{Value: []byte{0xff, 0x00}})
	if err != nil {
		t.Fatal(err)
	}
	out := c.ok("consume", "f", "--format", `{{.Key}}\t{{.Value}}\t{{.Headers.h}}`)
	if out != "k1\tv1\tx\n\t\xff\x00\t\n" {
		t.Fatalf("template output %q", out)
	}
	got := lines(c.ok("consume", "f", "-o", "json"))
	if len(got) != 2 {
		t.Fatalf("json lines: %q", got)
	}
	var second map[string]any
	if err := json.Unmarshal([]byte(got[1]), &second); err != nil {
		t.Fatal(err)
	}
	if second["key"] != nil || second["value"] != "/wA=" || second["value_base64"] != true || second["timestamp"] == "" {
		t.Fatalf("second record %v", second)
	}
	if r := c.run(nil, "consume", "f", "--format", "{{.Nope"); r.code != 2 {
		t.Fatalf("bad template: exit %d, %q", r.code, r.stderr)
	}
}

func TestConsumeMaxCursorAndEnd(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("topic", "create", "m")
	ac := adminClient(t, n)
	produceDirect(t, ac, "m", "k", "1", "2", "3", "4", "5")

	r := c.run(nil, "consume", "m", "--max", "2", "--print-cursor")
	if r.code != 0 || r.stdout != "1\n2\n" {
		t.Fatalf("--max 2: exit %d, %q", r.code, r.stdout)
	}
	cur := cursorIn(t, r.stderr)
	if out := c.ok("consume", "m", "--cursor", cur); out != "3\n4\n5\n" {
		t.Fatalf("--cursor: %q", out)
	}

	// --from end skips what is there: nothing now, the new record later.
	r = c.run(nil, "consume", "m", "--from", "end", "--print-cursor")
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("--from end: exit %d, %q", r.code, r.stdout)
	}
	end := cursorIn(t, r.stderr)
	produceDirect(t, ac, "m", "k", "6")
	if out := c.ok("consume", "m", "--cursor", end); out != "6\n" {
		t.Fatalf("after the end: %q", out)
	}
}

func TestConsumeGroupCommit(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("topic", "create", "g", "--ranges", "2")
	ac := adminClient(t, n)
	produceDirect(t, ac, "g", "a", "1", "2", "3")

	// Without --commit a group reads but keeps its position.
	if out := c.ok("consume", "g", "--group", "billing"); out != "1\n2\n3\n" {
		t.Fatalf("uncommitted read: %q", out)
	}
	if out := c.ok("consume", "g", "--group", "billing", "--commit"); out != "1\n2\n3\n" {
		t.Fatalf("first commit read: %q", out)
	}
	if out := c.ok("consume", "g", "--group", "billing", "--commit"); out != "" {
		t.Fatalf("after commit: %q", out)
	}
	produceDirect(t, ac, "g", "a", "4")

	var g groupJSON
	if err := json.Unmarshal([]byte(c.ok("group", "describe", "g", "billing", "-o", "json")), &g); err != nil {
		t.Fatal(err)
	}
	if g.Topic != "g" || g.Group != "billing" || g.Lag != 1 || g.Cursor == "" || len(g.Ranges) != 2 {
		t.Fatalf("group describe: %+v", g)
	}
	text := c.ok("group", "describe", "g", "billing")
	if !strings.Contains(text, "Lag        1 record\n") {
		t.Fatalf("group describe text:\n%s", text)
	}
	if out := c.ok("consume", "g", "--group", "billing", "--commit"); out != "4\n" {
		t.Fatalf("resume: %q", out)
	}

	var list []groupJSON
	if err := json.Unmarshal([]byte(c.ok("group", "list", "g", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Group != "billing" || list[0].Lag != 0 {
		t.Fatalf("group list: %+v", list)
	}
	if out := c.ok("group", "list", "g"); !strings.Contains(out, "billing") {
		t.Fatalf("group list text: %q", out)
	}
}

// TestFollowAndInterrupt follows a topic, sees records produced after it
// started, stops on SIGINT with exit 0 and a cursor, and that cursor then
// yields exactly the records produced after.
func TestFollowAndInterrupt(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("topic", "create", "live", "--ranges", "2")
	ac := adminClient(t, n)
	produceDirect(t, ac, "live", "k", "before")

	f := c.start("consume", "live", "--follow")
	f.expect("before")
	produceDirect(t, ac, "live", "k", "during-1", "during-2")
	f.expect("during-1", "during-2")

	code, rest := f.interrupt()
	if code != 0 || len(rest) != 0 {
		t.Fatalf("after SIGINT: exit %d, more output %q; stderr %q", code, rest, f.stderr.String())
	}
	cur := cursorIn(t, f.stderr.String())

	produceDirect(t, ac, "live", "k", "after-1", "after-2")
	if out := c.ok("consume", "live", "--cursor", cur); out != "after-1\nafter-2\n" {
		t.Fatalf("resumed from the cursor: %q", out)
	}
}

// TestFollowGroupCommits checks that a follower with --commit leaves the
// group at what it printed when interrupted.
func TestFollowGroupCommits(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("topic", "create", "fg")
	ac := adminClient(t, n)
	f := c.start("consume", "fg", "--follow", "--group", "g1", "--commit")
	produceDirect(t, ac, "fg", "k", "x", "y")
	f.expect("x", "y")
	if code, _ := f.interrupt(); code != 0 {
		t.Fatalf("exit %d; stderr %q", code, f.stderr.String())
	}
	g, err := ac.DescribeGroup(t.Context(), "fg", "g1")
	if err != nil || g.Lag != 0 || g.Cursor == "" {
		t.Fatalf("group after follow: %v %+v", err, g)
	}
	produceDirect(t, ac, "fg", "k", "z")
	if out := c.ok("consume", "fg", "--group", "g1"); !slices.Equal(lines(out), []string{"z"}) {
		t.Fatalf("group resumed with %q", out)
	}
}
