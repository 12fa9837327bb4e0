package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/retention"
	"github.com/malachi-log/malachi/internal/segfile"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
	"github.com/malachi-log/malachi/pkg/client"
)

// sourceRecords are the JSON lines produced into the source topic: keys
// (one absent), a binary value, headers and timestamps of their own.
var sourceRecords = []string{
	`{"key":"user-1","value":"created","headers":[{"key":"source","value":"cli"}],"timestamp":"2026-01-02T03:04:05.006Z"}`,
	`{"key":null,"value":"no key","timestamp":"2026-01-02T03:04:06Z"}`,
	`{"key":"user-2","value":"/wD+AQ==","value_base64":true,"headers":[{"key":"a","value":"1"},{"key":"b","value":null}],"timestamp":"2026-01-02T03:04:07Z"}`,
	`{"key":"","value":"empty key","timestamp":"2026-01-02T03:04:08Z"}`,
	`{"key":"user-1","value":"paid","timestamp":"2026-01-02T03:04:09Z"}`,
}

// segmentFiles copies the node's segment files of topic data (those
// holding records) to a directory of the test's and returns their paths.
func segmentFiles(t *testing.T, dataDir string) []string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dataDir, "segments", "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var out []string
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) <= segfile.FileHeaderSize {
			continue
		}
		p := filepath.Join(dir, filepath.Base(l))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// inspectedRecord is what the test reads of inspect's JSON record lines.
type inspectedRecord struct {
	Offset uint64 `json:"offset"`
	jsonRecord
	Expiry string `json:"expiry"`
}

