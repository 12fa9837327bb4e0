package retention

import (
	"math/bits"

	"github.com/malachi-log/malachi/internal/metadata"
)

// MaxPerRange bounds the expiries one call of Expired returns, so one
// sweep's proposals for a range stay small; the next sweep continues.
const MaxPerRange = 64

// Reasons of an expiry, as delete_segment takes them.
const (
	ReasonRetention = "retention" // the reader that had not read it missed it: a skip
	ReasonTTL       = "ttl"       // every record had expired: filtered, never a skip
)

// What made a segment expire.
const (
	WhyAge     = "age"
	WhyBytes   = "bytes"
	WhyRecords = "records"
	WhyTTL     = "ttl"
)

// Expiry is one segment to delete.
type Expiry struct {
	Segment uint64
	Reason  string
	Why     string
}

// Expired returns the sealed segments at the front of one range that
// have expired at nowMs, oldest first, at most MaxPerRange of them. segs
// are the range's segments in offset order. It stops at the first
// segment that is active or has not expired, so the result is always a
// prefix of the range.
func Expired(eff Effective, nowMs int64, segs []metadata.Segment) []Expiry {
	maxAge, ageOn := eff.MaxAgeMs()
	maxBytes, bytesOn := eff.MaxBytes()
	maxRecords, recordsOn := eff.MaxRecords()
	bytes, records := sealedTotals(segs)
	var out []Expiry
	for i := range segs {
		s := &segs[i]
		if s.Active || len(out) == MaxPerRange {
			break
		}
		why := ""
		switch {
		case s.MaxExpiry != 0 && s.MaxExpiry <= nowMs:
			why = WhyTTL
		case ageOn && s.SealedAt != 0 && nowMs-s.SealedAt > maxAge:
			// A segment with no seal time cannot be dated: never by age.
			why = WhyAge
		case bytesOn && bytes.over(uint64(maxBytes)):
			why = WhyBytes
		case recordsOn && records.over(uint64(maxRecords)):
			why = WhyRecords
		default:
			return out
		}
		reason := ReasonRetention
		if why == WhyTTL {
			reason = ReasonTTL
		}
		out = append(out, Expiry{Segment: s.ID, Reason: reason, Why: why})
		bytes = bytes.sub(uint64(max(s.Bytes, 0)))
		records = records.sub(s.Records)
	}
	return out
}

// sealedTotals sums the bytes and records of the sealed segments, wide
// enough that no sum wraps or saturates: a saturated total would shrink
// by each expired segment and stop the drop early.
func sealedTotals(segs []metadata.Segment) (bytes, records wide) {
	for i := range segs {
		if !segs[i].Active {
			bytes = bytes.add(uint64(max(segs[i].Bytes, 0)))
			records = records.add(segs[i].Records)
		}
	}
	return bytes, records
}

// wide is a 128-bit unsigned sum.
type wide struct{ hi, lo uint64 }

func (w wide) add(v uint64) wide {
	lo, carry := bits.Add64(w.lo, v, 0)
	return wide{w.hi + carry, lo}
}

func (w wide) sub(v uint64) wide {
	lo, borrow := bits.Sub64(w.lo, v, 0)
	return wide{w.hi - borrow, lo}
}

// over reports whether w > v.
func (w wide) over(v uint64) bool { return w.hi > 0 || w.lo > v }
