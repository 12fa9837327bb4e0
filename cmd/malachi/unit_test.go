package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/pkg/client"
)

func TestKeyAt(t *testing.T) {
	doc := []byte(`{"id":"u1","n":10000000000000001,"user":{"id":7,"tags":["a","b"]},"ok":true,"obj":{"b":1,"a":2},"nul":null}`)
	cases := []struct {
		path, want, err string
	}{
		{".id", "u1", ""},
		{"id", "u1", ""},
		{".n", "10000000000000001", ""},
		{".user.id", "7", ""},
		{".user.tags.1", "b", ""},
		{".ok", "true", ""},
		{".obj", `{"a":2,"b":1}`, ""},
		{".missing", "", "no key at .missing"},
		{".nul", "", "no key at .nul"},
		{".id.deeper", "", "no key at .id.deeper"},
		{".user.tags.9", "", "no key at .user.tags.9"},
	}
	for _, tc := range cases {
		path, err := parseKeyPath(tc.path)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		got, err := keyAt(doc, path)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s: error %v, want %q", tc.path, err, tc.err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
	if _, err := keyAt([]byte("not json"), []string{"id"}); err == nil {
		t.Error("keyAt accepted a line that is not JSON")
	}
	for _, bad := range []string{"", ".", "..id", ".a..b", "a."} {
		if _, err := parseKeyPath(bad); err == nil {
			t.Errorf("parseKeyPath(%q) accepted", bad)
		}
	}
}

func TestReadLinesKeepsBytes(t *testing.T) {
	in := "a\r\n\n\tb\xff\nlast without newline"
	out := make(chan parsedLine, 10)
	readLines(strings.NewReader(in), lineFormat{}, newLineParser(lineFormat{}), false, out, make(chan struct{}))
	var got []string
	for l := range out {
		if l.err != nil {
			t.Fatal(l.err)
		}
		if l.rec.Key != nil || l.rec.Value == nil {
			t.Errorf("record %+v: want no key and a non-nil value", l.rec)
		}
		got = append(got, string(l.rec.Value))
	}
	want := []string{"a\r", "", "\tb\xff", "last without newline"}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Fatalf("lines %q, want %q", got, want)
	}
}

func TestReadLinesTooLong(t *testing.T) {
	out := make(chan parsedLine, 10)
	in := "short\n" + strings.Repeat("x", maxLine+1)
	readLines(strings.NewReader(in), lineFormat{}, newLineParser(lineFormat{}), false, out, make(chan struct{}))
	var last parsedLine
	for l := range out {
		last = l
	}
	if last.err == nil || !strings.Contains(last.err.Error(), "line 2 is longer than 16 MiB") {
		t.Fatalf("last line: %v", last.err)
	}
}

func TestLineParserKV(t *testing.T) {
	parse := newLineParser(lineFormat{kv: true, headers: []client.Header{{Key: "h", Value: []byte("v")}}})
	line := []byte("k\tv\twith tab")
	rec, err := parse(line, 1)
	if err != nil || string(rec.Key) != "k" || string(rec.Value) != "v\twith tab" || len(rec.Headers) != 1 {
		t.Fatalf("%+v %v", rec, err)
	}
	line[0] = 'X' // the record must not alias the scanner's buffer
	if string(rec.Key) != "k" {
		t.Fatal("record aliases the input line")
	}
	if rec, _ := parse([]byte("\tempty key"), 2); rec.Key == nil || len(rec.Key) != 0 {
		t.Fatalf("an empty key must stay a key: %#v", rec.Key)
	}
}

func TestRecordFormats(t *testing.T) {
	ts := time.UnixMilli(1700000000123)
	rec := client.Record{Key: []byte("k"), Value: []byte("v"), Timestamp: ts,
		Headers: []client.Header{{Key: "a", Value: []byte("1")}, {Key: "bin", Value: []byte{0xff}}}}
	cases := []struct {
		spec string
		json bool
		want string
	}{
		{"", false, "v\n"},
		{"value", true, "v\n"},
		{"", true, `{"key":"k","value":"v","headers":[{"key":"a","value":"1"},{"key":"bin","value":"/w==","value_base64":true}],"timestamp":"2023-11-14T22:13:20.123Z"}` + "\n"},
		{`{{.Key}}\t{{.Value}}`, false, "k\tv\n"},
		{`{{.Key}}={{.Headers.a}}{{.Headers.none}}\n`, false, "k=1\n"},
		{`{{.Timestamp.UnixMilli}}`, false, "1700000000123\n"},
	}
	for _, tc := range cases {
		f, err := newRecordFormat(tc.spec, tc.json, textOptions{})
		if err != nil {
			t.Fatalf("%q: %v", tc.spec, err)
		}
		var b bytes.Buffer
		w := bufio.NewWriter(&b)
		if err := f(w, &rec, ""); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		if b.String() != tc.want {
			t.Errorf("format %q: %q, want %q", tc.spec, b.String(), tc.want)
		}
	}
	if _, err := newRecordFormat("{{.Key", false, textOptions{}); exitCode(err) != 2 {
		t.Errorf("a bad template must be a usage error: %v", err)
	}
}

