package broker_test

// Traces across nodes: one produce through a node that does not write the
// range is one trace, with the forwarding node's spans, the primary's and
// both followers', each under the span that caused it, exported by the
// real OTLP/HTTP exporter of each node to an in-process receiver.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/tracing"
	"github.com/malachi-log/malachi/internal/tracing/tracingtest"
	"github.com/malachi-log/malachi/pkg/client"
	"go.opentelemetry.io/otel/trace"
)

func TestClusterProduceIsOneTraceAcrossNodes(t *testing.T) {
	recv := tracingtest.NewReceiver(t)
	var tracers []*tracing.Tracer
	tc := startClusterConfigured(t, 3, func(cfg *broker.Config) {
		tr, err := tracing.New(tracing.Config{Endpoint: recv.Endpoint(), Sample: 1, Node: fmt.Sprintf("node-%d", cfg.Cluster.NodeID)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.ShutdownWithin(5 * time.Second) })
		cfg.Tracer = tr
		tracers = append(tracers, tr)
	})
	flush := func() {
		for _, tr := range tracers {
			if err := tr.ForceFlush(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx := t.Context()
	tc.createEverywhere(tc.nodes[0], "traced", 1)
	// The first produce opens the range's segment, three replicas led by
	// the node it went through.
	if _, err := tc.nodes[0].b.Produce(ctx, "traced", []broker.Record{rec("k", "0")}); err != nil {
		t.Fatal(err)
	}
	d, err := tc.nodes[0].b.DescribeTopic("traced")
	if err != nil {
		t.Fatal(err)
	}
	segs := d.Ranges[0].Segments
	if len(segs) != 1 || len(segs[0].Replicas) != 3 {
		t.Fatalf("segments %+v, want one on three nodes", segs)
	}
	primary := segs[0].Replicas[0]
	var via *clusterNode
	for _, nd := range tc.nodes {
		if fmt.Sprintf("node-%d", nd.id) != primary {
			via = nd
			break
		}
	}
	viaName := fmt.Sprintf("node-%d", via.id)
	followers := slices.DeleteFunc(slices.Clone(segs[0].Replicas), func(n string) bool { return n == primary })

	t.Run("client produce (wire v2)", func(t *testing.T) {
		flush()
		recv.Reset()
		c := tc.client(via, "admin", "admin123")
		if _, err := c.Produce(ctx, "traced", client.Record{Key: []byte("k"), Value: []byte("1")}); err != nil {
			t.Fatal(err)
		}
		checkForwardedTrace(t, recv, flush, tracing.SpanProduce, viaName, primary, followers)
	})
	t.Run("broker produce", func(t *testing.T) {
		flush()
		recv.Reset()
		// The broker continues the trace of the request that called it.
		rctx, request := tracers[via.id-1].Begin(ctx, "test.request", trace.SpanKindServer)
		if _, err := via.b.Produce(rctx, "traced", []broker.Record{rec("k", "2")}); err != nil {
			t.Fatal(err)
		}
		request.End()
		tr := checkForwardedTrace(t, recv, flush, "test.request", viaName, primary, followers)
		if bp := tr.one(t, tracing.SpanBrokerProduce, viaName); bp.ParentID != request.SpanContext().SpanID().String() {
			t.Errorf("the broker's produce hangs from %q, not the request", bp.ParentID)
		}
		route := tr.one(t, tracing.SpanRoute, viaName)
		if route.Attrs["malachi.forwarded"] != "true" || route.Attrs["malachi.range"] == "" {
			t.Errorf("route span %+v: want the range and the forward", route)
		}
	})
	t.Run("produces queued behind a busy forward", func(t *testing.T) {
		flush()
		recv.Reset()
		// Produces at once through via: those that find the range's
		// forward queue busy join it, and their route names the primary
		// all the same.
		const n = 32
		errs := make(chan error, n)
		for i := range n {
			go func() {
				rctx, request := tracers[via.id-1].Begin(ctx, "test.request", trace.SpanKindServer)
				_, err := via.b.Produce(rctx, "traced", []broker.Record{rec("k", fmt.Sprint(i))})
				request.End()
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		flush()
		routes := 0
		for _, s := range recv.Spans() {
			if s.Name != tracing.SpanRoute || s.Node != viaName {
				continue
			}
			routes++
			if s.Attrs["malachi.peer"] != strings.TrimPrefix(primary, "node-") {
				t.Errorf("route span names peer %q, want the primary %s: %v", s.Attrs["malachi.peer"], primary, s.Attrs)
			}
		}
		if routes != n {
			t.Errorf("%d route spans for %d produces", routes, n)
		}
	})
}

// spanTrace is the spans of one trace.
type spanTrace struct {
	spans []tracingtest.Span
	byID  map[string]tracingtest.Span
}

func (tr spanTrace) find(name, node string) []tracingtest.Span {
	var out []tracingtest.Span
	for _, s := range tr.spans {
		if s.Name == name && s.Node == node {
			out = append(out, s)
		}
	}
	return out
}

func (tr spanTrace) one(t *testing.T, name, node string) tracingtest.Span {
	t.Helper()
	got := tr.find(name, node)
	if len(got) != 1 {
		t.Fatalf("%d %s spans on %s, want 1", len(got), name, node)
	}
	return got[0]
}

// descends reports whether s is under ancestor.
func (tr spanTrace) descends(s tracingtest.Span, ancestor string) bool {
	for i := 0; i < len(tr.spans) && s.ParentID != ""; i++ {
		if s.ParentID == ancestor {
			return true
		}
		s = tr.byID[s.ParentID]
	}
	return false
}

// checkForwardedTrace waits for the trace whose root is a rootName span
// on via, and checks it: the forward on via, the append on the primary
// under the forward, the replicate and commit under the append, and each
// follower's append under the replicate; every span of the trace hangs
// from another of it but the root.
func checkForwardedTrace(t *testing.T, recv *tracingtest.Receiver, flush func(), rootName, via, primary string, followers []string) spanTrace {
	t.Helper()
	var tr spanTrace
	eventually(t, 30*time.Second, "the produce's trace from every node", func() error {
		flush()
		tr = spanTrace{byID: map[string]tracingtest.Span{}}
		var root *tracingtest.Span
		spans := recv.Spans()
		for i, s := range spans {
			if s.Name == rootName && s.Node == via && s.ParentID == "" {
				if root != nil {
					return fmt.Errorf("two %s roots on %s", rootName, via)
				}
				root = &spans[i]
			}
		}
		if root == nil {
			return fmt.Errorf("no %s root on %s among %d spans", rootName, via, len(spans))
		}
		for _, s := range spans {
			if s.TraceID == root.TraceID {
				tr.spans = append(tr.spans, s)
				tr.byID[s.SpanID] = s
			}
		}
		want := []struct{ name, node string }{{tracing.SpanForward, via}, {tracing.SpanAppend, primary},
			{tracing.SpanReplicate, primary}, {tracing.SpanCommit, primary}}
		for _, f := range followers {
			want = append(want, struct{ name, node string }{tracing.SpanFollow, f})
		}
		for _, w := range want {
			if len(tr.find(w.name, w.node)) == 0 {
				return fmt.Errorf("no %s span from %s yet", w.name, w.node)
			}
		}
		return nil
	})
	defer func() {
		if t.Failed() {
			for _, s := range tr.spans {
				t.Logf("%s %-28s %s parent %-16s %v", s.Node, s.Name, s.SpanID, s.ParentID, s.Attrs)
			}
		}
	}()
	root := tr.find(rootName, via)[0]
	for _, s := range tr.spans {
		if s.SpanID != root.SpanID && !tr.descends(s, root.SpanID) {
			t.Errorf("%s on %s does not hang from the root: parent %q", s.Name, s.Node, s.ParentID)
		}
		if s.Error {
			t.Errorf("%s on %s recorded an error", s.Name, s.Node)
		}
	}
	fwd := tr.one(t, tracing.SpanForward, via)
	app := tr.one(t, tracing.SpanAppend, primary)
	if app.ParentID != fwd.SpanID {
		t.Errorf("the primary's append hangs from %q, not the forward %q", app.ParentID, fwd.SpanID)
	}
	rep := tr.one(t, tracing.SpanReplicate, primary)
	commit := tr.one(t, tracing.SpanCommit, primary)
	if !tr.descends(rep, app.SpanID) || !tr.descends(commit, app.SpanID) {
		t.Errorf("replicate (parent %q) and commit (parent %q) are not under the append %q", rep.ParentID, commit.ParentID, app.SpanID)
	}
	for _, f := range followers {
		for _, s := range tr.find(tracing.SpanFollow, f) {
			if s.ParentID != rep.SpanID {
				t.Errorf("%s's replication append hangs from %q, not the replicate %q", f, s.ParentID, rep.SpanID)
			}
		}
	}
	nodes := map[string]bool{}
	for _, s := range tr.spans {
		nodes[s.Node] = true
	}
	if len(nodes) != 3 {
		t.Errorf("the trace has spans from %d nodes, want 3: %v", len(nodes), nodes)
	}
	return tr
}
