// Package lint holds the project's architecture rules as tests: the import
// edges of DESIGN.md's layering, the purity of the state-machine packages,
// and formatting. A rule broken here is a design change to discuss, not a
// test to silence.
package lint

import (
	"encoding/json"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/malachi-log/malachi"

type pkg struct {
	ImportPath string
	Imports    []string
	GoFiles    []string
	Dir        string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// pure packages do no I/O, start no goroutines on their own clock, read no
// clock and take no locks: they may not import these.
var pureForbidden = []string{"os", "net", "net/http", "os/exec", "sync", "time", "math/rand", "math/rand/v2",
	module + "/internal/vfs", module + "/internal/clock", module + "/internal/storage"}

var purePackages = []string{"keyspace", "cursor", "metadata", "groups"}

func TestPurePackagesStayPure(t *testing.T) {
	for _, p := range listPackages(t) {
		for _, name := range purePackages {
			if p.ImportPath != module+"/internal/"+name {
				continue
			}
			for _, imp := range p.Imports {
				for _, bad := range pureForbidden {
					if imp == bad {
						t.Errorf("%s imports %s: pure packages take time and I/O as inputs", p.ImportPath, imp)
					}
				}
			}
		}
	}
}

func TestImportEdges(t *testing.T) {
	// server is the broker's front door: it dispatches decoded requests to
	// the broker and shares its request and error types.
	mayImportBroker := []string{"/cmd/", "/pkg/client/clienttest", "/internal/sim", "/internal/e2e", "/internal/server"}
	for _, p := range listPackages(t) {
		for _, imp := range p.Imports {
			if imp == module+"/internal/broker" && !hasAny(p.ImportPath, mayImportBroker) {
				t.Errorf("%s imports internal/broker; only cmd, server, clienttest, e2e and sim may", p.ImportPath)
			}
		}
		if p.ImportPath == module+"/pkg/client" {
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, module+"/") && imp != module+"/internal/wire" {
					t.Errorf("pkg/client imports %s; it may import only internal/wire", imp)
				}
			}
		}
	}
}

func hasAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func TestGofmt(t *testing.T) {
	err := filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		formatted, err := format.Source(src)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		if string(formatted) != string(src) {
			t.Errorf("%s is not gofmt-formatted", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
