package logcat_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/logcat"
)

// msgArg is where the message is among a logging method's arguments.
var msgArg = map[string]int{
	"Debug": 0, "Info": 0, "Warn": 0, "Error": 0,
	"DebugContext": 1, "InfoContext": 1, "WarnContext": 1, "ErrorContext": 1,
	"Log": 2, "LogAttrs": 2,
}

// site is one place a message is logged.
type site struct {
	pos token.Position
	msg string // "" when the message is not a literal
}

// relay is a function that logs one of its parameters as the message,
// such as rollHeads(failed string, ...): the literals its callers pass
// are messages too.
type relay struct {
	name  string
	param int
}

func TestCatalogMatchesTheCode(t *testing.T) {
	sites := logSites(t, moduleRoot(t))
	if len(sites) < 50 {
		t.Fatalf("found only %d log calls: the scan is broken", len(sites))
	}
	used := map[string]bool{}
	var missing, opaque []string
	for _, s := range sites {
		if s.msg == "" {
			opaque = append(opaque, s.pos.String())
			continue
		}
		used[s.msg] = true
		if _, ok := logcat.Lookup(s.msg); !ok {
			missing = append(missing, fmt.Sprintf("%s: %q", s.pos, s.msg))
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d log messages are not in the catalog (internal/logcat/catalog.go); add each with an event name and its pt_BR text:\n%s",
			len(missing), strings.Join(missing, "\n"))
	}
	if len(opaque) > 0 {
		t.Errorf("log messages that are neither a literal nor a parameter passed literals; the catalog cannot list them:\n%s",
			strings.Join(opaque, "\n"))
	}
	var unused []string
	for _, e := range logcat.Entries() {
		if !used[e.Message] {
			unused = append(unused, fmt.Sprintf("%q (%s)", e.Message, e.Event))
		}
	}
	if len(unused) > 0 {
		t.Errorf("catalog entries no code logs any more; remove them (their event names stay retired):\n%s", strings.Join(unused, "\n"))
	}
}

var eventName = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)

func TestCatalogEntriesAreWellFormed(t *testing.T) {
	entries := logcat.Entries()
	if len(entries) == 0 {
		t.Fatal("empty catalog")
	}
	messages, events := map[string]bool{}, map[string]string{}
	for _, e := range entries {
		if messages[e.Message] {
			t.Errorf("message %q is listed twice", e.Message)
		}
		messages[e.Message] = true
		if prev, ok := events[e.Event]; ok {
			t.Errorf("event %s names both %q and %q", e.Event, prev, e.Message)
		}
		events[e.Event] = e.Message
		if !eventName.MatchString(e.Event) {
			t.Errorf("event %q of %q: want dotted lowercase words, such as heal.copy_recorded", e.Event, e.Message)
		}
		if strings.TrimSpace(e.PtBR) == "" {
			t.Errorf("%q has no pt_BR text", e.Message)
		}
		if e.Message != strings.TrimSpace(e.Message) || e.PtBR != strings.TrimSpace(e.PtBR) {
			t.Errorf("%q: leading or trailing space", e.Message)
		}
	}
	if _, ok := events[logcat.Unlisted]; ok {
		t.Errorf("%q is reserved for messages the catalog lacks", logcat.Unlisted)
	}
}

// A message tagged with its subsystem ("heal: ...", "peer: ...") keeps a
// tag in Portuguese, so a reader can still pick a subsystem's lines out.
func TestTranslationsKeepTheSubsystemTag(t *testing.T) {
	for _, e := range logcat.Entries() {
		tag, _, tagged := strings.Cut(e.Message, ": ")
		if tagged && !strings.Contains(tag, " ") && !strings.Contains(e.PtBR, ": ") {
			t.Errorf("%q → %q: the subsystem tag is lost", e.Message, e.PtBR)
		}
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// logSites parses every non-test Go file under root and returns each call
// of a logging method on something named like a logger.
func logSites(t *testing.T, root string) []site {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var sites []site
	var relays []relay
	for _, f := range files {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			params := paramIndexes(fn)
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				arg, ok := logMessage(n)
				if !ok {
					return true
				}
				pos := fset.Position(arg.Pos())
				pos.Filename, _ = filepath.Rel(root, pos.Filename)
				if msg, ok := stringLit(arg); ok {
					sites = append(sites, site{pos: pos, msg: msg})
					return true
				}
				if id, ok := arg.(*ast.Ident); ok {
					if i, isParam := params[id.Name]; isParam {
						relays = append(relays, relay{name: fn.Name.Name, param: i})
						return true
					}
				}
				sites = append(sites, site{pos: pos})
				return true
			})
		}
	}
	return append(sites, relayed(fset, root, files, relays)...)
}

// logMessage returns the message argument of a logging call.
func logMessage(n ast.Node) (ast.Expr, bool) {
	call, ok := n.(*ast.CallExpr)
	if !ok {
		return nil, false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return nil, false
	}
	i, ok := msgArg[sel.Sel.Name]
	if !ok || len(call.Args) <= i || !loggerLike(sel.X) {
		return nil, false
	}
	return call.Args[i], true
}

// loggerLike: b.log, cfg.Logger, logger, slog, log.With(...).
func loggerLike(e ast.Expr) bool {
	var name string
	switch x := e.(type) {
	case *ast.Ident:
		name = x.Name
	case *ast.SelectorExpr:
		name = x.Sel.Name
	case *ast.CallExpr:
		if s, ok := x.Fun.(*ast.SelectorExpr); ok && (s.Sel.Name == "With" || s.Sel.Name == "WithGroup") {
			return loggerLike(s.X)
		}
		return false
	default:
		return false
	}
	return strings.HasSuffix(name, "log") || strings.HasSuffix(name, "Logger") || strings.HasSuffix(name, "logger")
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// paramIndexes maps each named parameter of fn to its position.
func paramIndexes(fn *ast.FuncDecl) map[string]int {
	m := map[string]int{}
	i := 0
	for _, field := range fn.Type.Params.List {
		for _, name := range field.Names {
			m[name.Name] = i
			i++
		}
		if len(field.Names) == 0 {
			i++
		}
	}
	return m
}

// relayed returns the literals passed to relays, as log sites; a call
// that passes anything but a literal is an opaque site.
func relayed(fset *token.FileSet, root string, files []*ast.File, relays []relay) []site {
	var sites []site
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var name string
			switch fun := call.Fun.(type) {
			case *ast.Ident:
				name = fun.Name
			case *ast.SelectorExpr:
				name = fun.Sel.Name
			}
			i := slices.IndexFunc(relays, func(r relay) bool { return r.name == name })
			if i < 0 || len(call.Args) <= relays[i].param {
				return true
			}
			arg := call.Args[relays[i].param]
			pos := fset.Position(arg.Pos())
			pos.Filename, _ = filepath.Rel(root, pos.Filename)
			msg, _ := stringLit(arg)
			sites = append(sites, site{pos: pos, msg: msg})
			return true
		})
	}
	return sites
}

// TestScanFindsEveryForm runs the scan on a sample holding each form of
// log call it must see, and some it must not.
func TestScanFindsEveryForm(t *testing.T) {
	var got []string
	for _, s := range logSites(t, filepath.Join("testdata", "scan")) {
		got = append(got, fmt.Sprintf("%d:%q", s.pos.Line, s.msg))
	}
	slices.Sort(got)
	want := []string{
		`14:"plain literal"`, `15:"context form"`, `16:"log form"`, `17:"through With"`,
		`18:"package function"`, `19:"raw literal"`, `21:""`, `22:"relayed literal"`, `23:""`,
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("scan found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
