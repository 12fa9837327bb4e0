// Package lint holds the project's architecture rules as tests: the import
// edges of docs/architecture.md's layering, the purity of the state-machine packages,
// and formatting. A rule broken here is a design change to discuss, not a
// test to silence.
package lint

import (
	"encoding/json"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/malachi-log/malachi"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string // every package it imports, directly or not
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

var purePackages = []string{"keyspace", "cursor", "metadata", "groups", "placement", "dataplane", "replication", "heal", "retention"}

// internalPackages returns those of pkgs that are internal/<name> for
// one of names.
func internalPackages(pkgs []pkg, names ...string) []pkg {
	var out []pkg
	for _, p := range pkgs {
		if name, ok := strings.CutPrefix(p.ImportPath, module+"/internal/"); ok && slices.Contains(names, name) {
			out = append(out, p)
		}
	}
	return out
}

func TestPurePackagesStayPure(t *testing.T) {
	for _, p := range internalPackages(listPackages(t), purePackages...) {
		for _, imp := range p.Imports {
			if slices.Contains(pureForbidden, imp) {
				t.Errorf("%s imports %s: pure packages take time and I/O as inputs", p.ImportPath, imp)
			}
		}
	}
}

// leafPackages are shared by the node and pkg/client: they import no
// other package of the module, so that the client's imports stay its own,
// but for internal/batch's chunks from internal/slab (leafImports).
// internal/batch (the batch format) does no I/O either, but unlike the pure
// packages it may take locks: it pools buffers and shares one zstd encoder
// and decoder across goroutines. internal/slab maps memory and nothing else.
var (
	leafPackages = []string{"wire", "batch", "keyspace", "slab"}
	leafImports  = map[string][]string{"batch": {module + "/internal/slab"}}
)

var batchForbidden = []string{"os", "net", "net/http", "os/exec", "time", "math/rand", "math/rand/v2"}

func TestLeafPackages(t *testing.T) {
	pkgs := listPackages(t)
	for _, p := range internalPackages(pkgs, leafPackages...) {
		allowed := leafImports[strings.TrimPrefix(p.ImportPath, module+"/internal/")]
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") && !slices.Contains(allowed, imp) {
				t.Errorf("%s imports %s: it may import no package of the module", p.ImportPath, imp)
			}
		}
	}
	for _, p := range internalPackages(pkgs, "batch") {
		for _, imp := range p.Imports {
			if slices.Contains(batchForbidden, imp) {
				t.Errorf("%s imports %s: the batch format does no I/O and reads no clock", p.ImportPath, imp)
			}
		}
	}
}

func TestImportEdges(t *testing.T) {
	// server is the broker's front door: it dispatches decoded requests to
	// the broker and shares its request and error types. metrics reads its
	// snapshots at scrape time.
	mayImportBroker := []string{"/cmd/", "/pkg/client/clienttest", "/internal/e2e", "/internal/server", "/internal/metrics"}
	for _, p := range listPackages(t) {
		for _, imp := range p.Imports {
			if imp == module+"/internal/broker" && !hasAny(p.ImportPath, mayImportBroker) {
				t.Errorf("%s imports internal/broker; only cmd, server, clienttest, e2e and sim may", p.ImportPath)
			}
		}
		// The client shares the node's wire codecs, batch format and key
		// hashing, and nothing else: checked on every package it depends
		// on, not only those it names.
		if p.ImportPath == module+"/pkg/client" {
			for _, dep := range p.Deps {
				if strings.HasPrefix(dep, module+"/") && !slices.Contains(clientMayImport, strings.TrimPrefix(dep, module+"/")) {
					t.Errorf("pkg/client depends on %s; it may import only %s", dep, strings.Join(clientMayImport, ", "))
				}
			}
		}
		// A segment holds batches; the format is internal/batch's.
		if p.ImportPath == module+"/internal/storage/segment" {
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, module+"/") && !slices.Contains(segmentMayImport, strings.TrimPrefix(imp, module+"/")) {
					t.Errorf("internal/storage/segment imports %s; it may import only %s", imp, strings.Join(segmentMayImport, ", "))
				}
			}
		}
	}
}

var (
	clientMayImport  = []string{"internal/wire", "internal/batch", "internal/keyspace", "internal/slab"}
	segmentMayImport = []string{"internal/batch", "internal/vfs"}
)

