package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// serveChild is a `malachi serve --dev` child on a given data directory
// and client address, so that a test can kill it and start it again.
type serveChild struct {
	cmd        *exec.Cmd
	addr, http string
}

func startServeChild(t *testing.T, c *cli, dataDir, listen string) *serveChild {
	t.Helper()
	cmd := exec.Command(c.bin, "serve", "--dev", "--data-dir", dataDir, "--listen", listen, "--http", "127.0.0.1:0")
	cmd.Env = c.env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &serveChild{cmd: cmd}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
	})
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "  client protocol  "); ok {
			s.addr = a
		}
		if a, ok := strings.CutPrefix(sc.Text(), "  http             http://"); ok {
			s.http = strings.TrimSuffix(a, "/health")
		}
		if sc.Text() == "ready" {
			break
		}
	}
	if s.addr == "" {
		t.Fatalf("serve printed no client address: %v", sc.Err())
	}
	go func() {
		for sc.Scan() {
		}
	}()
	return s
}

// startServeHTTP starts a node and returns its client and HTTP addresses.
func startServeHTTP(t *testing.T, c *cli) (string, string) {
	s := startServeChild(t, c, t.TempDir(), "127.0.0.1:0")
	return s.addr, s.http
}

// TestFollowSurvivesRestart: a follower reconnects after the node comes
// back and resumes from its cursor, printing nothing twice.
func TestFollowSurvivesRestart(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	dir := t.TempDir()
	node := startServeChild(t, c, dir, "127.0.0.1:0")
	c.env = append(c.env, "MALACHI_SERVER="+node.addr)
	// One range: the follower's order is the produce order.
	c.ok("topic", "create", "t")
	c.okIn("a1\na2\n", "produce", "t")
	f := c.start("consume", "t", "--follow")
	got := f.expect("a1", "a2")

	node.cmd.Process.Kill()
	node.cmd.Wait()
	// Stay down past the client's own few quick retries: the follower must
	// see the node gone and say it reconnects, not exit.
	waitStderr(t, f, "reconnecting")
	node = startServeChild(t, c, dir, node.addr)
	c.okIn("b1\nb2\n", "produce", "t")
	got = append(got, f.expect("b1", "b2")...)
	code, rest := f.interrupt()
	got = append(got, rest...)
	if code != 0 {
		t.Fatalf("follower exit %d: %s", code, f.stderr.String())
	}
	if !sameMultiset(got, []string{"a1", "a2", "b1", "b2"}) {
		t.Errorf("follower printed %q", got)
	}
}

// waitStderr waits, write by write, until a child's stderr holds want; an
// "error:" line first means the child gave up.
func waitStderr(t *testing.T, ch *child, want string) {
	t.Helper()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	for !strings.Contains(ch.stderr.String(), want) {
		if strings.Contains(ch.stderr.String(), "error:") {
			t.Fatalf("no %q on stderr: %q", want, ch.stderr.String())
		}
		select {
		case <-ch.stderr.grew:
		case <-deadline.C:
			t.Fatalf("no %q on stderr: %q", want, ch.stderr.String())
		}
	}
}

// TestJSONRecordsRoundTrip copies a topic of binary keys, headers and
// values through consume --format json | produce --format json and
// compares the copy record by record.
func TestJSONRecordsRoundTrip(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	admin := adminClient(t, n)
	c.ok("topic", "create", "src", "--ranges", "4")
	c.ok("topic", "create", "dst", "--ranges", "4")
	const total = 10000
	base := time.UnixMilli(1_700_000_000_000)
	var want []client.Record
	for i := range total {
		r := client.Record{
			Key:       []byte{byte(i % 37), 0xff, 0x00, byte(i)},
			Value:     fmt.Appendf([]byte{0xfe, 0x0a, '\t'}, "v%d\n", i),
			Timestamp: base.Add(time.Duration(i) * time.Millisecond),
			Headers:   []client.Header{{Key: "bin", Value: []byte{0x80, byte(i)}}, {Key: "text", Value: []byte("é\n")}},
		}
		if i%10 == 0 {
			r.Key = nil
		}
		if i%11 == 0 {
			r.Headers = nil
		}
		want = append(want, r)
	}
	for i := 0; i < total; i += 1000 {
		if _, err := admin.Produce(t.Context(), "src", want[i:i+1000]...); err != nil {
			t.Fatal(err)
		}
	}
	pipe := exec.Command("sh", "-c", `"$0" consume src --format json | "$0" produce dst --format json`, c.bin)
	pipe.Env = c.env
	if out, err := pipe.CombinedOutput(); err != nil {
		t.Fatalf("copy: %v\n%s", err, out)
	}
	src, dst := readAll(t, admin, "src"), readAll(t, admin, "dst")
	if ns, nd := len(flatten(src)), len(flatten(dst)); ns != total || nd != total {
		t.Fatalf("src %d, dst %d records", ns, nd)
	}
	// Order holds per key (ranges interleave); records without a key may
	// land in any range, so those compare as a set, ordered by value.
	byValue := func(a, b client.Record) int { return bytes.Compare(a.Value, b.Value) }
	slices.SortFunc(src["\x00nil"], byValue)
	slices.SortFunc(dst["\x00nil"], byValue)
	for k, recs := range src {
		if !slices.EqualFunc(recs, dst[k], sameRecord) {
			t.Fatalf("key %q: copy differs", k)
		}
	}
}

