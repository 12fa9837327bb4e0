package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func decodeJSON(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
}

// define, list, get, bind, unbind and delete, in text and JSON; off, 0
// and a flag not given stay three different things all the way through.
func TestPolicyCommands(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	out := c.ok("policy", "define", "week", "--max-age", "7d", "--max-bytes", "off", "--max-records", "0")
	if want := "defined policy week: max_age_ms=7d max_bytes=off max_records=0\n"; out != want {
		t.Fatalf("define: %q, want %q", out, want)
	}
	if out := c.ok("policy", "list"); !strings.Contains(out, "week") || !strings.Contains(out, "max_age_ms=7d max_bytes=off max_records=0") {
		t.Fatalf("list:\n%s", out)
	}
	var list []struct {
		Name      string                     `json:"name"`
		DefinedAt string                     `json:"defined_at"`
		Fields    map[string]json.RawMessage `json:"fields"`
	}
	decodeJSON(t, c.ok("policy", "list", "-o", "json"), &list)
	if len(list) != 1 || list[0].Name != "week" || list[0].DefinedAt == "" || len(list[0].Fields) != 3 {
		t.Fatalf("list -o json: %+v", list)
	}
	f := list[0].Fields
	if string(f["max_age_ms"]) != "604800000" || string(f["max_bytes"]) != "null" || string(f["max_records"]) != "0" {
		t.Fatalf("fields %s %s %s", f["max_age_ms"], f["max_bytes"], f["max_records"])
	}

	c.ok("topic", "create", "orders")
	if out := c.ok("policy", "bind", "orders", "week"); out != "bound topic orders to policy week\n" {
		t.Fatalf("bind: %q", out)
	}
	get := c.ok("policy", "get", "orders")
	for _, want := range []string{"Policy  week\n", "max_age_ms ", " 7d ", "default_ttl_ms", "global"} {
		if !strings.Contains(get, want) {
			t.Fatalf("get lacks %q:\n%s", want, get)
		}
	}
	var tp topicPolicyJSONForTest
	decodeJSON(t, c.ok("policy", "get", "orders", "-o", "json"), &tp)
	if tp.Topic != "orders" || tp.Policy == nil || *tp.Policy != "week" || tp.Resolution != "resolved" || len(tp.Definition) != 3 {
		t.Fatalf("get -o json: %+v", tp)
	}
	origins := map[string]string{}
	for _, e := range tp.Effective {
		origins[e.Name] = e.Origin + "=" + string(e.Value)
	}
	if origins["max_age_ms"] != "policy=604800000" || origins["max_bytes"] != "policy=null" || !strings.HasPrefix(origins["max_records"], "policy=0") {
		t.Fatalf("effective %v", origins)
	}
	if !strings.HasPrefix(origins["default_ttl_ms"], "global=") {
		t.Fatalf("default_ttl_ms not inherited: %v", origins)
	}

	if e := c.fails(1, "policy", "delete", "week"); !strings.Contains(e, "policy_in_use") || !strings.Contains(e, "--force") {
		t.Fatalf("delete of a bound policy: %s", e)
	}
	if out := c.ok("policy", "unbind", "orders"); !strings.Contains(out, "has no policy") {
		t.Fatalf("unbind: %q", out)
	}
	var unbound topicPolicyJSONForTest
	decodeJSON(t, c.ok("policy", "get", "orders", "-o", "json"), &unbound)
	if unbound.Policy != nil || unbound.Resolution != "none" {
		t.Fatalf("after unbind: %+v", unbound)
	}
	var del map[string]any
	decodeJSON(t, c.ok("policy", "delete", "week", "-o", "json"), &del)
	if del["policy"] != "week" || del["deleted"] != true {
		t.Fatalf("delete -o json: %v", del)
	}
	if out := c.ok("policy", "list", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("list after delete: %s", out)
	}
	if e := c.fails(1, "policy", "delete", "week"); !strings.Contains(e, "no_such_policy") || !strings.Contains(e, "malachi policy list") {
		t.Fatalf("second delete: %s", e)
	}
}

type topicPolicyJSONForTest struct {
	Topic      string                     `json:"topic"`
	Policy     *string                    `json:"policy"`
	Resolution string                     `json:"resolution"`
	Definition map[string]json.RawMessage `json:"definition"`
	Effective  []struct {
		Name   string          `json:"name"`
		Value  json.RawMessage `json:"value"`
		Origin string          `json:"origin"`
	} `json:"effective"`
}