// TestJSONRecordEscapesControls: --format json lines carry no raw
// terminal controls, and decode to the record's bytes.
func TestJSONRecordEscapesControls(t *testing.T) {
	rec := client.Record{Key: []byte("k\u009b"), Value: []byte("v\x1b[2J\x7f")}
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	if err := writeJSONRecord(w, &rec, ""); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if bad := rawControl(strings.TrimSuffix(b.String(), "\n")); bad != "" {
		t.Fatalf("%q carries %s", b.String(), bad)
	}
	var j jsonRecord
	if err := json.Unmarshal(b.Bytes(), &j); err != nil || *j.Key != string(rec.Key) || j.Value != string(rec.Value) {
		t.Fatalf("decoded %+v, %v", j, err)
	}
}

func TestExplain(t *testing.T) {
	set := settings{Server: "127.0.0.1:4040", User: "bob", Timeout: 10 * time.Second}
	sub := errSubject{topic: "orders", set: set}
	cases := []struct {
		err  error
		want string
	}{
		{client.ErrNoSuchTopic, "no_such_topic: create it with 'malachi topic create orders'"},
		{client.ErrInvalidCredentials, "invalid_credentials: check --user/--password (or MALACHI_USER/MALACHI_PASSWORD)"},
		{fmt.Errorf("%w: %w", client.ErrDisconnected, syscall.ECONNREFUSED), "cannot reach 127.0.0.1:4040: is 'malachi serve' running? (or set --server / MALACHI_SERVER)"},
		{client.ErrRequestTimeout, "no answer from 127.0.0.1:4040 within 10s: is the address right? (raise --timeout for slow operations)"},
		{client.ErrPermissionDenied, "permission_denied: user bob may not do this on orders: an admin can grant it with 'malachi acl grant bob produce|consume orders'"},
		{client.ErrNotBuddies, "not_buddies: the ranges to merge are not two active halves of one block; see the ranges with 'malachi topic describe orders'"},
		{client.ErrNoQuorum, "no_quorum: fewer than a quorum of replicas made the write durable in time; no record of the request is visible. Retry; gave up after retrying, try again shortly"},
		{&client.Error{Reason: "brand_new"}, "brand_new: the server refused the request"},
		{fmt.Errorf("%w: 127.0.0.1:4040: %w", client.ErrTLS, errors.New("x509: certificate signed by unknown authority")),
			"TLS with 127.0.0.1:4040 failed: x509: certificate signed by unknown authority: check --tls-ca (the CA that signed the server's certificate) and --tls-server-name, and --tls-cert/--tls-key if the server wants a client certificate"},
		{fmt.Errorf("%w: %w", client.ErrDisconnected, client.ErrTLSRequired),
			"tls_required: the server accepts TLS connections only: pass --tls-ca with the CA that signed its certificate (or --tls to trust the system's roots)"},
		{fmt.Errorf("%w: %w", client.ErrDisconnected, io.EOF),
			"connection to 127.0.0.1:4040 failed: the connection broke; the request may or may not have taken effect (if the server requires TLS, pass --tls or --tls-ca)"},
		{errors.New("plain"), "plain"},
	}
	for _, tc := range cases {
		err := explain(tc.err, sub)
		if err.Error() != tc.want || exitCode(err) != 1 {
			t.Errorf("explain(%v) = %q (exit %d), want %q", tc.err, err, exitCode(err), tc.want)
		}
	}
	if err := explain(usageErr("bad"), sub); exitCode(err) != 2 {
		t.Errorf("usage errors keep exit code 2, got %d", exitCode(err))
	}
}

func TestHumanUnits(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 5 << 30: "5.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{
		42 * time.Second: "42s", 5*time.Minute + 10*time.Second: "5m10s", 5 * time.Minute: "5m",
		3*time.Hour + 5*time.Minute: "3h5m", 50 * time.Hour: "2d2h",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%s) = %q, want %q", d, got, want)
		}
	}
	if got := slice(0x4000, 0x8000, 16); got != "0x4000-0x7fff" {
		t.Errorf("slice = %q", got)
	}
	if got := share(0, 1<<14, 16); got != "25%" {
		t.Errorf("share = %q", got)
	}
	if got := share(0, 1<<11, 16); got != "3.12%" {
		t.Errorf("share = %q", got)
	}
}

// TestEveryCommandHasExample walks the client commands' help.
func TestEveryCommandHasExample(t *testing.T) {
	root := newRoot()
	if root.Example == "" {
		t.Error("malachi has no example")
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Example == "" {
			t.Errorf("%s has no example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	for _, c := range root.Commands() {
		switch c.Name() {
		case "serve", "bench", "completion", "help":
			continue // not client commands
		}
		walk(c)
	}
}