func sameRecord(a, b client.Record) bool {
	if !bytes.Equal(a.Key, b.Key) || (a.Key == nil) != (b.Key == nil) || !bytes.Equal(a.Value, b.Value) ||
		!a.Timestamp.Equal(b.Timestamp) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

// readAll returns a topic's records by key ("\x00nil" for no key), in
// the order each key's records are read.
func readAll(t *testing.T, c *client.Client, topic string) map[string][]client.Record {
	t.Helper()
	out := map[string][]client.Record{}
	cursor := ""
	for {
		page, err := c.Fetch(t.Context(), topic, client.FetchOptions{Cursor: cursor, Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			k := string(r.Key)
			if r.Key == nil {
				k = "\x00nil"
			}
			out[k] = append(out[k], r)
		}
		if len(page.Records) == 0 {
			return out
		}
		cursor = page.Cursor
	}
}

// TestProduceInputOptions: per-record headers, delimiters, whole-file
// values and bad lines.
func TestProduceInputOptions(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	admin := adminClient(t, n)
	for _, topic := range []string{"kvh", "delim", "whole", "bad", "skip"} {
		c.ok("topic", "create", topic)
	}

	c.okIn("k1\tv1\tsrc=a\tn=1\n", "produce", "kvh", "--kv", "--kv-headers")
	recs := flatten(readAll(t, admin, "kvh"))
	if len(recs) != 1 || string(recs[0].Key) != "k1" || string(recs[0].Value) != "v1" || len(recs[0].Headers) != 2 ||
		recs[0].Headers[1].Key != "n" || string(recs[0].Headers[1].Value) != "1" {
		t.Errorf("--kv-headers: %+v", recs)
	}

	c.okIn("a;b;c", "produce", "delim", "--delimiter", ";")
	if got := values(flatten(readAll(t, admin, "delim"))); !sameMultiset(got, []string{"a", "b", "c"}) {
		t.Errorf("--delimiter: %q", got)
	}

	path := filepath.Join(t.TempDir(), "blob")
	blob := []byte("line 1\nline 2\n\x00binary")
	if err := os.WriteFile(path, blob, 0o600); err != nil {
		t.Fatal(err)
	}
	c.ok("produce", "whole", "--value-file", path, "--key", "blob")
	if recs := flatten(readAll(t, admin, "whole")); len(recs) != 1 || !bytes.Equal(recs[0].Value, blob) {
		t.Errorf("--value-file: %+v", recs)
	}

	in := `{"key":"a","value":"1"}` + "\nnot json\n" + `{"key":"b","value":"2"}` + "\n"
	r := c.run(strings.NewReader(in), "produce", "bad", "--format", "json")
	if r.code != 1 || !strings.Contains(r.stderr, "line 2") || !strings.Contains(r.stderr, "read 2 lines, sent 1, skipped 0") {
		t.Errorf("bad line without --skip-bad: exit %d, %q", r.code, r.stderr)
	}
	r = c.run(strings.NewReader(in), "produce", "skip", "--format", "json", "--skip-bad")
	if r.code != 0 || !strings.Contains(r.stderr, "skipped 1") {
		t.Errorf("--skip-bad: exit %d, %q", r.code, r.stderr)
	}
	if got := values(flatten(readAll(t, admin, "skip"))); !sameMultiset(got, []string{"1", "2"}) {
		t.Errorf("--skip-bad produced %q", got)
	}
}

func flatten(m map[string][]client.Record) []client.Record {
	var out []client.Record
	for _, rs := range m {
		out = append(out, rs...)
	}
	return out
}

func values(rs []client.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r.Value)
	}
	return out
}
