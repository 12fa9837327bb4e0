package retention_test

import (
	"slices"
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/retention"
)

func bound(n int64) metadata.PolicyValue { return metadata.PolicyValue{Int: n} }
func text(s string) metadata.PolicyValue { return metadata.PolicyValue{Str: s, IsStr: true} }
func off() metadata.PolicyValue          { return metadata.PolicyValue{Off: true} }
func nodeDefaults() retention.Defaults {
	return retention.Defaults{
		retention.FieldMaxAge:          bound(7 * 24 * 3600 * 1000),
		retention.FieldMaxBytes:        off(),
		retention.FieldMaxRecords:      off(),
		retention.FieldSegmentMaxBytes: bound(64 << 20),
		retention.FieldSegmentMaxAge:   bound(3600 * 1000),
		retention.FieldDefaultTTL:      off(),
		retention.FieldReplicas:        bound(3),
		retention.FieldMinDomains:      bound(1),
		retention.FieldSpreadBy:        text("zone"),
		retention.FieldPlacement:       text("soft"),
	}
}

func TestResolveOrigins(t *testing.T) {
	pol := &metadata.Policy{Name: "short", Fields: map[string]metadata.PolicyValue{
		retention.FieldMaxAge:   bound(60_000),
		retention.FieldSpreadBy: off(),
	}}
	cases := []struct {
		name       string
		bound      string
		p          *metadata.Policy
		resolution string
		origins    map[string]string // fields not listed are global
		maxAge     int64
		maxAgeOn   bool
	}{
		{"unbound", "", nil, retention.ResolutionNone, nil, 7 * 24 * 3600 * 1000, true},
		{"unbound ignores a policy", "", pol, retention.ResolutionNone, nil, 7 * 24 * 3600 * 1000, true},
		{"resolved", "short", pol, retention.ResolutionResolved,
			map[string]string{retention.FieldMaxAge: retention.OriginPolicy, retention.FieldSpreadBy: retention.OriginPolicy}, 60_000, true},
		{"unresolved", "gone", nil, retention.ResolutionUnresolved,
			map[string]string{
				retention.FieldMaxAge: retention.OriginUnresolved, retention.FieldMaxBytes: retention.OriginUnresolved,
				retention.FieldMaxRecords: retention.OriginUnresolved,
			}, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eff := retention.Resolve(nodeDefaults(), c.bound, c.p)
			if eff.Resolution != c.resolution {
				t.Fatalf("resolution %q, want %q", eff.Resolution, c.resolution)
			}
			for _, nf := range eff.Ordered() {
				want := retention.OriginGlobal
				if o, ok := c.origins[nf.Name]; ok {
					want = o
				}
				if nf.Origin != want {
					t.Errorf("%s: origin %q, want %q", nf.Name, nf.Origin, want)
				}
			}
			if ms, on := eff.MaxAgeMs(); ms != c.maxAge || on != c.maxAgeOn {
				t.Errorf("max age %d/%v, want %d/%v", ms, on, c.maxAge, c.maxAgeOn)
			}
		})
	}
}

// An unresolved binding expires nothing but keeps every other default.
func TestUnresolvedKeepsNonRetentionDefaults(t *testing.T) {
	eff := retention.Resolve(nodeDefaults(), "gone", nil)
	if r, ok := eff.Replicas(); !ok || r != 3 {
		t.Fatalf("replicas %d/%v, want 3", r, ok)
	}
	if s, ok := eff.SpreadBy(); !ok || s != "zone" {
		t.Fatalf("spread_by %q/%v, want zone", s, ok)
	}
	segs := []metadata.Segment{{ID: 1, Bytes: 1 << 40, Records: 1 << 40, SealedAt: 1}, {ID: 2, Active: true}}
	if got := retention.Expired(eff, 1<<60, segs); len(got) != 0 {
		t.Fatalf("unresolved binding expired %v", got)
	}
}

