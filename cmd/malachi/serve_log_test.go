package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/logcat"
)

// waitForLine waits until the child's stderr holds a line that match
// accepts, and returns it.
func waitForLine(t *testing.T, ch *child, what string, match func(line string) bool) string {
	t.Helper()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	for {
		for line := range strings.Lines(ch.stderr.String()) {
			if match(strings.TrimSuffix(line, "\n")) {
				return line
			}
		}
		select {
		case <-ch.stderr.grew:
		case <-deadline.C:
			t.Fatalf("no %s on stderr within %s:\n%s", what, waitFor, ch.stderr.String())
		}
	}
}

// jsonEvent returns a matcher of JSON lines carrying the event.
func jsonEvent(event string, rec map[string]any) func(string) bool {
	return func(line string) bool {
		clear(rec)
		return json.Unmarshal([]byte(line), &rec) == nil && rec["event"] == event
	}
}

func pt(t *testing.T, msg string) string {
	t.Helper()
	e, ok := logcat.Lookup(msg)
	if !ok {
		t.Fatalf("%q is not in the log catalog", msg)
	}
	return e.PtBR
}

// TestServeLogsJSONInPortuguese: with --log-format json --log-lang pt_BR
// the node's log lines are JSON objects whose msg is Portuguese and whose
// event and attribute keys are the English ones.
func TestServeLogsJSONInPortuguese(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	ch := c.startCmd(exec.Command(c.bin, "serve", "--dev", "--data-dir", t.TempDir(),
		"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json", "--log-lang", "pt_BR"))
	rec := map[string]any{}
	waitForLine(t, ch, "node.started JSON line", jsonEvent("node.started", rec))
	if rec["msg"] != pt(t, "node started") || rec["level"] != "INFO" || rec["node"] != "node-1" {
		t.Errorf("startup line: %v", rec)
	}
	if addr, _ := rec["client"].(string); !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("startup line has no client address: %v", rec)
	}
	if err := ch.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitForLine(t, ch, "node.shutting_down JSON line", jsonEvent("node.shutting_down", rec))
	if rec["msg"] != pt(t, "shutting down: draining connections") {
		t.Errorf("shutdown line: %v", rec)
	}
}

// TestServeLogLanguageFromTheEnvironment: MALACHI_LOCALE picks the
// language when --log-lang is not given; text is the default format.
func TestServeLogLanguageFromTheEnvironment(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	c.env = append(c.env, "MALACHI_LOCALE=pt_BR")
	ch := c.startCmd(exec.Command(c.bin, "serve", "--dev", "--data-dir", t.TempDir(),
		"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"))
	want := `msg="` + pt(t, "node started") + `" event=node.started node=node-1 `
	waitForLine(t, ch, "a Portuguese node.started text line", func(line string) bool {
		return strings.HasPrefix(line, "time=") && strings.Contains(line, want)
	})
}

func TestServeRefusesUnknownLogSettings(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{args: []string{"--log-format", "xml"}, want: "text or json"},
		{args: []string{"--log-lang", "fr_FR"}, want: "en_US or pt_BR"},
		{env: "MALACHI_LOCALE=pt", want: "en_US or pt_BR"},
		{args: []string{"--log-level", "loud"}, want: "debug, info, warn or error"},
	} {
		cc := *c
		if tc.env != "" {
			cc.env = append(append([]string(nil), c.env...), tc.env)
		}
		args := append([]string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, tc.args...)
		if errOut := cc.fails(2, args...); !strings.Contains(errOut, tc.want) {
			t.Errorf("%s %v: stderr %q, want it to name %q", tc.env, tc.args, errOut, tc.want)
		}
	}
}
