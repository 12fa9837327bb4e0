package retention_test

import (
	"fmt"
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/retention"
	"pgregory.net/rapid"
)

func effWith(fields map[string]metadata.PolicyValue) retention.Effective {
	return retention.Resolve(retention.Defaults(fields), "", nil)
}

func ids(exp []retention.Expiry) string { return fmt.Sprint(exp) }

func TestExpiredTable(t *testing.T) {
	const now = 1_000_000
	sealed := func(id uint64, bytes int64, records uint64, sealedAt, maxExpiry int64) metadata.Segment {
		return metadata.Segment{ID: id, Bytes: bytes, Records: records, SealedAt: sealedAt, MaxExpiry: maxExpiry}
	}
	active := metadata.Segment{ID: 99, Active: true, Bytes: 1 << 30, Records: 1 << 30}
	cases := []struct {
		name   string
		fields map[string]metadata.PolicyValue
		segs   []metadata.Segment
		want   []retention.Expiry
	}{
		{"nothing on", nil,
			[]metadata.Segment{sealed(1, 10, 1, 1, 0), active}, nil},
		{"age: strictly older than max_age", map[string]metadata.PolicyValue{retention.FieldMaxAge: bound(1000)},
			[]metadata.Segment{sealed(1, 10, 1, now-1001, 0), sealed(2, 10, 1, now-1000, 0), active},
			[]retention.Expiry{{1, retention.ReasonRetention, retention.WhyAge}}},
		{"age stops at the first young segment", map[string]metadata.PolicyValue{retention.FieldMaxAge: bound(1000)},
			[]metadata.Segment{sealed(1, 10, 1, now-5000, 0), sealed(2, 10, 1, now-10, 0), sealed(3, 10, 1, now-5000, 0), active},
			[]retention.Expiry{{1, retention.ReasonRetention, retention.WhyAge}}},
		{"age never expires an undated segment", map[string]metadata.PolicyValue{retention.FieldMaxAge: bound(0)},
			[]metadata.Segment{sealed(1, 10, 1, 0, 0), active}, nil},
		{"ttl first, even with age on", map[string]metadata.PolicyValue{retention.FieldMaxAge: bound(0)},
			[]metadata.Segment{sealed(1, 10, 1, now-5, now), sealed(2, 10, 1, now-5, now+1), active},
			[]retention.Expiry{{1, retention.ReasonTTL, retention.WhyTTL}, {2, retention.ReasonRetention, retention.WhyAge}}},
		{"ttl not yet passed", nil,
			[]metadata.Segment{sealed(1, 10, 1, now-5, now+1), active}, nil},
		{"bytes: drop oldest until within", map[string]metadata.PolicyValue{retention.FieldMaxBytes: bound(200)},
			[]metadata.Segment{sealed(1, 100, 1, 1, 0), sealed(2, 100, 1, 2, 0), sealed(3, 100, 1, 3, 0), sealed(4, 50, 1, 4, 0), active},
			[]retention.Expiry{{1, retention.ReasonRetention, retention.WhyBytes}, {2, retention.ReasonRetention, retention.WhyBytes}}},
		{"bytes exactly at the bound stays", map[string]metadata.PolicyValue{retention.FieldMaxBytes: bound(300)},
			[]metadata.Segment{sealed(1, 100, 1, 1, 0), sealed(2, 200, 1, 2, 0), active}, nil},
		{"records", map[string]metadata.PolicyValue{retention.FieldMaxRecords: bound(10)},
			[]metadata.Segment{sealed(1, 1, 5, 1, 0), sealed(2, 1, 5, 2, 0), sealed(3, 1, 5, 3, 0), active},
			[]retention.Expiry{{1, retention.ReasonRetention, retention.WhyRecords}}},
		{"active segment at the front: nothing", map[string]metadata.PolicyValue{retention.FieldMaxBytes: bound(0)},
			[]metadata.Segment{active}, nil},
		{"zero bound drops every sealed segment", map[string]metadata.PolicyValue{retention.FieldMaxRecords: bound(0)},
			[]metadata.Segment{sealed(1, 1, 1, 1, 0), sealed(2, 1, 1, 2, 0), active},
			[]retention.Expiry{{1, retention.ReasonRetention, retention.WhyRecords}, {2, retention.ReasonRetention, retention.WhyRecords}}},
		{"empty sealed segment under a zero bound", map[string]metadata.PolicyValue{retention.FieldMaxBytes: bound(0)},
			[]metadata.Segment{sealed(1, 0, 0, 1, 0), active}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := retention.Expired(effWith(c.fields), now, c.segs)
			if ids(got) != ids(c.want) {
				t.Fatalf("expired %v, want %v", got, c.want)
			}
		})
	}
}