// internal/testpki makes certificates for tests. Only test files import
// it, and it imports no package of the module, so that the tests of
// pkg/client may use it without sharing anything more with the node.
func TestTestPKIOnlyInTests(t *testing.T) {
	const testpki = module + "/internal/testpki"
	for _, p := range listPackages(t) {
		if slices.Contains(p.Imports, testpki) {
			t.Errorf("%s imports internal/testpki outside its tests", p.ImportPath)
		}
		if p.ImportPath == testpki {
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, module+"/") {
					t.Errorf("internal/testpki imports %s: it may import no package of the module", imp)
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

// internal/raft (the multi-raft host) declares the LogStore and Sender it
// needs; the durable log (internal/raft/logstore) and the transport
// (internal/peer) implement them and may import internal/raft for its
// types, so the host imports neither, nor anything above it: only the
// clock.
var raftHostMayImport = []string{"internal/clock"}

func TestRaftHostImports(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.ImportPath != module+"/internal/raft" {
			continue
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") && !slices.Contains(raftHostMayImport, strings.TrimPrefix(imp, module+"/")) {
				t.Errorf("internal/raft imports %s; it may import only %s", imp, strings.Join(raftHostMayImport, ", "))
			}
		}
	}
}

// TestPeerIsBelowTheNode keeps internal/peer a transport that the
// broker, raft and the control plane drive: it may not depend, directly
// or through another package, on any package of the module, so neither
// the broker nor the server can reach it.
func TestPeerIsBelowTheNode(t *testing.T) {
	for _, p := range internalPackages(listPackages(t), "peer") {
		for _, dep := range p.Deps {
			if strings.HasPrefix(dep, module+"/") {
				t.Errorf("internal/peer depends on %s; it may depend on no package of the module", dep)
			}
		}
	}
}

// internal/control (the control plane: metadata groups on the raft host)
// sits below the broker, which drives it: it may import the state
// machines, placement, the host, its log, the transport and the small
// leaf helpers, and nothing above them.
var controlMayImport = []string{"internal/clock", "internal/metadata", "internal/peer", "internal/placement",
	"internal/raft", "internal/raft/logstore", "internal/vfs"}

func TestControlImports(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.ImportPath != module+"/internal/control" {
			continue
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") && !slices.Contains(controlMayImport, strings.TrimPrefix(imp, module+"/")) {
				t.Errorf("internal/control imports %s; it may import only %s", imp, strings.Join(controlMayImport, ", "))
			}
		}
	}
}

// internal/heal (repair and scrub decisions) is pure, and sees the
// cluster only through what it is given: placement for new replicas and
// the batch format for verifying copies. The broker feeds it the
// metadata, membership and storage it reads, so heal imports none of them.
var healMayImport = []string{"internal/placement", "internal/batch"}

func TestHealImports(t *testing.T) {
	for _, p := range internalPackages(listPackages(t), "heal") {
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") && !slices.Contains(healMayImport, strings.TrimPrefix(imp, module+"/")) {
				t.Errorf("internal/heal imports %s; it may import only %s", imp, strings.Join(healMayImport, ", "))
			}
		}
	}
}

// internal/sim runs the broker's state machines over a simulated
// network, disk and clock in one goroutine: it may import the pure
// packages (internal/heal among them), the batch format, the key
// hashing and vfs (for MemFS), and nothing that does real I/O, reads a
// clock or starts goroutines.
var simMayImport = []string{"internal/batch", "internal/heal", "internal/keyspace", "internal/metadata", "internal/placement",
	"internal/replication", "internal/vfs"}

func TestSimImports(t *testing.T) {
	for _, p := range internalPackages(listPackages(t), "sim") {
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") && !slices.Contains(simMayImport, strings.TrimPrefix(imp, module+"/")) {
				t.Errorf("internal/sim imports %s; it may import only %s", imp, strings.Join(simMayImport, ", "))
			}
			if slices.Contains([]string{"time", "net", "os/exec", "sync"}, imp) {
				t.Errorf("internal/sim imports %s: its time, network and order are simulated", imp)
			}
		}
	}
}

// internal/retention (policy resolution and expiry planning) is pure and
// reads only the metadata it is handed: the broker feeds it the segments
// and proposes what it returns.
var retentionMayImport = []string{"internal/metadata"}

