package lint

import (
	"strings"
	"testing"
)

// internal/tracing is used by every layer on the request paths (peer,
// replica, broker, server): it imports no package of the module, so that
// none of them gains a dependency through it. Its test receiver,
// internal/tracing/tracingtest, is for tests only.
func TestTracingIsALeaf(t *testing.T) {
	const receiver = module + "/internal/tracing/tracingtest"
	for _, p := range listPackages(t) {
		if p.ImportPath == module+"/internal/tracing" {
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, module+"/") {
					t.Errorf("internal/tracing imports %s: it may import no package of the module", imp)
				}
			}
		}
		for _, imp := range p.Imports {
			if imp == receiver {
				t.Errorf("%s imports internal/tracing/tracingtest outside its tests", p.ImportPath)
			}
		}
	}
}
