package retention_test

import (
	"strconv"
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/retention"
)

// hundredYearsMs is 100 years of 365.25 days, in ms.
const hundredYearsMs int64 = 36525 * 24 * 3600 * 1000

// TestEdgeParseTTLHundredYears: a TTL is 1 ms to 100 years; one ms past
// 100 years is not a TTL.
func TestEdgeParseTTLHundredYears(t *testing.T) {
	if ms, ok := retention.ParseTTL([]byte(strconv.FormatInt(hundredYearsMs, 10))); !ok || ms != hundredYearsMs {
		t.Fatalf("ParseTTL(100 years) = %d,%v, want %d,true", ms, ok, hundredYearsMs)
	}
	past := strconv.FormatInt(hundredYearsMs+1, 10)
	if ms, ok := retention.ParseTTL([]byte(past)); ok {
		t.Fatalf("ParseTTL(%s) = %d,true: a TTL past 100 years was accepted (MaxTTLMs = %d, %d years)",
			past, ms, retention.MaxTTLMs, retention.MaxTTLMs/(hundredYearsMs/100))
	}
}

// TestEdgeExpiredBytesPastInt64: max_bytes drops the oldest segments
// while the range's sealed bytes still exceed the bound. When the sum
// passes the int64 range, saturating it and then subtracting makes the
// remainder look smaller than it is and stops too early.
func TestEdgeExpiredBytesPastInt64(t *testing.T) {
	const maxInt = int64(^uint64(0) >> 1)
	eff := retention.Resolve(retention.Defaults{retention.FieldMaxBytes: {Int: maxInt - 60}}, "", nil)
	segs := []metadata.Segment{
		{ID: 1, Bytes: 100, Records: 1, SealedAt: 1},
		{ID: 2, Bytes: maxInt - 50, Records: 1, SealedAt: 1},
		{ID: 3, Bytes: 100, Records: 1, SealedAt: 1},
	}
	// After 1 goes, 2 and 3 still hold maxInt+50 bytes, past the bound;
	// after 2 goes, 100 bytes remain.
	got := retention.Expired(eff, 2, segs)
	if len(got) != 2 || got[0].Segment != 1 || got[1].Segment != 2 {
		t.Fatalf("Expired = %v, want segments 1 and 2 by bytes", got)
	}
}