func TestRetentionImports(t *testing.T) {
	for _, p := range internalPackages(listPackages(t), "retention") {
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") && !slices.Contains(retentionMayImport, strings.TrimPrefix(imp, module+"/")) {
				t.Errorf("internal/retention imports %s; it may import only %s", imp, strings.Join(retentionMayImport, ", "))
			}
		}
	}
}

// internal/logcat (the log message catalog and its slog handler) wraps
// any handler and knows nothing of the node: it imports no package of
// the module, so that any package may use it.
func TestLogcatImportsNothingOfTheModule(t *testing.T) {
	for _, p := range internalPackages(listPackages(t), "logcat") {
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") {
				t.Errorf("internal/logcat imports %s; it may import no package of the module", imp)
			}
		}
	}
}

// The Prometheus client is the exposition layer's: internal/metrics
// adapts the node's counters and snapshots to it, internal/httpapi serves
// it and cmd wires them. The packages that count (storage, broker,
// server, raft, replication...) keep plain atomic counters and
// internal/metrics/hist histograms, so they never pay for, or depend on,
// the exposition format. internal/top reads the format (see
// TestTopReadsOnlyScrapes).
var prometheusMayImport = []string{"/internal/metrics", "/internal/httpapi", "/cmd/", "/internal/top"}

func TestPrometheusOnlyAtTheEdge(t *testing.T) {
	for _, p := range listPackages(t) {
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "github.com/prometheus/") && !hasAny(p.ImportPath, prometheusMayImport) {
				t.Errorf("%s imports %s; only internal/metrics, internal/httpapi, internal/top and cmd may", p.ImportPath, imp)
			}
		}
		// hist is what the counting packages import: it must not bring
		// the client (or anything of the module) with it.
		if p.ImportPath == module+"/internal/metrics/hist" {
			for _, dep := range p.Deps {
				if strings.HasPrefix(dep, module+"/") || strings.HasPrefix(dep, "github.com/") {
					t.Errorf("internal/metrics/hist depends on %s; it may depend on the standard library only", dep)
				}
			}
		}
	}
}

// internal/dashboard is a client of its node: everything it shows or
// changes goes through pkg/client under the user's session, so the node's
// permissions apply. It imports no other package of the module.
func TestDashboardIsAClient(t *testing.T) {
	for _, p := range internalPackages(listPackages(t), "dashboard") {
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") && imp != module+"/pkg/client" {
				t.Errorf("internal/dashboard imports %s; it may import only pkg/client of the module", imp)
			}
		}
	}
}

// internal/top (the view of `malachi top`) works from the text of
// /metrics pages its caller scraped: it parses the exposition format
// and never the client that serves it, imports no package of the
// module (it knows the node only by its series' names) and does no I/O.
var topForbidden = []string{"os", "os/exec", "net", "net/http"}

func TestTopReadsOnlyScrapes(t *testing.T) {
	for _, p := range internalPackages(listPackages(t), "top") {
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") || slices.Contains(topForbidden, imp) ||
				strings.HasPrefix(imp, "github.com/prometheus/client_golang") {
				t.Errorf("internal/top imports %s; it reads scrapes given to it and may import no package of the module, no I/O and no Prometheus client", imp)
			}
		}
	}
}

// internal/segfile reads segment files nothing vouches for (a node's
// quarantine, a damaged disk) for `malachi segment`: it reads only the
// io.ReaderAt it is given and knows the format through internal/batch and
// internal/storage/segment alone, so that tests can feed it any bytes and
// it never reaches into a node.
var segfileMayImport = []string{"internal/batch", "internal/storage/segment"}

// segfileMayNotImport are the standard library's ways to reach the
// system, each with the packages under it.
var segfileMayNotImport = []string{"os", "net", "syscall", "io/ioutil"}

func TestSegfileReadsWhatItIsGiven(t *testing.T) {
	system := func(imp string) bool {
		return slices.ContainsFunc(segfileMayNotImport, func(p string) bool { return imp == p || strings.HasPrefix(imp, p+"/") })
	}
	for _, p := range internalPackages(listPackages(t), "segfile") {
		for _, imp := range p.Imports {
			if system(imp) || (strings.HasPrefix(imp, module+"/") && !slices.Contains(segfileMayImport, strings.TrimPrefix(imp, module+"/"))) {
				t.Errorf("internal/segfile imports %s; it may import only %s of the module, and none of %s", imp, strings.Join(segfileMayImport, ", "), strings.Join(segfileMayNotImport, ", "))
			}
		}
	}
}
