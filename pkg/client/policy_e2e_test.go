package client_test

// End-to-end tests of storage policies, skip reports and record TTLs
// against a real in-process node.

import (
	"errors"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

func effective(t *testing.T, tp client.TopicPolicy, name string) client.EffectiveField {
	t.Helper()
	for _, f := range tp.Effective {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("%s: no effective field %q", tp.Topic, name)
	return client.EffectiveField{}
}

func topicPolicy(t *testing.T, c *client.Client, topic string) client.TopicPolicy {
	t.Helper()
	tp, err := c.TopicPolicy(t.Context(), topic)
	if err != nil {
		t.Fatalf("topic policy of %s: %v", topic, err)
	}
	return tp
}

// Define, list, bind, get, unbind and delete; off, 0 and a field left out
// come back as three different things.
func TestPolicyLifecycle(t *testing.T) {
	_, c := start(t)
	ctx := t.Context()
	createTopic(t, c, "orders")
	fields := map[string]client.PolicyValue{
		client.PolicyMaxAge:     client.PolicyDuration(0),
		client.PolicyMaxBytes:   client.PolicyOff(),
		client.PolicySpreadBy:   client.PolicyString("zone"),
		client.PolicyReplicas:   client.PolicyInt(2),
		"retention.max_records": client.PolicyInt(1000),
	}
	if err := c.DefinePolicy(ctx, "short", fields); err != nil {
		t.Fatal(err)
	}
	ps, err := c.ListPolicies(ctx)
	if err != nil || len(ps) != 1 || ps[0].Name != "short" || ps[0].DefinedAt.IsZero() {
		t.Fatalf("list %+v, %v", ps, err)
	}
	got := ps[0].Fields
	if n, ok := got[client.PolicyMaxAge].Int(); !ok || n != 0 {
		t.Errorf("max_age_ms %v, want the bound 0", got[client.PolicyMaxAge])
	}
	if !got[client.PolicyMaxBytes].IsOff() {
		t.Errorf("max_bytes %v, want off", got[client.PolicyMaxBytes])
	}
	if s, ok := got[client.PolicySpreadBy].Str(); !ok || s != "zone" {
		t.Errorf("spread_by %v", got[client.PolicySpreadBy])
	}
	if n, _ := got[client.PolicyMaxRecords].Int(); n != 1000 {
		t.Errorf("the alias was not stored as max_records: %v", got)
	}
	if _, set := got[client.PolicyDefaultTTL]; set || len(got) != 5 {
		t.Errorf("fields %v: default_ttl_ms was never set", got)
	}

	if tp := topicPolicy(t, c, "orders"); tp.Policy != "" || tp.Resolution != "none" {
		t.Fatalf("unbound %+v", tp)
	}
	if err := c.BindPolicy(ctx, "orders", "short"); err != nil {
		t.Fatal(err)
	}
	tp := topicPolicy(t, c, "orders")
	if tp.Policy != "short" || tp.Resolution != "resolved" || len(tp.Definition) != 5 {
		t.Fatalf("bound %+v", tp)
	}
	if f := effective(t, tp, client.PolicyMaxAge); f.Origin != "policy" || f.Value.String() != "0" {
		t.Errorf("max_age_ms %+v", f)
	}
	if f := effective(t, tp, client.PolicyMaxBytes); f.Origin != "policy" || !f.Value.IsOff() {
		t.Errorf("max_bytes %+v", f)
	}
	if f := effective(t, tp, client.PolicyDefaultTTL); f.Origin != "global" {
		t.Errorf("default_ttl_ms %+v: inherited", f)
	}

	if err := c.DeletePolicy(ctx, "short", false); !errors.Is(err, client.ErrPolicyInUse) {
		t.Fatalf("delete of a bound policy: %v", err)
	}
	if err := c.UnbindPolicy(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if tp := topicPolicy(t, c, "orders"); tp.Policy != "" || effective(t, tp, client.PolicyMaxAge).Origin != "global" {
		t.Fatalf("unbound again %+v", tp)
	}
	if err := c.DeletePolicy(ctx, "short", false); err != nil {
		t.Fatal(err)
	}
	if err := c.DeletePolicy(ctx, "short", false); !errors.Is(err, client.ErrNoSuchPolicy) {
		t.Fatalf("second delete: %v", err)
	}
}

// A forced delete leaves the topic bound to a name that resolves to
// nothing: its retention fields are off.
func TestPolicyForcedDelete(t *testing.T) {
	_, c := start(t)
	ctx := t.Context()
	if err := c.DefinePolicy(ctx, "p", map[string]client.PolicyValue{client.PolicyMaxRecords: client.PolicyInt(10)}); err != nil {
		t.Fatal(err)
	}
	createTopic(t, c, "t", client.WithPolicy("p"))
	if tp := topicPolicy(t, c, "t"); tp.Policy != "p" || tp.Resolution != "resolved" {
		t.Fatalf("created with a policy: %+v", tp)
	}
	if err := c.CreateTopic(ctx, "u", client.WithPolicy("nope")); !errors.Is(err, client.ErrNoSuchPolicy) {
		t.Fatalf("create with an undefined policy: %v", err)
	}
	if err := c.BindPolicy(ctx, "t", "nope"); !errors.Is(err, client.ErrNoSuchPolicy) {
		t.Fatalf("bind to an undefined policy: %v", err)
	}
	if err := c.DeletePolicy(ctx, "p", true); err != nil {
		t.Fatal(err)
	}
	tp := topicPolicy(t, c, "t")
	if tp.Policy != "p" || tp.Resolution != "unresolved" || len(tp.Definition) != 0 {
		t.Fatalf("after a forced delete %+v", tp)
	}
	if f := effective(t, tp, client.PolicyMaxRecords); !f.Value.IsOff() || f.Origin != "unresolved" {
		t.Fatalf("max_records %+v", f)
	}
}

// Invalid definitions are refused with ErrInvalidPolicy, and none is
// stored.
func TestPolicyInvalidRefused(t *testing.T) {
	_, c := start(t)
	ctx := t.Context()
	for _, fs := range []map[string]client.PolicyValue{
		{"max_wisdom": client.PolicyInt(1)},
		{client.PolicyMaxBytes: client.PolicyInt(-1)},
		{client.PolicyMaxBytes: client.PolicyString("lots")},
		{client.PolicyReplicas: client.PolicyOff()},
		{client.PolicyPlacement: client.PolicyString("nowhere")},
		{client.PolicySegmentMaxAge: client.PolicyDuration(time.Millisecond)},
		{client.PolicyMaxAge: client.PolicyInt(1), "retention.max_age_ms": client.PolicyInt(2)},
	} {
		if err := c.DefinePolicy(ctx, "bad", fs); !errors.Is(err, client.ErrInvalidPolicy) {
			t.Errorf("define %v: %v, want invalid_policy", fs, err)
		}
	}
	if ps, err := c.ListPolicies(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("list %+v, %v", ps, err)
	}
}

// The policy calls are an admin's.
func TestPolicyNeedsAdmin(t *testing.T) {
	n, c := start(t)
	createTopic(t, c, "t")
	user := n.Client(t, "consumer", "consumer123")
	if err := user.DefinePolicy(t.Context(), "p", nil); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("define as a consumer: %v", err)
	}
	if _, err := user.TopicPolicy(t.Context(), "t"); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("get as a consumer: %v", err)
	}
	if ps, err := c.ListPolicies(t.Context()); err != nil || len(ps) != 0 {
		t.Fatalf("list %+v, %v", ps, err)
	}
}

// Fetches and group descriptions ask for skips; with nothing deleted
// there are none, and the records come as before.
func TestSkipsAskedAndNoneReported(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "t")
	produce(t, c, "t", keyed(5)...)
	page, err := c.FetchBatches(t.Context(), "t", client.FetchOptions{})
	if err != nil || page.Len() != 5 || page.Skipped != 0 || page.SkippedBound {
		t.Fatalf("page of %d records, skipped %d bound %v: %v", page.Len(), page.Skipped, page.SkippedBound, err)
	}
	f := c.NewFetcher("t", client.FetchOptions{})
	defer f.Close()
	fp, err := f.Next(t.Context())
	if err != nil || fp.Len() != 5 || fp.Skipped != 0 {
		t.Fatalf("fetcher page of %d, skipped %d: %v", fp.Len(), fp.Skipped, err)
	}
	if err := c.Commit(t.Context(), "t", client.CommitOptions{Group: "g", Cursor: page.Cursor}); err != nil {
		t.Fatal(err)
	}
	g, err := c.DescribeGroup(t.Context(), "t", "g")
	if err != nil || g.Cursor == "" || g.Skipped != 0 || g.SkippedBound {
		t.Fatalf("group %+v, %v", g, err)
	}
}

// WithTTL sends the TTL header in decimal milliseconds, rounded up.
func TestRecordTTLHeader(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "t")
	rec := client.NewRecord([]byte("k"), []byte("v"), client.WithTTL(90*time.Second+time.Microsecond))
	before := time.Now().Truncate(time.Millisecond)
	produce(t, c, "t", rec)
	recs, _ := fetchN(t, c, "t", "", 1)
	var ttl string
	for _, h := range recs[0].Headers {
		if h.Key == client.TTLHeader {
			ttl = string(h.Value)
		}
	}
	if ttl != "90001" {
		t.Fatalf("headers %+v: TTL header %q, want 90001", recs[0].Headers, ttl)
	}
	// The node stamps the expiry from its clock when it takes the record:
	// between the produce and the fetch, plus the TTL.
	if exp := recs[0].Expiry; exp.Before(before.Add(90*time.Second)) || exp.After(time.Now().Add(91*time.Second)) {
		t.Fatalf("expiry %v, want 90 s after a moment between %v and now", exp, before)
	}
	rec.SetTTL(0)
	if len(rec.Headers) != 0 {
		t.Fatalf("SetTTL(0) left %+v", rec.Headers)
	}
}
