package metadata

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata scripts")

// TestScripts runs testdata/*.txt. Each case is one line (a command kind
// with key=value fields, "apply <json>", or a query), a "----" line, then
// the expected output up to a blank line. After every command the runner
// also checks the invariants and that a refused command changed nothing.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runScript(t, file) })
	}
}

type scriptCase struct {
	line     int
	input    string
	expected string
	comments string // lines before the input, kept on rewrite
}

func runScript(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cases := parseScript(t, file, string(data))
	st := New()
	var out strings.Builder
	for _, c := range cases {
		got := runCase(t, st, c)
		if *rewrite {
			fmt.Fprintf(&out, "%s%s\n----\n%s\n\n", c.comments, c.input, got)
			continue
		}
		if got != c.expected {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, c.line, c.input, got, c.expected)
		}
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func parseScript(t *testing.T, file, data string) []scriptCase {
	var cases []scriptCase
	lines := strings.Split(data, "\n")
	var comments strings.Builder
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "#") || strings.TrimSpace(l) == "" {
			comments.WriteString(l + "\n")
			continue
		}
		c := scriptCase{line: i + 1, input: l, comments: comments.String()}
		comments.Reset()
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: want ---- after the input", file, i+1)
		}
		i += 2
		var exp []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			exp = append(exp, lines[i])
		}
		c.expected = strings.Join(exp, "\n")
		cases = append(cases, c)
	}
	return cases
}

func runCase(t *testing.T, st *State, c scriptCase) string {
	word, rest, _ := strings.Cut(c.input, " ")
	if q, ok := queries[word]; ok {
		return q(t, st, fields(t, rest))
	}
	var cmd Command
	if word == "apply" {
		if err := json.Unmarshal([]byte(rest), &cmd); err != nil {
			t.Fatalf("line %d: %v", c.line, err)
		}
	} else {
		cmd = parseCommand(t, word, fields(t, rest))
	}
	before := mustSnapshot(t, st)
	res := st.Apply(cmd)
	if err := st.CheckInvariants(); err != nil {
		t.Fatalf("line %d: invariant broken: %v", c.line, err)
	}
	if res.Err != nil && !bytes.Equal(before, mustSnapshot(t, st)) {
		t.Fatalf("line %d: refused command changed the state", c.line)
	}
	return formatResult(res)
}

func fields(t *testing.T, s string) map[string]string {
	m := make(map[string]string)
	for f := range strings.FieldsSeq(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("field %q is not key=value", f)
		}
		m[k] = v
	}
	return m
}

func parseCommand(t *testing.T, kind string, f map[string]string) Command {
	c := Command{V: Version, Kind: kind}
	for k, v := range f {
		switch k {
		case "v":
			c.V = int(num(t, v))
		case "now":
			c.Now = int64(num(t, v))
		case "topic":
			c.Topic = v
		case "bits":
			c.Bits = uint8(num(t, v))
		case "ranges":
			c.Ranges = int(num(t, v))
		case "range":
			c.Range = num(t, v)
		case "range_b":
			c.RangeB = num(t, v)
		case "topic_id":
			c.TopicID = num(t, v)
		case "until":
			c.Until = int64(num(t, v))
		case "factor":
			c.ReplicationFactor = int(num(t, v))
		default:
			parseMore(t, &c, k, v)
		}
	}
	return c
}

func parseMore(t *testing.T, c *Command, k, v string) {
	switch k {
	case "segment":
		c.Segment = num(t, v)
	case "base":
		c.Base = num(t, v)
	case "end":
		c.End = num(t, v)
	case "records":
		c.Records = num(t, v)
	case "bytes":
		c.Bytes = int64(num(t, v))
	case "replicas":
		c.Replicas = strings.Split(v, ",")
	case "group":
		c.Group = v
	case "entries":
		c.Entries = parseEntries(t, v)
	default:
		parseAccess(t, c, k, v)
	}
}

