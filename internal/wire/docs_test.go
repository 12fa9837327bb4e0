// Documentation tests: docs/wire.md is written for client authors, so it
// must agree with the code. The reasons table must list exactly the
// entries of Reasons with the same retriable flags, every Reason constant
// must be in Reasons, and every hex example in the document must be a
// frame this package produces (a v1 vector or a golden admin frame).
package wire

import (
	"encoding/hex"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const docPath = "../../docs/wire.md"

func readDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReasonsTableMatchesDoc(t *testing.T) {
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (\\*\\*yes\\*\\*|no) \\| (.+) \\|$")
	seen := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(readDoc(t), -1) {
		reason, retriable := m[1], m[2] == "**yes**"
		info, ok := Reasons[reason]
		switch {
		case !ok:
			t.Errorf("docs list %q, which is not in Reasons", reason)
		case info.Retriable != retriable:
			t.Errorf("%q: docs say retriable=%v, Reasons says %v", reason, retriable, info.Retriable)
		case seen[reason]:
			t.Errorf("%q listed twice in the docs", reason)
		}
		seen[reason] = true
	}
	for reason := range Reasons {
		if !seen[reason] {
			t.Errorf("%q is missing from the docs' reasons table", reason)
		}
	}
}

// Every exported Reason constant is in the table, with a description.
func TestReasonConstantsInTable(t *testing.T) {
	file, err := parser.ParseFile(token.NewFileSet(), "reasons.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := 0
	ast.Inspect(file, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok || len(spec.Values) != 1 || !strings.HasPrefix(spec.Names[0].Name, "Reason") {
			return true
		}
		lit, ok := spec.Values[0].(*ast.BasicLit)
		if !ok {
			return true
		}
		reason, _ := strconv.Unquote(lit.Value)
		consts++
		if info, ok := Reasons[reason]; !ok || info.Description == "" {
			t.Errorf("%s (%q) has no entry with a description in Reasons", spec.Names[0].Name, reason)
		}
		return true
	})
	if consts != len(Reasons) {
		t.Errorf("%d Reason constants, %d entries in Reasons", consts, len(Reasons))
	}
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	for reason := range Reasons {
		if !snake.MatchString(reason) {
			t.Errorf("reason %q is not snake_case", reason)
		}
	}
}

func TestIsRetriable(t *testing.T) {
	for _, reason := range []string{ReasonMigrating, ReasonNotOwner, ReasonNoQuorum, ReasonMetadataUnavailable, ReasonRetry, ReasonShuttingDown} {
		if !IsRetriable(reason) {
			t.Errorf("%q should be retriable", reason)
		}
	}
	for _, reason := range []string{ReasonMalformedRequest, ReasonInvalidCursor, ReasonPermissionDenied, ReasonNoSuchTopic, "no_such_reason", ""} {
		if IsRetriable(reason) {
			t.Errorf("%q should not be retriable", reason)
		}
	}
}

// docHexExamples returns the hex frames quoted in the document: inline
// code spans made of hex digits and spaces, and runs of such lines inside
// fenced blocks.
func docHexExamples(doc string) []string {
	hexRun := regexp.MustCompile(`^[0-9a-f]{8}( [0-9a-f]+)+$`)
	var out []string
	for _, m := range regexp.MustCompile("`([0-9a-f ]{20,})`").FindAllStringSubmatch(doc, -1) {
		out = append(out, strings.ReplaceAll(m[1], " ", ""))
	}
	var block strings.Builder
	for line := range strings.SplitSeq(doc, "\n") {
		trimmed := strings.TrimSpace(line)
		isHex := block.Len() > 0 && regexp.MustCompile(`^[0-9a-f ]+$`).MatchString(trimmed)
		switch {
		case hexRun.MatchString(trimmed) && block.Len() == 0:
			block.WriteString(trimmed)
		case isHex:
			block.WriteString(trimmed)
		case block.Len() > 0:
			out = append(out, strings.ReplaceAll(block.String(), " ", ""))
			block.Reset()
		}
	}
	return out
}

func TestDocExamplesAreRealFrames(t *testing.T) {
	known := map[string]bool{
		"00000006000000010000": true, // ok, empty payload, corr 1
	}
	known[hex.EncodeToString(AppendErrorFrame(nil, 2, ReasonCannotSplit))] = true
	known[hintErrorGolden] = true
	for _, g := range adminGoldenRequests {
		known[g.frame] = true
	}
	for _, g := range adminGoldenResponses {
		known[g.frame] = true
	}
	examples := docHexExamples(readDoc(t))
	if len(examples) < 10 {
		t.Fatalf("found only %d hex examples in the docs", len(examples))
	}
	for _, ex := range examples {
		if !known[ex] {
			t.Errorf("docs example %s is not a golden frame", ex)
		}
	}
}
