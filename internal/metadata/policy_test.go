package metadata

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

func pv(n int64) PolicyValue   { return PolicyValue{Int: n} }
func pvs(s string) PolicyValue { return PolicyValue{Str: s, IsStr: true} }
func pfields(kv ...any) map[string]PolicyValue {
	m := make(map[string]PolicyValue)
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1].(PolicyValue)
	}
	return m
}

var off = PolicyValue{Off: true}

// TestValidatePolicyRefuses: every malformed definition is invalid_policy,
// and define_policy with it changes nothing.
func TestValidatePolicyRefuses(t *testing.T) {
	tooMany := make(map[string]PolicyValue)
	for i := range MaxPolicyFields + 1 {
		tooMany[fmt.Sprintf("f%d", i)] = pv(1)
	}
	cases := map[string]map[string]PolicyValue{
		"unknown name":           pfields("max_age", pv(1)),
		"unknown alias":          pfields("retention.replicas", pv(1)),
		"alias and canonical":    pfields("max_age_ms", pv(1), "retention.max_age_ms", pv(2)),
		"negative":               pfields(FieldMaxBytes, pv(-1)),
		"string for int":         pfields(FieldMaxRecords, pvs("5")),
		"int for string":         pfields(FieldSpreadBy, pv(3)),
		"off and a value":        pfields(FieldMaxAge, PolicyValue{Off: true, Int: 5}),
		"small segment bytes":    pfields(FieldSegmentMaxBytes, pv(MinSegmentMaxBytes-1)),
		"short segment age":      pfields(FieldSegmentMaxAge, pv(MinSegmentMaxAgeMs-1)),
		"zero ttl":               pfields(FieldDefaultTTL, pv(0)),
		"zero replicas":          pfields(FieldReplicas, pv(0)),
		"too many replicas":      pfields(FieldReplicas, pv(MaxReplicas+1)),
		"replicas off":           pfields(FieldReplicas, off),
		"min domains off":        pfields(FieldMinDomains, off),
		"min domains 17":         pfields(FieldMinDomains, pv(17)),
		"placement off":          pfields(FieldPlacement, off),
		"placement other":        pfields(FieldPlacement, pvs("strict")),
		"spread_by empty":        pfields(FieldSpreadBy, PolicyValue{IsStr: true}),
		"spread_by too long":     pfields(FieldSpreadBy, pvs(strings.Repeat("r", MaxSpreadByLen+1))),
		"str without the flag":   pfields(FieldPlacement, PolicyValue{Str: "hard"}),
		"more than 32 fields":    tooMany,
		"string with an integer": pfields(FieldPlacement, PolicyValue{Str: "hard", IsStr: true, Int: 1}),
	}
	st := New()
	apply(t, st, Command{Kind: KindDefinePolicy, Policy: "keep", PolicyFields: pfields(FieldMaxAge, pv(9))})
	for name, fs := range cases {
		if _, err := ValidatePolicy(fs); err != ErrInvalidPolicy {
			t.Errorf("%s: ValidatePolicy = %v, want invalid_policy", name, err)
		}
		before := mustSnapshot(t, st)
		wantErr(t, apply(t, st, Command{Kind: KindDefinePolicy, Policy: "keep", PolicyFields: fs}), ErrInvalidPolicy)
		if !bytes.Equal(before, mustSnapshot(t, st)) {
			t.Errorf("%s: a refused define_policy changed the state", name)
		}
	}
	for _, name := range []string{"", strings.Repeat("p", MaxNameLen+1)} {
		wantErr(t, apply(t, st, Command{Kind: KindDefinePolicy, Policy: name}), ErrInvalidPolicy)
	}
}