func parseAccess(t *testing.T, c *Command, k, v string) {
	switch k {
	case "user":
		c.User = v
	case "hash":
		c.PasswordHash = v
	case "perms":
		c.Perms = strings.Split(v, ",")
	case "op":
		c.Operation = v
	case "pattern":
		c.Pattern = v
	case "secret":
		c.ClusterSecret = []byte(v)
	case "id":
		c.ClusterID = v
	default:
		parsePolicy(t, c, k, v)
	}
}

func parsePolicy(t *testing.T, c *Command, k, v string) {
	switch k {
	case "policy":
		c.Policy = v
	case "force":
		c.Force = v == "true"
	case "reason":
		c.Reason = v
	case "fields":
		c.PolicyFields = parseFields(t, v)
	default:
		t.Fatalf("unknown field %q", k)
	}
}

// parseFields reads name:off, name:123 or name:s:text, comma separated.
func parseFields(t *testing.T, v string) map[string]PolicyValue {
	m := make(map[string]PolicyValue)
	for f := range strings.SplitSeq(v, ",") {
		name, val, ok := strings.Cut(f, ":")
		switch str, isStr := strings.CutPrefix(val, "s:"); {
		case !ok:
			t.Fatalf("policy field %q: want name:value", f)
		case val == "off":
			m[name] = PolicyValue{Off: true}
		case isStr:
			m[name] = PolicyValue{Str: str, IsStr: true}
		default:
			m[name] = PolicyValue{Int: int64(num(t, val))}
		}
	}
	return m
}

// parseEntries reads source/start/bits/offset,...
func parseEntries(t *testing.T, v string) []GroupEntry {
	var es []GroupEntry
	for e := range strings.SplitSeq(v, ",") {
		p := strings.Split(e, "/")
		if len(p) != 4 {
			t.Fatalf("entry %q: want source/start/bits/offset", e)
		}
		es = append(es, GroupEntry{Source: num(t, p[0]), SliceStart: num(t, p[1]),
			SliceBits: uint8(num(t, p[2])), Offset: num(t, p[3])})
	}
	return es
}

func num(t *testing.T, s string) uint64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		u, uerr := strconv.ParseUint(s, 10, 64)
		if uerr != nil {
			t.Fatalf("number %q: %v", s, err)
		}
		return u
	}
	return uint64(n)
}

func mustSnapshot(t *testing.T, st *State) []byte {
	b, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func formatResult(r Result) string {
	var b strings.Builder
	if r.Err != nil {
		b.WriteString("error " + r.Err.Error())
	} else {
		b.WriteString("ok")
	}
	if r.TopicID != 0 {
		fmt.Fprintf(&b, " topic=%d", r.TopicID)
	}
	if r.RangeIDs != nil {
		fmt.Fprintf(&b, " ranges=%v", r.RangeIDs)
	}
	if r.SegmentID != 0 {
		fmt.Fprintf(&b, " segment=%d", r.SegmentID)
	}
	if r.Sealed != nil {
		fmt.Fprintf(&b, " sealed=%s", formatSegment(*r.Sealed))
	}
	if r.Deleted != nil {
		fmt.Fprintf(&b, " deleted=%v", r.Deleted)
	}
	return b.String()
}

func formatSegment(s Segment) string {
	state := "sealed"
	if s.Active {
		state = "active"
	}
	return fmt.Sprintf("%d:[%d,%d)/%s/records=%d/bytes=%d/replicas=%v",
		s.ID, s.Base, s.End, state, s.Records, s.Bytes, s.Replicas)
}

func formatRange(r Range) string {
	state := "sealed"
	if r.Active {
		state = "active"
	}
	return fmt.Sprintf("range %d [%d,%d) %s parents=%v lineage=%v next=%d",
		r.ID, r.Start, r.End, state, r.Parents, r.Lineage, r.NextOffset)
}