// topic create --policy binds at creation; a forced delete leaves the
// topic's policy unresolved, which get says.
func TestPolicyTopicCreateAndForcedDelete(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	if e := c.fails(1, "topic", "create", "audit", "--policy", "keep"); !strings.Contains(e, "no_such_policy") || !strings.Contains(e, "policy define keep") {
		t.Fatalf("create with an undefined policy: %s", e)
	}
	var def map[string]any
	decodeJSON(t, c.ok("policy", "define", "keep", "--max-records", "100", "--default-ttl", "1h30m",
		"--segment-max-bytes", "64MiB", "--replicas", "3", "--spread-by", "zone", "--min-domains", "2", "--placement", "soft", "-o", "json"), &def)
	fields, _ := def["fields"].(map[string]any)
	if def["policy"] != "keep" || len(fields) != 7 || fields["default_ttl_ms"] != float64(5400000) ||
		fields["segment_max_bytes"] != float64(64<<20) || fields["spread_by"] != "zone" || fields["placement"] != "soft" {
		t.Fatalf("define -o json: %v", def)
	}
	if e := c.fails(1, "topic", "create", "audit", "--policy", "keep", "--user", "producer", "--password", "producer123"); !strings.Contains(e, "permission_denied") ||
		!strings.Contains(e, "administrator") {
		t.Fatalf("create with a policy as a producer: %s", e)
	}
	if out := c.ok("topic", "create", "audit", "--policy", "keep"); out != "created topic audit with policy keep\n" {
		t.Fatalf("create: %q", out)
	}
	var created map[string]any
	decodeJSON(t, c.ok("topic", "create", "audit2", "--policy", "keep", "-o", "json"), &created)
	if created["policy"] != "keep" {
		t.Fatalf("create -o json: %v", created)
	}
	if get := c.ok("policy", "get", "audit"); !strings.Contains(get, "1h30m") || !strings.Contains(get, "64.0 MiB") {
		t.Fatalf("get:\n%s", get)
	}
	c.ok("policy", "delete", "keep", "--force")
	get := c.ok("policy", "get", "audit")
	if !strings.Contains(get, "keep (not defined") || !strings.Contains(get, "unresolved") {
		t.Fatalf("get after a forced delete:\n%s", get)
	}
	var tp topicPolicyJSONForTest
	decodeJSON(t, c.ok("policy", "get", "audit", "-o", "json"), &tp)
	if tp.Resolution != "unresolved" || tp.Policy == nil || *tp.Policy != "keep" || len(tp.Definition) != 0 {
		t.Fatalf("get -o json after a forced delete: %+v", tp)
	}
	c.ok("policy", "define", "keep2")
	c.ok("policy", "bind", "audit", "keep2")
	if e := c.fails(1, "policy", "bind", "audit", "gone"); !strings.Contains(e, "no_such_policy") {
		t.Fatalf("bind to an undefined policy: %s", e)
	}
}

// Bad flag values are usage errors (exit 2) before anything is sent;
// values only the node can judge come back invalid_policy.
func TestPolicyDefineRefusals(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	for _, args := range [][]string{
		{"--max-age", "-1h"},
		{"--max-age", "soon"},
		{"--max-bytes", "lots"},
		{"--max-records", "-5"},
		{"--replicas", "off"},
		{"--placement", "anywhere"},
		{"--spread-by", ""},
	} {
		e := c.fails(2, append([]string{"policy", "define", "p"}, args...)...)
		if !strings.Contains(e, args[0]) {
			t.Errorf("%v: %s", args, e)
		}
	}
	for _, args := range [][]string{
		{"--segment-max-bytes", "100"},
		{"--segment-max-age", "10ms"},
		{"--replicas", "17"},
		{"--min-domains", "0"},
	} {
		if e := c.fails(1, append([]string{"policy", "define", "p"}, args...)...); !strings.Contains(e, "invalid_policy") {
			t.Errorf("%v: %s", args, e)
		}
	}
	if out := c.ok("policy", "list", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("a refused definition was stored: %s", out)
	}
	if e := c.fails(1, "policy", "list", "--user", "consumer", "--password", "consumer123"); !strings.Contains(e, "permission_denied") ||
		!strings.Contains(e, "administrator") {
		t.Fatalf("list as a consumer: %s", e)
	}
}

// produce --ttl sends the TTL header on every record.
func TestProduceTTL(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	c.ok("topic", "create", "sessions")
	c.okIn("a\nb\n", "produce", "sessions", "--ttl", "30m")
	out := c.ok("consume", "sessions", "--from", "start", "--format", "json")
	recs := lines(out)
	if len(recs) != 2 {
		t.Fatalf("consume: %s", out)
	}
	for _, line := range recs {
		var r struct {
			Headers []struct {
				Key   string `json:"key"`
				Value string `json:"value"`
			} `json:"headers"`
		}
		decodeJSON(t, line, &r)
		ttl := ""
		for _, h := range r.Headers {
			if h.Key == "malachi.ttl_ms" {
				ttl = h.Value
			}
		}
		if ttl != "1800000" {
			t.Fatalf("record %s: TTL header %q", line, ttl)
		}
	}
	if e := c.fails(2, "produce", "sessions", "--ttl", "1m", "--header", "malachi.ttl_ms=5"); !strings.Contains(e, "--ttl") {
		t.Fatalf("two TTLs: %s", e)
	}
	if e := c.fails(2, "produce", "sessions", "--ttl", "-1s"); !strings.Contains(e, "negative") {
		t.Fatalf("negative TTL: %s", e)
	}
}

// group describe shows the group's skips.
func TestGroupDescribeShowsSkipped(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	c.ok("topic", "create", "g")
	c.okIn("a\nb\n", "produce", "g")
	c.ok("consume", "g", "--group", "billing", "--commit", "--max", "2")
	if out := c.ok("group", "describe", "g", "billing"); !strings.Contains(out, "Skipped    0 records\n") {
		t.Fatalf("describe:\n%s", out)
	}
	var g map[string]any
	decodeJSON(t, c.ok("group", "describe", "g", "billing", "-o", "json"), &g)
	if g["skipped"] != float64(0) || g["skipped_bound"] != false {
		t.Fatalf("describe -o json: %v", g)
	}
}

func TestMsText(t *testing.T) {
	for ms, want := range map[int64]string{
		0: "0", 250: "250ms", 90_000: "1m30s", 3_600_000: "1h", 5_400_000: "1h30m", 600_000: "10m",
		86_400_000: "1d", 604_800_000: "7d", 129_600_000: "36h",
	} {
		if got := msText(ms); got != want {
			t.Errorf("msText(%d) = %q, want %q", ms, got, want)
		}
	}
	for in, want := range map[string]time.Duration{"7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "90s": 90 * time.Second, "0": 0} {
		if got, err := parseDays(in); err != nil || got != want {
			t.Errorf("parseDays(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"d", "-1d", "1d-1h", "x", "7days"} {
		if _, err := parseDays(in); err == nil {
			t.Errorf("parseDays(%q) accepted", in)
		}
	}
}