// TestValidatePolicyCanonical: aliases are stored under their canonical
// names, 0 and OFF stay distinct, and every field's limits are accepted.
func TestValidatePolicyCanonical(t *testing.T) {
	in := pfields("retention.max_age_ms", pv(0), "retention.max_bytes", off,
		"retention.max_records", pv(7), "retention.segment_max_age_ms", pv(MinSegmentMaxAgeMs),
		"retention.segment_max_bytes", pv(MinSegmentMaxBytes), FieldDefaultTTL, pv(1),
		FieldReplicas, pv(MaxReplicas), FieldMinDomains, pv(1), FieldSpreadBy, off, FieldPlacement, pvs("soft"))
	got, err := ValidatePolicy(in)
	if err != nil {
		t.Fatal(err)
	}
	want := pfields(FieldMaxAge, pv(0), FieldMaxBytes, off, FieldMaxRecords, pv(7),
		FieldSegmentMaxAge, pv(MinSegmentMaxAgeMs), FieldSegmentMaxBytes, pv(MinSegmentMaxBytes),
		FieldDefaultTTL, pv(1), FieldReplicas, pv(MaxReplicas), FieldMinDomains, pv(1),
		FieldSpreadBy, off, FieldPlacement, pvs("soft"))
	if !maps.Equal(got, want) {
		t.Fatalf("canonical = %v\nwant %v", got, want)
	}
	if got[FieldMaxAge] == got[FieldMaxBytes] {
		t.Fatal("a bound of 0 and OFF must differ")
	}
}

func TestDefineRedefineDeletePolicy(t *testing.T) {
	st := New()
	res := apply(t, st, Command{Kind: KindDefinePolicy, Policy: "short", Now: 10,
		PolicyFields: pfields("retention.max_age_ms", pv(60_000))})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	p, ok := st.Policy("short")
	if !ok || p.DefinedAt != 10 || !maps.Equal(p.Fields, pfields(FieldMaxAge, pv(60_000))) {
		t.Fatalf("Policy(short) = %+v, %v", p, ok)
	}
	p.Fields[FieldMaxBytes] = pv(1) // a copy: the state must not see it
	apply(t, st, Command{Kind: KindDefinePolicy, Policy: "short", Now: 20, PolicyFields: pfields(FieldMaxRecords, off)})
	apply(t, st, Command{Kind: KindDefinePolicy, Policy: "a-first", Now: 30})
	ps := st.Policies()
	if len(ps) != 2 || ps[0].Name != "a-first" || ps[1].Name != "short" || ps[1].DefinedAt != 20 ||
		!maps.Equal(ps[1].Fields, pfields(FieldMaxRecords, off)) || len(ps[0].Fields) != 0 {
		t.Fatalf("Policies() = %+v", ps)
	}
	wantErr(t, apply(t, st, Command{Kind: KindDeletePolicy, Policy: "nope"}), ErrNoSuchPolicy)
	if res := apply(t, st, Command{Kind: KindDeletePolicy, Policy: "short"}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if _, ok := st.Policy("short"); ok {
		t.Fatal("deleted policy still there")
	}
	wantErr(t, apply(t, st, Command{Kind: KindDeletePolicy, Policy: "short"}), ErrNoSuchPolicy)
}

// TestBoundPolicyRefusedDeletion: in a state holding topics, a policy a
// topic is bound to is only deleted with Force; binding and unbinding
// move it in and out of TopicsBoundTo.
func TestBoundPolicyRefusedDeletion(t *testing.T) {
	st := New()
	apply(t, st, Command{Kind: KindDefinePolicy, Policy: "p"})
	apply(t, st, Command{Kind: KindCreateTopic, Topic: "b", Policy: "p"})
	apply(t, st, Command{Kind: KindCreateTopic, Topic: "a"})
	if tp, _ := st.Topic("b"); tp.Policy != "p" {
		t.Fatalf("create_topic kept policy %q", tp.Policy)
	}
	wantErr(t, apply(t, st, Command{Kind: KindBindTopicPolicy, Topic: "nope", Policy: "p"}), ErrNoSuchTopic)
	wantErr(t, apply(t, st, Command{Kind: KindBindTopicPolicy, Topic: "a", Policy: strings.Repeat("x", 256)}), ErrInvalidPolicy)
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: "c", Policy: strings.Repeat("x", 256)}), ErrInvalidPolicy)
	apply(t, st, Command{Kind: KindBindTopicPolicy, Topic: "a", Policy: "p"})
	if got := st.TopicsBoundTo("p"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("TopicsBoundTo = %v", got)
	}
	wantErr(t, apply(t, st, Command{Kind: KindDeletePolicy, Policy: "p"}), ErrPolicyInUse)
	apply(t, st, Command{Kind: KindBindTopicPolicy, Topic: "a"})
	apply(t, st, Command{Kind: KindDeleteTopic, Topic: "b"})
	if got := st.TopicsBoundTo("p"); len(got) != 0 {
		t.Fatalf("after unbind and delete: TopicsBoundTo = %v", got)
	}
	apply(t, st, Command{Kind: KindBindTopicPolicy, Topic: "a", Policy: "p"})
	wantErr(t, apply(t, st, Command{Kind: KindDeletePolicy, Policy: "p"}), ErrPolicyInUse)
	if res := apply(t, st, Command{Kind: KindDeletePolicy, Policy: "p", Force: true}); res.Err != nil {
		t.Fatal(res.Err)
	}
	// The binding outlives the policy: the topic names an undefined policy.
	if tp, _ := st.Topic("a"); tp.Policy != "p" {
		t.Fatalf("forced delete changed the binding to %q", tp.Policy)
	}
	// A binding need not name a defined policy (the root holds them).
	if res := apply(t, st, Command{Kind: KindBindTopicPolicy, Topic: "a", Policy: "later"}); res.Err != nil {
		t.Fatal(res.Err)
	}
}

