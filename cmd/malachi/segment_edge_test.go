package main

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/retention"
)

// segmentJSONLine is the line 'segment inspect --records --format json'
// writes for r.
func segmentJSONLine(t *testing.T, r *batch.Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := writeSegmentJSONRecord(w, r); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
}

// TestSegmentJSONHeaderKeysReadBack: inspect's help says 'produce
// --format json' reads its JSON lines back. Header keys are bytes in a
// segment, but writeSegmentJSONRecord writes them as a plain JSON string
// (no base64 escape hatch, unlike keys, values and header values), so
// encoding/json turns a key that is not UTF-8 into U+FFFD and the record
// produced back carries another header.
func TestSegmentJSONHeaderKeysReadBack(t *testing.T) {
	r := &batch.Record{Offset: 7, Timestamp: 1_700_000_000_000, Key: []byte("k"), Value: []byte("v"),
		Headers: []batch.Header{{Key: []byte("trace\xff\xfe"), Value: []byte("1")}}}
	line := segmentJSONLine(t, r)
	got, err := parseJSONRecord(line)
	if err != nil {
		t.Fatalf("produce --format json refuses %s: %v", line, err)
	}
	if len(got.Headers) != 1 || got.Headers[0].Key != string(r.Headers[0].Key) {
		t.Errorf("header key %q read back as %+v from %s", r.Headers[0].Key, got.Headers, line)
	}
}

// TestSegmentJSONTimestampsReadBack: a record's timestamp is the
// producer's, stored as sent (the node refuses only negative ones). One
// past year 9999 is written by jsonTime as a five-digit year, which
// time.Parse(RFC3339Nano) in 'produce --format json' refuses: the line
// cannot be read back, and a pipeline of inspect | produce stops there.
func TestSegmentJSONTimestampsReadBack(t *testing.T) {
	const year10000 = 253_402_300_800_000 // 10000-01-01T00:00:00Z in ms
	for _, ts := range []int64{0, 1_700_000_000_123, year10000} {
		r := &batch.Record{Offset: 1, Timestamp: ts, Value: []byte("v")}
		line := segmentJSONLine(t, r)
		got, err := parseJSONRecord(line)
		if err != nil {
			t.Errorf("timestamp %d: produce --format json refuses %s: %v", ts, line, err)
			continue
		}
		if got.Timestamp.UnixMilli() != ts {
			t.Errorf("timestamp %d read back as %d from %s", ts, got.Timestamp.UnixMilli(), line)
		}
	}
}

// TestReplayTTLOfFarExpiries: a replayed record is sent with the time it
// had left as its malachi.ttl_ms. replayable computes it as
// time.Duration(left) * time.Millisecond, which wraps past 292 years:
// the TTL comes out negative (or a wrong positive one), and SetTTL with a
// negative TTL drops the header, so a record that expires is replayed as
// one that never does. Below that, a time left above retention.MaxTTLMs
// (100 years) is sent as is, and the node ignores a TTL header it cannot
// parse: the same outcome. The TTL sent must be positive and one the
// node accepts. (segment_replay.go, replayable.)
func TestReplayTTLOfFarExpiries(t *testing.T) {
	const nowMs = 1_700_000_000_000
	const yearMs = 365 * 24 * 3600 * 1000
	f := &replayFlags{to: ^uint64(0)}
	for _, left := range []int64{1, 3_600_000, 150 * yearMs, 400 * yearMs} {
		r := &batch.Record{Offset: 3, Timestamp: nowMs, Expiry: nowMs + left, Value: []byte("v")}
		send, ttl := replayable(r, f, nowMs)
		if !send {
			t.Errorf("%d ms left: not sent", left)
			continue
		}
		if ttl <= 0 || ttl > time.Duration(retention.MaxTTLMs)*time.Millisecond {
			t.Errorf("%d ms left: sent with TTL %v (%d ms), which the node does not take as a TTL: the record would never expire",
				left, ttl, ttl.Milliseconds())
		}
	}
}

// TestReplayResumeWhenNothingWasSent: when a replay ends before its
// first record was handed to the producer (Ctrl-C while the scan walks
// up to --from, or a read error of the file), the failure message says
// "run again with --from N" with N = tally.resume() = last sent + 1 = 1:
// a file whose records start at offset 0 then loses record 0 on the
// second run, and one replayed with --from 5000 is told to replay
// offsets 1..4999, which were not asked for. Nothing was sent, so the
// resume point must not be above the first offset that could have been.
func TestReplayResumeWhenNothingWasSent(t *testing.T) {
	tally := &replayTally{}
	if got := tally.resume(); got != 0 {
		t.Errorf("nothing sent: resume at --from %d, which skips offsets below it", got)
	}
}

// TestSegmentRecordsLimitNoteOnlyWhenCut: with --records, inspect notes
// "printed the first N records; --limit 0 prints them all" whenever it
// printed exactly --limit records, also when the offsets asked for hold
// exactly that many and nothing was left out: an operator then reruns a
// whole file with --limit 0 for nothing, or believes records are missing.
// (segment.go, runInspect: printed == f.limit.)
func TestSegmentRecordsLimitNoteOnlyWhenCut(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	w := writeTestSegment(t, 5, 4)
	r := c.run(strings.NewReader(""), "segment", "inspect", w.path, "--records", "--limit", "20")
	if r.code != 0 || len(lines(r.stdout)) != 20 {
		t.Fatalf("exit %d, %d lines\n%s", r.code, len(lines(r.stdout)), r.stderr)
	}
	if strings.Contains(r.stderr, "--limit 0") {
		t.Errorf("all 20 records printed, yet: %q", r.stderr)
	}
}