func TestExpiredIsBounded(t *testing.T) {
	segs := make([]metadata.Segment, 0, 3*retention.MaxPerRange)
	for i := range 3 * retention.MaxPerRange {
		segs = append(segs, metadata.Segment{ID: uint64(i + 1), Bytes: 1, Records: 1, SealedAt: 1})
	}
	got := retention.Expired(effWith(map[string]metadata.PolicyValue{retention.FieldMaxAge: bound(0)}), 10, segs)
	if len(got) != retention.MaxPerRange {
		t.Fatalf("%d expiries, want %d", len(got), retention.MaxPerRange)
	}
	// The next call, on what is left, continues where this one stopped.
	next := retention.Expired(effWith(map[string]metadata.PolicyValue{retention.FieldMaxAge: bound(0)}), 10, segs[len(got):])
	if len(next) == 0 || next[0].Segment != got[len(got)-1].Segment+1 {
		t.Fatalf("next call starts at %v", next)
	}
}

// genSegments draws one range's segments: sealed ones in offset order,
// then usually an active one.
func genSegments(t *rapid.T, now int64) []metadata.Segment {
	n := rapid.IntRange(0, 3*retention.MaxPerRange).Draw(t, "sealed")
	segs := make([]metadata.Segment, 0, n+1)
	for i := range n {
		s := metadata.Segment{
			ID:       uint64(i + 1),
			Bytes:    rapid.Int64Range(0, 1000).Draw(t, "bytes"),
			Records:  rapid.Uint64Range(0, 100).Draw(t, "records"),
			SealedAt: rapid.Int64Range(0, now).Draw(t, "sealed_at"),
		}
		if rapid.Bool().Draw(t, "has_expiry") {
			s.MaxExpiry = rapid.Int64Range(1, 2*now).Draw(t, "max_expiry")
		}
		segs = append(segs, s)
	}
	if rapid.IntRange(0, 9).Draw(t, "no_active") > 0 {
		segs = append(segs, metadata.Segment{ID: uint64(n + 1), Active: true,
			Bytes: rapid.Int64Range(0, 1000).Draw(t, "active_bytes"), Records: rapid.Uint64Range(0, 100).Draw(t, "active_records")})
	}
	return segs
}

func genBoundOrOff(t *rapid.T, label string, hi int64) metadata.PolicyValue {
	if rapid.Bool().Draw(t, label+"_off") {
		return off()
	}
	return bound(rapid.Int64Range(0, hi).Draw(t, label))
}

func sealedSums(segs []metadata.Segment) (bytes int64, records uint64) {
	for _, s := range segs {
		if !s.Active {
			bytes += s.Bytes
			records += s.Records
		}
	}
	return bytes, records
}

// expiredAlone says whether segment s, with the given sealed totals
// remaining from it onwards, meets some expiry rule.
func expiredAlone(eff retention.Effective, now int64, s metadata.Segment, bytes int64, records uint64) bool {
	if s.MaxExpiry != 0 && s.MaxExpiry <= now {
		return true
	}
	if a, on := eff.MaxAgeMs(); on && s.SealedAt != 0 && now-s.SealedAt > a {
		return true
	}
	if b, on := eff.MaxBytes(); on && bytes > b {
		return true
	}
	r, on := eff.MaxRecords()
	return on && records > uint64(r)
}

func TestExpiredProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const now = 1_000_000
		eff := effWith(map[string]metadata.PolicyValue{
			retention.FieldMaxAge:     genBoundOrOff(t, "max_age", now),
			retention.FieldMaxBytes:   genBoundOrOff(t, "max_bytes", 100_000),
			retention.FieldMaxRecords: genBoundOrOff(t, "max_records", 10_000),
		})
		segs := genSegments(t, now)
		got := retention.Expired(eff, now, segs)
		if len(got) > retention.MaxPerRange {
			t.Fatalf("%d expiries, more than %d", len(got), retention.MaxPerRange)
		}
		bytes, records := sealedSums(segs)
		for i, e := range got {
			s := segs[i]
			if e.Segment != s.ID {
				t.Fatalf("expiry %d is segment %d, want %d: not a prefix", i, e.Segment, s.ID)
			}
			if s.Active {
				t.Fatalf("the active segment %d expired", s.ID)
			}
			if !expiredAlone(eff, now, s, bytes, records) {
				t.Fatalf("segment %d expired (%s) but meets no rule", s.ID, e.Why)
			}
			if (e.Reason == retention.ReasonTTL) != (e.Why == retention.WhyTTL) {
				t.Fatalf("expiry %+v: reason and why disagree", e)
			}
			bytes -= s.Bytes
			records -= s.Records
		}
		if len(got) == retention.MaxPerRange {
			return
		}
		if b, on := eff.MaxBytes(); on && bytes > b {
			t.Fatalf("%d sealed bytes remain, max_bytes %d", bytes, b)
		}
		if r, on := eff.MaxRecords(); on && records > uint64(r) {
			t.Fatalf("%d sealed records remain, max_records %d", records, r)
		}
		if len(got) < len(segs) && !segs[len(got)].Active && expiredAlone(eff, now, segs[len(got)], bytes, records) {
			t.Fatalf("stopped at segment %d, which has expired", segs[len(got)].ID)
		}
	})
}