func TestPolicyTableBound(t *testing.T) {
	st := New()
	for i := range MaxPolicies {
		if res := st.Apply(Command{V: Version, Kind: KindDefinePolicy, Policy: fmt.Sprintf("p%d", i)}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	before := mustSnapshot(t, st)
	wantErr(t, st.Apply(Command{V: Version, Kind: KindDefinePolicy, Policy: "one-more"}), ErrTooManyPolicies)
	if !bytes.Equal(before, mustSnapshot(t, st)) {
		t.Fatal("refused define changed the state")
	}
	// Redefining an existing one is still allowed at the cap.
	if res := st.Apply(Command{V: Version, Kind: KindDefinePolicy, Policy: "p7", PolicyFields: pfields(FieldMaxAge, off)}); res.Err != nil {
		t.Fatal(res.Err)
	}
	apply(t, st, Command{Kind: KindDeletePolicy, Policy: "p0"})
	if res := apply(t, st, Command{Kind: KindDefinePolicy, Policy: "one-more"}); res.Err != nil {
		t.Fatal(res.Err)
	}
}

// TestPoliciesSurviveSnapshot: policies and bindings round-trip, and a
// snapshot holding an invalid or uncanonical policy is refused.
func TestPoliciesSurviveSnapshot(t *testing.T) {
	st := New()
	apply(t, st, Command{Kind: KindDefinePolicy, Policy: "p", Now: 5,
		PolicyFields: pfields(FieldMaxAge, pv(1000), FieldSpreadBy, pvs("rack"), FieldMaxBytes, off)})
	apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Policy: "p"})
	b := mustSnapshot(t, st)
	r, err := Restore(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, mustSnapshot(t, r)) {
		t.Fatal("snapshot of the restored state differs")
	}
	if p, ok := r.Policy("p"); !ok || p.DefinedAt != 5 || len(p.Fields) != 3 || !slices.Equal(r.TopicsBoundTo("p"), []string{"t"}) {
		t.Fatalf("restored policy %+v %v", p, ok)
	}
	for name, edit := range map[string][2]string{
		"invalid value": {`"max_age_ms":{"int":1000}`, `"max_age_ms":{"int":-1}`},
		"alias stored":  {`"max_age_ms":{"int":1000}`, `"retention.max_age_ms":{"int":1000}`},
		"empty name":    {`"name":"p"`, `"name":""`},
	} {
		bad := strings.Replace(string(b), edit[0], edit[1], 1)
		if bad == string(b) {
			t.Fatalf("%s: the edit did not apply", name)
		}
		if _, err := Restore([]byte(bad)); err == nil {
			t.Errorf("%s: Restore accepted it", name)
		}
	}
}
