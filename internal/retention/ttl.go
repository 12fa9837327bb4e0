package retention

import (
	"math"
	"strconv"
)

// Reserved record headers.
const (
	// TTLHeader carries a record's TTL from the producer: decimal ms.
	TTLHeader = "malachi.ttl_ms"
	// ExpiryHeader is reserved: the node removes it from every record, so
	// no reader takes a client's value for the node's expiry.
	// The node overwrites any value a client sends.
	ExpiryHeader = "malachi.expiry_ms"
)

// MaxTTLMs is the longest TTL accepted: 100 years of 365.25 days.
const MaxTTLMs int64 = 36525 * 24 * 3600 * 1000

// maxTTLDigits is the most digits a TTL may have: an int64's.
const maxTTLDigits = 19

// ParseTTL reads a TTL header value: ASCII decimal digits only (no sign,
// no spaces), 1 to 19 of them, a value from 1 ms to MaxTTLMs. Anything
// else is not ok, and the record then has no TTL of its own.
func ParseTTL(v []byte) (ms int64, ok bool) {
	if len(v) == 0 || len(v) > maxTTLDigits {
		return 0, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 1 || n > MaxTTLMs {
		return 0, false
	}
	return n, true
}

// ExpiryAt is the expiry of a record stored at nowMs with ttlMs:
// nowMs+ttlMs, saturating at the largest time rather than wrapping. A TTL
// that is not positive means no expiry (0).
func ExpiryAt(nowMs, ttlMs int64) int64 {
	if ttlMs <= 0 {
		return 0
	}
	if nowMs > math.MaxInt64-ttlMs {
		return math.MaxInt64
	}
	return max(nowMs+ttlMs, 1)
}