// Absent (inherit), off and 0 are three distinct results.
func TestOffZeroAndInheritDiffer(t *testing.T) {
	def := nodeDefaults()
	def[retention.FieldMaxBytes] = bound(1000)
	results := map[string]retention.Field{}
	for name, fields := range map[string]map[string]metadata.PolicyValue{
		"inherit": {},
		"off":     {retention.FieldMaxBytes: off()},
		"zero":    {retention.FieldMaxBytes: bound(0)},
	} {
		eff := retention.Resolve(def, "p", &metadata.Policy{Name: "p", Fields: fields})
		results[name] = eff.Field(retention.FieldMaxBytes)
	}
	want := map[string]retention.Field{
		"inherit": {Int: 1000, Origin: retention.OriginGlobal},
		"off":     {Off: true, Origin: retention.OriginPolicy},
		"zero":    {Int: 0, Origin: retention.OriginPolicy},
	}
	for name, w := range want {
		if results[name] != w {
			t.Errorf("%s: %+v, want %+v", name, results[name], w)
		}
	}
	// And they act differently: 1500 sealed bytes in two segments.
	segs := []metadata.Segment{{ID: 1, Bytes: 1000, SealedAt: 5}, {ID: 2, Bytes: 500, SealedAt: 6}, {ID: 3, Active: true}}
	counts := map[string]int{}
	for name, f := range results {
		eff := retention.Resolve(retention.Defaults{retention.FieldMaxBytes: f.Value()}, "", nil)
		counts[name] = len(retention.Expired(eff, 10, segs))
	}
	if counts["inherit"] != 1 || counts["off"] != 0 || counts["zero"] != 2 {
		t.Fatalf("expired counts %v, want inherit 1, off 0, zero 2", counts)
	}
}

func TestDefaultsMissingFieldIsOff(t *testing.T) {
	eff := retention.Resolve(retention.Defaults{}, "", nil)
	for _, nf := range eff.Ordered() {
		if !nf.Off || nf.Origin != retention.OriginGlobal {
			t.Errorf("%s: %+v, want off from global", nf.Name, nf.Field)
		}
	}
	if got := eff.Field("no_such_field"); !got.Off || got.Origin != "" {
		t.Errorf("unknown field: %+v", got)
	}
}

func TestFieldNamesOrderAndCopy(t *testing.T) {
	names := retention.FieldNames()
	if len(names) != 10 || names[0] != retention.FieldMaxAge || names[9] != retention.FieldPlacement {
		t.Fatalf("field names %v", names)
	}
	names[0] = "changed"
	if retention.FieldNames()[0] != retention.FieldMaxAge {
		t.Fatal("FieldNames shares its backing array")
	}
	eff := retention.Resolve(nodeDefaults(), "", nil)
	var ordered []string
	for _, nf := range eff.Ordered() {
		ordered = append(ordered, nf.Name)
	}
	if !slices.Equal(ordered, retention.FieldNames()) {
		t.Fatalf("Ordered %v, FieldNames %v", ordered, retention.FieldNames())
	}
}

func TestTypedAccessors(t *testing.T) {
	eff := retention.Resolve(nodeDefaults(), "", nil)
	if v, ok := eff.SegmentMaxBytes(); !ok || v != 64<<20 {
		t.Errorf("segment_max_bytes %d/%v", v, ok)
	}
	if v, ok := eff.SegmentMaxAgeMs(); !ok || v != 3600*1000 {
		t.Errorf("segment_max_age_ms %d/%v", v, ok)
	}
	if _, ok := eff.DefaultTTLMs(); ok {
		t.Error("default_ttl_ms on, want off")
	}
	if _, ok := eff.MaxBytes(); ok {
		t.Error("max_bytes on, want off")
	}
	if _, ok := eff.MaxRecords(); ok {
		t.Error("max_records on, want off")
	}
	if v, ok := eff.MinDomains(); !ok || v != 1 {
		t.Errorf("min_domains %d/%v", v, ok)
	}
	if v, ok := eff.Placement(); !ok || v != "soft" {
		t.Errorf("placement %q/%v", v, ok)
	}
	if _, ok := eff.Field(retention.FieldPlacement).Bound(); ok {
		t.Error("a string field reads as a bound")
	}
	if _, ok := eff.Field(retention.FieldReplicas).Text(); ok {
		t.Error("an integer field reads as a string")
	}
}
