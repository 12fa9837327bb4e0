package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/bench"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

// TestBenchCommand runs `malachi bench` produce, consume and e2e with tiny
// workloads against an in-process node and checks their JSON reports.
func TestBenchCommand(t *testing.T) {
	// The command reads saved contexts and MALACHI_* like any other:
	// keep the developer's own out of the test.
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	for _, v := range []string{"MALACHI_CONTEXT", "MALACHI_USER", "MALACHI_PASSWORD", "MALACHI_SERVER"} {
		t.Setenv(v, "")
	}
	node := clienttest.Start(t)
	run := func(t *testing.T, args ...string) bench.Result {
		t.Helper()
		cmd := newRoot()
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs(append(append([]string{"bench"}, args...), "--server", node.Addr(), "--json"))
		if err := cmd.ExecuteContext(t.Context()); err != nil {
			t.Fatalf("bench %v: %v\n%s%s", args, err, out.String(), errOut.String())
		}
		var res bench.Result
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("bench %v: output is not a JSON result: %v\n%s", args, err, out.String())
		}
		return res
	}
	check := func(t *testing.T, s bench.Stats, records int64, timed bool) {
		t.Helper()
		if s.Records != records || s.Errors != 0 || s.RecordsPerS <= 0 {
			t.Errorf("records %d (want %d), errors %d, rate %.0f", s.Records, records, s.Errors, s.RecordsPerS)
		}
		if timed && (s.Latency == nil || s.Latency.Count == 0 || s.Latency.MaxUs < s.Latency.P50Us) {
			t.Errorf("latency %+v", s.Latency)
		}
	}

	res := run(t, "produce", "--topic", "b", "--records", "2000", "--size", "64", "--keys", "10",
		"--producers", "2", "--ranges", "2", "--batch", "100", "--linger", "1ms")
	check(t, res.Stats, 2000, true)
	if res.Bytes != 2000*64 || res.Latency.Count != 2000 || res.Latency.From != bench.FromBatch {
		t.Errorf("produce: bytes %d, latency %+v", res.Bytes, res.Latency)
	}

	res = run(t, "produce", "--topic", "b", "--records", "50", "--size", "64", "--sync", "--rate", "5000")
	check(t, res.Stats, 50, true)
	if res.Latency.From != bench.FromSchedule {
		t.Errorf("open loop measured from %q", res.Latency.From)
	}

	res = run(t, "consume", "--topic", "b", "--records", "2050", "--page-max", "500")
	check(t, res.Stats, 2050, true)
	if res.Wire != 2 {
		t.Errorf("consume: wire %d, want 2 (the default)", res.Wire)
	}

	// --wire v1 and --compression: the same workloads, and the report says
	// which version ran.
	res = run(t, "produce", "--topic", "c", "--records", "1000", "--size", "256", "--keys", "7", "--compression", "zstd")
	check(t, res.Stats, 1000, true)
	if res.Wire != 2 || res.Config.Compression != "zstd" {
		t.Errorf("produce: wire %d, compression %q", res.Wire, res.Config.Compression)
	}
	res = run(t, "produce", "--topic", "c", "--records", "1000", "--size", "256", "--wire", "v1")
	check(t, res.Stats, 1000, true)
	res = run(t, "produce", "--topic", "c", "--records", "100", "--sync", "--wire", "v1")
	check(t, res.Stats, 100, true)
	if res.Wire != 1 {
		t.Errorf("produce --wire v1: wire %d", res.Wire)
	}
	for _, wire := range []string{"v1", "v2"} {
		res = run(t, "consume", "--topic", "c", "--records", "2100", "--wire", wire, "--max-bytes", "4096")
		check(t, res.Stats, 2100, true)
		if want := int(wire[1] - '0'); res.Wire != want {
			t.Errorf("consume --wire %s: wire %d", wire, res.Wire)
		}
	}

	res = run(t, "consume", "--topic", "b", "--records", "2050", "--via", "group", "--consumers", "2")
	check(t, res.Stats, 2050, false)

	res = run(t, "e2e", "--records", "500", "--size", "32", "--rate", "20000")
	check(t, res.Stats, 500, true)
	if res.Produce == nil || res.Produce.Records != 500 {
		t.Errorf("e2e produce side %+v", res.Produce)
	}
}

// `bench consume --prepare` writes the topic it reads, with TTLs: the
// records given an expired TTL are filtered by the node, so the consumers
// read exactly the rest, and no more is there to read.
func TestBenchConsumePreparedTTL(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	for _, v := range []string{"MALACHI_CONTEXT", "MALACHI_USER", "MALACHI_PASSWORD", "MALACHI_SERVER"} {
		t.Setenv(v, "")
	}
	node := clienttest.Start(t)
	run := func(args ...string) (bench.Result, error) {
		cmd := newRoot()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(append(append([]string{"bench"}, args...), "--server", node.Addr(), "--json"))
		err := cmd.ExecuteContext(t.Context())
		var res bench.Result
		if err == nil {
			if jerr := json.Unmarshal(out.Bytes(), &res); jerr != nil {
				t.Fatalf("bench %v: %v\n%s", args, jerr, out.String())
			}
		}
		return res, err
	}
	res, err := run("consume", "--prepare", "--topic", "half", "--records", "1000", "--size", "64",
		"--ttl", "1h", "--expired-fraction", "0.5")
	if err != nil || res.Records != 500 || res.Errors != 0 {
		t.Fatalf("prepared consume: %d records, %d errors, %v", res.Records, res.Errors, err)
	}
	// The command's error keeps the engine's words, not its error value.
	if _, err := run("consume", "--topic", "half", "--records", "501", "--idle", "300ms"); err == nil || !strings.Contains(err.Error(), "500 of 501") {
		t.Fatalf("reading 501 records of a topic whose other 500 have expired: %v, want 500 of 501 read", err)
	}
	res, err = run("consume", "--prepare", "--topic", "look", "--records", "300", "--lookalike-headers")
	if err != nil || res.Records != 300 {
		t.Fatalf("look-alike consume: %d records, %v", res.Records, err)
	}
	for _, bad := range [][]string{
		{"consume", "--topic", "x", "--ttl", "1h"},
		{"consume", "--prepare", "--topic", "x", "--expired-fraction", "0.5"},
		{"consume", "--prepare", "--topic", "x", "--ttl", "1h", "--expired-fraction", "1"},
		{"produce", "--prepare", "--topic", "x"},
	} {
		if _, err := run(bad...); err == nil {
			t.Fatalf("bench %v: accepted", bad)
		}
	}
}