func parseSegmentLines(t *testing.T, out string) []inspectedRecord {
	t.Helper()
	var recs []inspectedRecord
	for _, l := range lines(out) {
		var r inspectedRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// recordLine is a record as the comparisons see it.
func recordLine(r client.Record) string {
	var hs []string
	for _, h := range r.Headers {
		if h.Key == client.TTLHeader {
			continue // compared on its own
		}
		hs = append(hs, fmt.Sprintf("%s=%q/%v", h.Key, h.Value, h.Value == nil))
	}
	return fmt.Sprintf("key %q/%v value %q time %d headers %v", r.Key, r.Key == nil, r.Value, r.Timestamp.UnixMilli(), hs)
}

func consumeAll(t *testing.T, c *cli, topic string) []client.Record {
	t.Helper()
	var out []client.Record
	for _, l := range lines(c.ok("consume", topic, "--from", "start", "--format", "json")) {
		r, err := parseJSONRecord([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestSegmentInspectAndReplay reads the segment file a node wrote for a
// topic, then replays it into another topic and reads that back.
func TestSegmentInspectAndReplay(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("topic", "create", "src", "--ranges", "1")
	c.ok("topic", "create", "dst", "--ranges", "1")
	c.okIn(strings.Join(sourceRecords, "\n")+"\n", "produce", "src", "--format", "json")
	c.okIn(`{"key":"session","value":"short-lived","timestamp":"2026-01-02T03:04:10Z"}`+"\n", "produce", "src", "--format", "json", "--ttl", "1h")
	want := consumeAll(t, c, "src")
	if len(want) != len(sourceRecords)+1 {
		t.Fatalf("the source topic holds %d records", len(want))
	}

	files := segmentFiles(t, n.DataDir())
	if len(files) != 1 {
		t.Fatalf("segment files with records: %v", files)
	}
	file := files[0]

	var rep segmentReport
	if err := json.Unmarshal([]byte(c.ok("segment", "inspect", file, "-o", "json")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Records != uint64(len(want)) || rep.Batches < 2 || rep.Segment == nil || len(rep.Damaged) != 0 || !rep.Complete {
		t.Fatalf("inspect: %+v", rep)
	}
	if rep.FirstTime != "2026-01-02T03:04:05.006Z" || rep.LastTime != "2026-01-02T03:04:10.000Z" {
		t.Errorf("inspect times %s to %s", rep.FirstTime, rep.LastTime)
	}

	// The records as inspect prints them are those consume reads.
	recs := parseSegmentLines(t, c.ok("segment", "inspect", file, "--records", "--format", "json", "--limit", "0"))
	if len(recs) != len(want) {
		t.Fatalf("inspect printed %d records, want %d", len(recs), len(want))
	}
	for i, r := range recs {
		j, _ := json.Marshal(r.jsonRecord)
		got, err := parseJSONRecord(j)
		if err != nil {
			t.Fatal(err)
		}
		if recordLine(got) != recordLine(want[i]) {
			t.Errorf("record %d: inspect shows %s, consume %s", i, recordLine(got), recordLine(want[i]))
		}
		if i > 0 && r.Offset <= recs[i-1].Offset {
			t.Errorf("offsets not increasing: %d after %d", r.Offset, recs[i-1].Offset)
		}
		if (r.Expiry != "") != (i == len(recs)-1) {
			t.Errorf("record %d: expiry %q", i, r.Expiry)
		}
	}
	text := c.ok("segment", "inspect", file, "--records", "--limit", "2", "--truncate", "3")
	if got := lines(text); len(got) != 2 || !strings.Contains(got[0], `key "use"…(3 more bytes)`) || !strings.Contains(got[1], "key -") {
		t.Errorf("text records: %q", got)
	}

	// A dry run sends nothing.
	out := c.ok("segment", "replay", file, "--topic", "dst", "--dry-run")
	if !strings.Contains(out, fmt.Sprintf("would replay %d records", len(want))) {
		t.Errorf("dry run said %q", out)
	}
	if got := consumeAll(t, c, "dst"); len(got) != 0 {
		t.Fatalf("a dry run produced %d records", len(got))
	}

	out = c.ok("segment", "replay", file, "--topic", "dst")
	if !strings.Contains(out, fmt.Sprintf("replayed %d records", len(want))) || !strings.Contains(out, "1 record sent with the time to live") {
		t.Errorf("replay said %q", out)
	}
	got := consumeAll(t, c, "dst")
	if len(got) != len(want) {
		t.Fatalf("dst holds %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if recordLine(got[i]) != recordLine(want[i]) {
			t.Errorf("record %d: replayed %s, want %s", i, recordLine(got[i]), recordLine(want[i]))
		}
	}
	last := got[len(got)-1]
	ttl := ""
	for _, h := range last.Headers {
		if h.Key == client.TTLHeader {
			ttl = string(h.Value)
		}
	}
	var ms int64
	if _, err := fmt.Sscan(ttl, &ms); err != nil || ms <= 0 || ms > 3600_000 {
		t.Errorf("the record with a TTL was replayed with %s=%q", client.TTLHeader, ttl)
	}

	// A range of offsets, and a topic that does not exist.
	out = c.ok("segment", "replay", file, "--topic", "dst", "--from", itoa(recs[1].Offset), "--to", itoa(recs[2].Offset))
	if !strings.Contains(out, "replayed 2 records") {
		t.Errorf("bounded replay said %q", out)
	}
	if got := consumeAll(t, c, "dst"); len(got) != len(want)+2 || recordLine(got[len(want)]) != recordLine(want[1]) {
		t.Errorf("after the bounded replay dst holds %d records", len(got))
	}
	if msg := c.fails(1, "segment", "replay", file, "--topic", "nowhere"); !strings.Contains(msg, "--from") {
		t.Errorf("a refused replay said %q", msg)
	}
}

// writtenSegment is a segment file written by segment.Create and Append,
// with the file position of each batch.
type writtenSegment struct {
	path string
	data []byte
	pos  []int64
}

func writeTestSegment(t *testing.T, batches, perBatch int) writtenSegment {
	t.Helper()
	path := filepath.Join(t.TempDir(), "00000000000000000009.log")
	s, err := segment.Create(vfs.OS(), path, 9, 0, segment.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := writtenSegment{path: path}
	pos := int64(segfile.FileHeaderSize)
	for b := range batches {
		var recs []batch.Record
		for i := range perBatch {
			recs = append(recs, batch.Record{Timestamp: int64(1000 * (b*perBatch + i)), Key: []byte("k"), Value: fmt.Appendf(nil, "v%d.%d", b, i)})
		}
		enc, err := batch.EncodeBatch(nil, uint64(b*perBatch), recs, batch.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(enc); err != nil {
			t.Fatal(err)
		}
		w.pos = append(w.pos, pos)
		pos += int64(len(enc))
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if w.data, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	return w
}

// damagedCopy writes data to a new file named like a segment.
func damagedCopy(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "00000000000000000009.log")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func inspectJSON(t *testing.T, c *cli, wantCode int, args ...string) segmentReport {
	t.Helper()
	r := c.run(strings.NewReader(""), append([]string{"segment", "inspect", "-o", "json"}, args...)...)
	if r.code != wantCode {
		t.Fatalf("inspect %v: exit %d, want %d\n%s%s", args, r.code, wantCode, r.stdout, r.stderr)
	}
	var rep segmentReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	return rep
}

func TestSegmentInspectDamage(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	w := writeTestSegment(t, 5, 4)
	if rep := inspectJSON(t, c, 0, w.path); rep.Records != 20 || rep.Batches != 5 || rep.Footer != nil {
		t.Fatalf("whole file: %+v", rep)
	}

	t.Run("corrupt byte", func(t *testing.T) {
		data := slices.Clone(w.data)
		data[w.pos[2]+batch.HeaderSize+2] ^= 0x40
		p := damagedCopy(t, data)
		rep := inspectJSON(t, c, 1, p)
		if rep.Complete || rep.Batches != 2 || len(rep.Damaged) != 1 || rep.Damaged[0].Start != w.pos[2] || !strings.Contains(rep.Damaged[0].Reason, "crc") {
			t.Fatalf("report %+v", rep)
		}
		rep = inspectJSON(t, c, 1, p, "--skip-damaged")
		if !rep.Complete || rep.Batches != 4 || rep.Records != 16 || len(rep.Damaged) != 1 || rep.Damaged[0].End != w.pos[3] {
			t.Fatalf("report with --skip-damaged %+v", rep)
		}
		// The text report names the span and the reason; the error line
		// says where.
		r := c.run(strings.NewReader(""), "segment", "inspect", p)
		if r.code != 1 || !strings.Contains(r.stdout, fmt.Sprintf("bytes %d-", w.pos[2])) || !strings.Contains(r.stderr, "damaged") {
			t.Errorf("text: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		recs := parseSegmentLines(t, c.run(strings.NewReader(""), "segment", "inspect", p, "--skip-damaged", "--records", "--format", "json").stdout)
		if len(recs) != 16 || recs[8].Offset != 12 {
			t.Errorf("records past the damage: %d, %+v", len(recs), recs)
		}
		// A replay refuses the file before connecting to anything.
		if msg := c.fails(1, "segment", "replay", p, "--topic", "t", "--server", "127.0.0.1:1"); !strings.Contains(msg, "nothing was sent") {
			t.Errorf("replay of a damaged file: %q", msg)
		}
		out := c.ok("segment", "replay", p, "--topic", "t", "--skip-damaged", "--dry-run")
		if !strings.Contains(out, "would replay 16 records") || !strings.Contains(out, "skipped 1 damaged span") {
			t.Errorf("dry run past damage: %q", out)
		}
	})

	t.Run("truncated", func(t *testing.T) {
		p := damagedCopy(t, w.data[:w.pos[4]+10])
		rep := inspectJSON(t, c, 1, p, "--skip-damaged")
		if rep.Records != 16 || len(rep.Damaged) != 1 || rep.Damaged[0].Start != w.pos[4] || !strings.Contains(rep.Damaged[0].Reason, "fewer than") {
			t.Fatalf("report %+v", rep)
		}
	})

	t.Run("random bytes", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		data := make([]byte, 64<<10)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		rep := inspectJSON(t, c, 1, damagedCopy(t, data), "--skip-damaged")
		if rep.Segment != nil || rep.HeaderError == "" || rep.Records != 0 || rep.DamageBytes != int64(len(data)-segfile.FileHeaderSize) {
			t.Fatalf("report %+v", rep)
		}
	})

	t.Run("huge declared length", func(t *testing.T) {
		data := slices.Clone(w.data)
		binary.LittleEndian.PutUint32(data[w.pos[1]+14:], batch.MaxBatchSize)
		rep := inspectJSON(t, c, 1, damagedCopy(t, data), "--skip-damaged")
		if rep.Records != 16 || len(rep.Damaged) != 1 || !strings.Contains(rep.Damaged[0].Reason, "left in the file") {
			t.Fatalf("report %+v", rep)
		}
	})

	t.Run("seal footer", func(t *testing.T) {
		p := damagedCopy(t, w.data)
		seal := strings.TrimSuffix(p, ".log") + ".seal"
		if err := os.WriteFile(seal, segment.MarshalFooter(9, segment.Footer{Base: 0, End: 20, Records: 20, Bytes: int64(len(w.data) - segfile.FileHeaderSize)}), 0o600); err != nil {
			t.Fatal(err)
		}
		// The content hash is wrong: the file disagrees with its footer.
		rep := inspectJSON(t, c, 1, p)
		if rep.Footer == nil || rep.Footer.Agrees || len(rep.Footer.Disagreements) != 1 || !strings.Contains(rep.Footer.Disagreements[0], "content hash") {
			t.Fatalf("footer %+v", rep.Footer)
		}
		// A replay refuses it too: the footer is the only word on a
		// sealed file's length. With --skip-damaged it goes on, and says so.
		if msg := c.fails(1, "segment", "replay", p, "--topic", "t", "--dry-run"); !strings.Contains(msg, "does not match its seal footer") {
			t.Errorf("replay of a file that disagrees with its footer: %q", msg)
		}
		if r := c.run(strings.NewReader(""), "segment", "replay", p, "--topic", "t", "--dry-run", "--skip-damaged"); r.code != 0 ||
			!strings.Contains(r.stdout, "would replay 20 records") || !strings.Contains(r.stderr, "does not match its seal footer (content hash") {
			t.Errorf("replay --skip-damaged of a file that disagrees with its footer: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		// The footer that agrees: the file is whole, and replays.
		hash, err := segfile.ContentHash(t.Context(), bytes.NewReader(w.data), int64(len(w.data)))
		if err != nil {
			t.Fatal(err)
		}
		ft := segment.Footer{Base: 0, End: 20, Records: 20, Bytes: int64(len(w.data) - segfile.FileHeaderSize), ContentHash: hash}
		if err := os.WriteFile(seal, segment.MarshalFooter(9, ft), 0o600); err != nil {
			t.Fatal(err)
		}
		if rep := inspectJSON(t, c, 0, p); rep.Footer == nil || !rep.Footer.Agrees {
			t.Fatalf("agreeing footer: %+v", rep.Footer)
		}
		if out := c.ok("segment", "replay", p, "--topic", "t", "--dry-run"); !strings.Contains(out, "would replay 20 records") {
			t.Errorf("replay of a file that agrees with its footer: %q", out)
		}
		// The same footer beside a copy cut short at a batch boundary: the
		// batches scan clean, the footer does not agree, nothing is sent.
		short := damagedCopy(t, w.data[:w.pos[4]])
		if err := os.WriteFile(strings.TrimSuffix(short, ".log")+".seal", segment.MarshalFooter(9, ft), 0o600); err != nil {
			t.Fatal(err)
		}
		if msg := c.fails(1, "segment", "replay", short, "--topic", "t", "--dry-run"); !strings.Contains(msg, "does not match its seal footer") {
			t.Errorf("replay of a sealed file cut short at a batch boundary: %q", msg)
		}
		// A footer that cannot be read: inspect says so; replay checks
		// the file without it.
		if err := os.WriteFile(seal, []byte("not a footer"), 0o600); err != nil {
			t.Fatal(err)
		}
		if msg := c.fails(1, "segment", "inspect", p); !strings.Contains(msg, "its seal footer is unreadable") {
			t.Errorf("inspect with an unreadable footer: %q", msg)
		}
		if r := c.run(strings.NewReader(""), "segment", "replay", p, "--topic", "t", "--dry-run"); r.code != 0 ||
			!strings.Contains(r.stdout, "would replay 20 records") || !strings.Contains(r.stderr, "unreadable") {
			t.Errorf("replay with an unreadable footer: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
}

func TestSegmentUsage(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	w := writeTestSegment(t, 1, 1)
	for _, args := range [][]string{
		{"segment", "replay", w.path},
		{"segment", "replay", w.path, "--topic", "t", "--from", "5", "--to", "4"},
		{"segment", "inspect", w.path, "--format", "xml"},
		{"segment", "inspect"},
	} {
		c.fails(2, args...)
	}
	if msg := c.fails(1, "segment", "inspect", filepath.Join(t.TempDir(), "missing.log")); !strings.Contains(msg, "no such file") {
		t.Errorf("missing file: %q", msg)
	}
}

// TestSegmentShowEscapes: text output never passes a control byte or a
// bidi control through, and cuts long fields on a rune boundary.
func TestSegmentShowEscapes(t *testing.T) {
	f := &inspectFlags{truncate: 4}
	for in, want := range map[string]string{
		"\x1b[2J":            `"\x1b[2J"`,
		"ab\u202ecd":         `"ab"…(5 more bytes)`,
		"héllo":              `"hél"…(2 more bytes)`,
		"abcé":               `"abc"…(2 more bytes)`,
		"\xff\xfe":           `"\xff\xfe"`,
		"line\nbreak":        `"line"…(6 more bytes)`,
		"":                   `""`,
		"\u2028\u2028\u2028": `"\u2028"…(6 more bytes)`,
	} {
		got := f.show([]byte(in))
		if got != want {
			t.Errorf("show(%q) = %s, want %s", in, got, want)
		}
		if bytes.ContainsAny([]byte(got), "\x1b\n\u202e\u2028") {
			t.Errorf("show(%q) = %q passes a control through", in, got)
		}
	}
	if got := f.show(nil); got != "-" {
		t.Errorf("show(nil) = %q", got)
	}
}

// TestSegmentRecordsLimitNoteWhenCut: the note comes when --limit left
// records out, also when the records left out lie in a later batch.
func TestSegmentRecordsLimitNoteWhenCut(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	w := writeTestSegment(t, 5, 4)
	for _, limit := range []string{"19", "4"} {
		r := c.run(strings.NewReader(""), "segment", "inspect", w.path, "--records", "--limit", limit)
		if r.code != 0 || fmt.Sprint(len(lines(r.stdout))) != limit {
			t.Fatalf("--limit %s: exit %d, %d lines\n%s", limit, r.code, len(lines(r.stdout)), r.stderr)
		}
		if !strings.Contains(r.stderr, "printed the first "+limit+" records; --limit 0") {
			t.Errorf("--limit %s left records out without a note: %q", limit, r.stderr)
		}
	}
}

// TestProduceJSONTimestamps: produce --format json reads a timestamp as
// RFC 3339 or as unix milliseconds (a JSON number), and refuses others.
func TestProduceJSONTimestamps(t *testing.T) {
	for ts, want := range map[string]int64{
		`"2026-01-02T03:04:05.006Z"`: 1_767_323_045_006,
		`253402300800000`:            253_402_300_800_000,
		`-1`:                         -1,
		`0`:                          0,
	} {
		rec, err := parseJSONRecord([]byte(`{"key":null,"value":"v","timestamp":` + ts + `}`))
		if err != nil || rec.Timestamp.UnixMilli() != want {
			t.Errorf("timestamp %s: %v, %v; want %d ms", ts, rec.Timestamp, err, want)
		}
	}
	for _, ts := range []string{`1.5`, `true`, `"yesterday"`, `{}`} {
		if _, err := parseJSONRecord([]byte(`{"value":"v","timestamp":` + ts + `}`)); err == nil {
			t.Errorf("timestamp %s accepted", ts)
		}
	}
	for _, line := range []string{`{"value":"v"}`, `{"value":"v","timestamp":""}`, `{"value":"v","timestamp":null}`} {
		if rec, err := parseJSONRecord([]byte(line)); err != nil || !rec.Timestamp.IsZero() {
			t.Errorf("%s: %v, %v; want no timestamp", line, rec.Timestamp, err)
		}
	}
}

// TestConsumeJSONHeaderKeysReadBack: consume's JSON lines carry a header
// key that is not UTF-8 as base64, and produce reads it back.
func TestConsumeJSONHeaderKeysReadBack(t *testing.T) {
	r := client.Record{Value: []byte("v"), Headers: []client.Header{{Key: "k\xff", Value: []byte("1")}, {Key: "plain"}}}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := writeJSONRecord(w, &r, ""); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if !strings.Contains(buf.String(), `{"key":"plain","value":null}`) {
		t.Errorf("a UTF-8 header key is no longer written as before: %s", buf.String())
	}
	got, err := parseJSONRecord(bytes.TrimSpace(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Headers) != 2 || got.Headers[0].Key != "k\xff" || got.Headers[1].Key != "plain" || got.Headers[1].Value != nil {
		t.Errorf("headers %+v read back from %s", got.Headers, buf.String())
	}
}

// TestReplayTTLClampedAndExpired: which records a replay sends with a TTL
// cut to the node's longest, and which it skips as expired, whatever the
// file's expiries (int64 extremes included).
func TestReplayTTLClampedAndExpired(t *testing.T) {
	const nowMs = 1_700_000_000_000
	f := &replayFlags{to: ^uint64(0)}
	for _, c := range []struct {
		expiry        int64
		send, clamped bool
	}{
		{nowMs + 1, true, false},
		{nowMs + retention.MaxTTLMs, true, false},
		{nowMs + retention.MaxTTLMs + 1, true, true},
		{math.MaxInt64, true, true},
		{nowMs, false, false},
		{math.MinInt64 + 1, false, false},
	} {
		r := &batch.Record{Offset: 1, Expiry: c.expiry, Value: []byte("v")}
		send, ttl := replayable(r, f, nowMs)
		if send != c.send || ttlClamped(r, nowMs) != c.clamped {
			t.Errorf("expiry %d: send %v, clamped %v; want %v, %v", c.expiry, send, ttlClamped(r, nowMs), c.send, c.clamped)
		}
		if send && (ttl <= 0 || ttl.Milliseconds() > retention.MaxTTLMs || !c.clamped && ttl.Milliseconds() != c.expiry-nowMs) {
			t.Errorf("expiry %d: TTL %d ms", c.expiry, ttl.Milliseconds())
		}
	}
}
