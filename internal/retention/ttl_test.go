package retention_test

import (
	"math"
	"strconv"
	"testing"

	"github.com/malachi-log/malachi/internal/retention"
)

func TestParseTTL(t *testing.T) {
	cases := []struct {
		in   string
		ms   int64
		ok   bool
		note string
	}{
		{"1", 1, true, "smallest"},
		{"60000", 60000, true, "a minute"},
		{"007", 7, true, "leading zeros are digits"},
		{strconv.FormatInt(retention.MaxTTLMs, 10), retention.MaxTTLMs, true, "100 years"},
		{strconv.FormatInt(retention.MaxTTLMs+1, 10), 0, false, "past 100 years"},
		{"", 0, false, "empty"},
		{"0", 0, false, "zero"},
		{"000", 0, false, "zero with leading zeros"},
		{"-5", 0, false, "sign"},
		{"+5", 0, false, "leading plus"},
		{" 5", 0, false, "leading space"},
		{"5 ", 0, false, "trailing space"},
		{"5\n", 0, false, "newline"},
		{"1e3", 0, false, "exponent"},
		{"1.5", 0, false, "fraction"},
		{"0x10", 0, false, "hex"},
		{"9223372036854775807", 0, false, "int64 max, past 100 years"},
		{"9223372036854775808", 0, false, "overflows int64"},
		{"00000000000000000001", 0, false, "20 digits"},
		{"99999999999999999999999", 0, false, "far past int64"},
		{"５", 0, false, "a non-ASCII digit"},
	}
	for _, c := range cases {
		ms, ok := retention.ParseTTL([]byte(c.in))
		if ms != c.ms || ok != c.ok {
			t.Errorf("%s: ParseTTL(%q) = %d, %v; want %d, %v", c.note, c.in, ms, ok, c.ms, c.ok)
		}
	}
}

func TestExpiryAt(t *testing.T) {
	cases := []struct{ now, ttl, want int64 }{
		{1000, 500, 1500},
		{1000, 0, 0},
		{1000, -1, 0},
		{math.MaxInt64 - 10, 100, math.MaxInt64},
		{math.MaxInt64, retention.MaxTTLMs, math.MaxInt64},
		{-1, 1, 1}, // a clock before 1970 still yields an expiry, never "none"
	}
	for _, c := range cases {
		if got := retention.ExpiryAt(c.now, c.ttl); got != c.want {
			t.Errorf("ExpiryAt(%d, %d) = %d, want %d", c.now, c.ttl, got, c.want)
		}
	}
}
